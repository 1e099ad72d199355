package integration

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/internal/pgtest"
)

// TestFleetLookupsWhileDatabaseDown: with the PostgreSQL fence stopped, the
// daemon still answers ls and show of its own sessions (from the census and
// what it last read of the fence), while a create fails closed with
// fence_unavailable; when the database is back, creates work again.
func TestFleetLookupsWhileDatabaseDown(t *testing.T) {
	srv := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	url, err := srv.CreateDB(ctx, "fleet")
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	a := NewHome(t).Start(t, DaemonOpts{Env: []string{"SKC_FENCE=" + url, "SKC_HOST=host-a"}})
	spec := NewSpec(t, "down-1")
	sess := a.MustCreate(t, spec, "published")
	if l := a.List(t); len(l.Sessions) != 1 {
		t.Fatalf("ls before: %+v", l.Sessions)
	}
	if r := a.CLI(t, "show", "--json", sess.Name); r.Code != 0 {
		t.Fatalf("show before the stop\n%s", r)
	}
	quiet := NewSpec(t, "down-quiet") // never shown before the outage
	gone := a.MustCreate(t, quiet, "published")
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if l := a.List(t); len(l.Sessions) != 2 {
		t.Fatalf("ls with the database down: %+v", l.Sessions)
	}
	if r := a.CLI(t, "show", "--json", sess.Name); r.Code != 0 {
		t.Fatalf("show with the database down\n%s", r)
	}
	// By identity too, as by name: the session is this host's.
	if r := a.CLI(t, "show", "--json", "--state-dir", spec.StateDir, "--session-id", spec.SessionID); r.Code != 0 ||
		!strings.Contains(r.Stdout, sess.Name) {
		t.Fatalf("show by identity with the database down\n%s", r)
	}
	// An identity the fence was never read for: its session, from the census,
	// and word that the fence's part is not known.
	if r := a.CLI(t, "show", "--json", "--state-dir", quiet.StateDir, "--session-id", quiet.SessionID); r.Code != 0 ||
		!strings.Contains(r.Stdout, gone.Name) || !strings.Contains(r.Stdout, `"fence_unavailable":true`) {
		t.Fatalf("show of a session never shown, with the database down\n%s", r)
	}
	expectError(t, a.CLI(t, NewSpec(t, "down-2").Args()...), 1, "error", "fence_unavailable", "")
	// An agent that exits while the database is away is ended once it is back.
	if err := syscall.Kill(gone.PanePID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, waitDeadline, "the agent gone", func() error {
		if err := syscall.Kill(gone.PanePID, 0); err == nil {
			return errorf("pid %d still runs", gone.PanePID)
		}
		return nil
	})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	a.WaitVerdict(t, "the ended verdict of the agent that exited during the outage", func(v Verdict) bool {
		return v.SKC.Verdict == "ended" && v.SessionName() == gone.Name && v.Event.Reason == "agent_exited"
	})
	deadline := time.Now().Add(waitDeadline)
	for {
		r := a.CLI(t, NewSpec(t, "down-3").Args()...)
		if r.Code == 0 {
			a.NoteSession(t)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("creates did not resume after the database returned\n%s", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFleetKillAcrossAnOutage: a kill whose grace spans the database's
// outage SIGKILLs the agent and removes its session, and answers
// fence_unavailable (it could not write the end); once the database is back
// the ended verdict filed is the one the stop assembled — SIGKILL,
// sigkill_sent — not one rebuilt from what was left (it said sigkill_sent
// false, no exit; found outside-in).
func TestFleetKillAcrossAnOutage(t *testing.T) {
	srv := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	url, err := srv.CreateDB(ctx, "fleet")
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	a := NewHome(t).Start(t, DaemonOpts{Env: []string{"SKC_FENCE=" + url, "SKC_HOST=host-a"}})
	spec := NewSpec(t, "down-kill")
	spec.Argv = []string{"sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"}
	args := createArgs(spec, "--stop-timeout", "5s")
	r := a.CLI(t, args...)
	var created struct {
		Session Session `json:"session"`
	}
	mustJSON(t, r, &created)
	if r := a.CLI(t, "wait", "--json", created.Session.Name, "--text", "ready", "--timeout", "30s"); r.Code != 0 {
		t.Fatalf("wait for the agent's trap\n%s", r)
	}
	killed := make(chan Result, 1)
	go func() { killed <- a.CLI(t, "kill", "--json", created.Session.Name) }()
	var show struct {
		Session *Session `json:"session"`
	}
	waitFor(t, "the stop begun", func() bool { // then the database goes, inside the grace
		mustJSON(t, a.CLI(t, "show", "--json", created.Session.Name), &show)
		return show.Session != nil && show.Session.State == "stopping"
	})
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if r := <-killed; r.Code == 0 {
		t.Logf("the kill filed its end before the outage (a slow machine): nothing to check\n%s", r)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	v := a.WaitVerdict(t, "the killed agent's ended verdict", func(v Verdict) bool {
		return v.SKC.Verdict == "ended" && v.SessionName() == created.Session.Name
	})
	if v.SKC.Exit == nil || v.SKC.Exit.Signal != "SIGKILL" || v.SKC.Evidence["sigkill_sent"] != true {
		t.Fatalf("ended verdict after the outage: %s", v)
	}
	a.Stop(t)
}
