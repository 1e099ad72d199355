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
// only Admit (and the leading edge of an idle census) can list a session.
func slowRelists() *config {
	cfg := testConfig()
	cfg.quiet, cfg.maxDelay = time.Hour, time.Hour
	return &cfg
}

// A session ended right after its create — inside a burst, where the census's
// own re-list is debounced — is still reported Removed once it was admitted:
// the supervisor admits every session it creates before answering.
func TestEndRightAfterCreateYieldsRemoved(t *testing.T) {
	r := newRig(t, slowRelists())
	sub := r.c.Subscribe(64)
	defer sub.Close()
	info, _ := r.c.Info()
	r.tmux("new-session", "-d", "-s", "lead", "cat") // leading edge: the burst begins
	eventually(t, "lead listed", func() bool { _, ok := r.c.ByName("lead"); return ok })
	id := r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", "brief", "cat")
	if ok, err := r.c.Admit(context.Background(), info.ServerLife, id); !ok || err != nil {
		t.Fatalf("Admit %s: %v %v", id, ok, err)
	}
	r.tmux("kill-session", "-t", id)
	for {
		ch := next(t, sub)
		if ch.Kind == Removed && ch.Session.ID == id {
			if ch.Reason != ReasonGone || ch.Session.Name != "brief" || ch.Life != info.ServerLife {
				t.Fatalf("Removed %+v", ch)
			}
			break
		}
	}
	if _, ok := r.c.ByID(id); ok {
		t.Fatal("the ended session is still in the census")
	}
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
		id := r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", "b"+strconv.Itoa(i), "cat")
		if ok, err := r.c.Admit(context.Background(), info.ServerLife, id); !ok || err != nil {
			t.Fatalf("Admit %s: %v %v", id, ok, err)
		}
		want[id] = true
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

// Admit refuses another server life and answers false for a session that is
// already gone, without adding anything.
func TestAdmitOtherLifeOrGone(t *testing.T) {
	r := newRig(t, nil)
	info, _ := r.c.Info()
	other := info.ServerLife
	other.StartTime++
	if ok, err := r.c.Admit(context.Background(), other, "$1"); ok || err == nil {
		t.Fatalf("Admit in another life: %v %v", ok, err)
	}
	if ok, err := r.c.Admit(context.Background(), info.ServerLife, "$999"); ok || err != nil {
		t.Fatalf("Admit of a missing id: %v %v", ok, err)
	}
	if _, ok := r.c.ByID("$999"); ok {
		t.Fatal("a missing id was admitted")
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
