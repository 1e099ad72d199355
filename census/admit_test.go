package census

import (
	"context"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// slowRelists are production-like timings stretched so that a burst's
// trailing re-list and the spacing of id-only lists cannot win any race:
// only an admission (and the leading edge of an idle census) can list a session.
func slowRelists() *config {
	cfg := testConfig()
	cfg.quiet, cfg.maxDelay = time.Hour, time.Hour
	return &cfg
}

// A killed server yields Removed, server_exited, for every session it had,
// sessions created inside a burst (admitted, never re-listed) included; the
// new life's first sync then says Resync, for anything never listed.
func TestServerKilledInsideBurst(t *testing.T) {
	r := newRig(t, slowRelists())
	sub := r.c.Subscribe(256)
	defer sub.Close()
	info, _ := r.c.Info()
	r.tmux("new-session", "-d", "-s", "lead", "cat")
	eventually(t, "lead listed", func() bool { _, ok := r.c.ByName("lead"); return ok })
	want := map[string]bool{}
	if s, ok := r.c.ByName("lead"); ok {
		want[s.ID] = true
	}
	for i := 0; i < 5; i++ {
		want[createAdmitted(t, r, "b"+strconv.Itoa(i))] = true
	}
	if err := os.WriteFile(r.gate, nil, 0o600); err != nil { // hold the reconnect off
		t.Fatal(err)
	}
	if err := syscall.Kill(info.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for len(want) > 0 {
		ch := next(t, sub)
		if ch.Kind != Removed {
			continue // Added for the burst's sessions, before the kill
		}
		if ch.Reason != ReasonServerExited || ch.Life != info.ServerLife || !want[ch.Session.ID] {
			t.Fatalf("want Removed server_exited of the old life, got %+v", ch)
		}
		delete(want, ch.Session.ID)
	}
	os.Remove(r.gate)
	if ch := next(t, sub); ch.Kind != Resync {
		t.Fatalf("want a Resync mark at the new life's first sync, got %+v", ch)
	}
}

// Creates inside a burst are listed at once — the id-only list a
// %sessions-changed gets reads a new id in full right away, and one held back
// by the lists' spacing runs when the spacing allows, never at the burst's
// debounce (an hour here) — so a server killed right after still yields
// Removed, server_exited, for every one of them. Before, a new id seen by a
// mid-burst id-only list waited for the debounce, and the killed server's
// sessions were never Added, hence never Removed.
func TestCreatesInsideBurstListedThenServerKilled(t *testing.T) {
	r := newRig(t, slowRelists())
	sub := r.c.Subscribe(256)
	defer sub.Close()
	info, _ := r.c.Info()
	want := map[string]bool{}
	for i := 0; i < 4; i++ {
		want[r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", "c"+strconv.Itoa(i), "cat")] = true
	}
	added := map[string]bool{}
	for len(added) < len(want) {
		if ch := next(t, sub); ch.Kind == Added && want[ch.Session.ID] {
			added[ch.Session.ID] = true
		}
	}
	if err := os.WriteFile(r.gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(info.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for len(want) > 0 {
		ch := next(t, sub)
		if ch.Kind != Removed || ch.Reason != ReasonServerExited || !want[ch.Session.ID] {
			t.Fatalf("want Removed server_exited for the burst's sessions, got %+v", ch)
		}
		delete(want, ch.Session.ID)
	}
	os.Remove(r.gate)
}

// createAdmitted creates a session over the census's own control connection
// and admits it from the new-session reply, as the create saga does.
func createAdmitted(t *testing.T, r *rig, name string) string {
	t.Helper()
	info, _ := r.c.Info()
	rep, err := r.cl.CommandIn(context.Background(), info.ServerLife, "new-session", "-d", "-P", "-F", "#{session_id}", "-s", name, "cat")
	if err != nil || len(rep.Lines) != 1 {
		t.Fatalf("new-session %s: %v %v", name, rep.Lines, err)
	}
	id := rep.Lines[0]
	if ok, err := r.c.AdmitCreated(info.ServerLife, Session{ID: id, Name: name}, rep.Number, 0); !ok || err != nil {
		t.Fatalf("AdmitCreated %s: %v %v", id, ok, err)
	}
	return id
}
