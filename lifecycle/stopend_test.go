package lifecycle

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestDeadPaneSessionGoneBeforeIdentityFree: an agent exits, its pane is kept
// dead (remain-on-exit), and its generation is ended. A create that reserves
// at the first moment the identity is free (endedHook: right after MarkEnded)
// must find no session of the identity left: the dead-pane session is removed
// before the generation is marked ended, else the create's session stands
// beside it (the model's n <= 1, the shape of -DRESTART_TWO_STEPS).
func TestDeadPaneSessionGoneBeforeIdentityFree(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec := e.identity("deadpane")
	type seen struct {
		sessions []string
		res      CreateResult
		err      error
	}
	got := make(chan seen, 1)
	var once sync.Once
	endedHook = func(p fence.Published) {
		if p.Identity.SessionID != id.SessionID || p.Generation != 1 {
			return
		}
		once.Do(func() {
			s := seen{sessions: e.sessions(id.Digest())}
			again := spec
			again.Argv = []string{spec.Argv[0], "agent", "sleep"}
			s.res, s.err = e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: again, Wait: time.Minute})
			s.sessions = append(s.sessions, "|")
			s.sessions = append(s.sessions, e.sessions(id.Digest())...)
			got <- s
		})
	}
	t.Cleanup(func() { endedHook = nil })
	first := spec
	first.Argv = []string{spec.Argv[0], "agent", "exit", "3"}
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: first, Wait: time.Second})
	if err != nil || res.Status != verdict.VerdictPublished {
		t.Fatalf("create: %+v %v", res, err)
	}
	var s seen
	select {
	case s = <-got:
	case <-time.After(60 * time.Second):
		t.Fatal("generation 1 never marked ended")
	}
	if s.err != nil || s.res.Status != verdict.VerdictPublished || s.res.Session.Generation != 2 {
		t.Fatalf("create at the moment the identity was freed: %+v %v", s.res, s.err)
	}
	// Before the create: none; after it: only the create's own session.
	if len(s.sessions) != 2 || s.sessions[0] != "|" || s.sessions[1] != s.res.Session.ID {
		t.Fatalf("sessions of the identity when it was freed | after the create: %v (dead session %s)",
			s.sessions, res.Session.ID)
	}
	// The census's sight of the removal joined the run and wrote nothing: once
	// the run is over and the census has dropped the session, generation 1
	// has one ended verdict.
	waitFor(t, "the stop run over and the dead session out of the census", func() bool {
		e.m.mu.Lock()
		n := len(e.m.stops)
		e.m.mu.Unlock()
		_, listed := e.census.ByID(res.Session.ID)
		return n == 0 && !listed
	})
	n := 0
	for _, r := range e.verdicts(id) {
		if r.Verdict == verdict.VerdictEnded && r.Session != nil && r.Session.Generation == 1 {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d ended verdicts of generation 1: %v", n, verdictNames(e.verdicts(id)))
	}
}

// TestListShowsStoppingWithoutSession: a session killed by hand whose agent
// ignores the hangup leaves its generation stopping with no session. `ls`
// (List, and AppendListJSON byte for byte) lists it from its published record
// with state stopping, as `show` does, and stops listing it once its
// processes are proven gone — also from a whole answer reused while the
// census and the fence did not change.
func TestListShowsStoppingWithoutSession(t *testing.T) {
	e := startEnv(t, "", "", false)
	res, err := e.createSpec(t, "gone", time.Second, 5*time.Minute, "agent", "ignore")
	if err != nil {
		t.Fatal(err)
	}
	var agent int
	waitFor(t, "agent start", func() bool { agent = agentPID(res.Session.PanePID); return agent != 0 && isReady(agent) })
	if out, err := execTmux(e, "kill-session", "-t", res.Session.ID); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	stopping := func(l ListResult) *View {
		for i := range l.Sessions {
			if s := &l.Sessions[i]; s.ID == res.Session.ID && s.Name == res.Session.Name {
				return s
			}
		}
		return nil
	}
	var v *View
	waitFor(t, "ls to list the stopping generation without its session", func() bool {
		_, listed := e.census.ByID(res.Session.ID)
		l, err := e.m.List(context.Background())
		if err != nil || listed {
			return false
		}
		v = stopping(l)
		return v != nil && v.State == StateStopping
	})
	if !v.Managed || !v.Authoritative || v.Generation != 1 || v.StopTimeoutMS != 300000 ||
		v.SessionID != "gone" || v.PanePID != res.Session.PanePID {
		t.Fatalf("stopping view %+v", *v)
	}
	var fromJSON ListResult
	if err := json.Unmarshal([]byte(listJSON(t, e)), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if j := stopping(fromJSON); j == nil || j.State != StateStopping {
		t.Fatalf("ls --json does not list the stopping generation: %+v", fromJSON.Sessions)
	}
	_ = listJSON(t, e) // a second, reused answer
	// The test's own processes (started by its daemon): prove them gone.
	for _, p := range []int{agent, res.Session.PanePID} {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	id, _ := e.identity("gone")
	e.ended(t, id)
	waitFor(t, "ls to drop the ended generation", func() bool {
		var l ListResult
		if err := json.Unmarshal([]byte(listJSON(t, e)), &l); err != nil {
			t.Fatal(err)
		}
		return stopping(l) == nil
	})
}

// TestReleaseRemovesDeadSession: a generation whose agent exited (its pane
// kept dead) but whose processes cannot be proven gone is blocked with its
// session still there. `fence release` removes that session before it frees
// the identity: the next create's session is the identity's only one.
func TestReleaseRemovesDeadSession(t *testing.T) {
	old := killProofWait
	killProofWait = 200 * time.Millisecond
	t.Cleanup(func() { killProofWait = old })
	e := startEnvWith(t, &env{noCgroup: true}, "", false)
	res, err := e.createSpec(t, "deadstuck", time.Second, 100*time.Millisecond, "agent", "sleep")
	if err != nil {
		t.Fatal(err)
	}
	id, _ := e.identity("deadstuck")
	var agent int
	waitFor(t, "agent start", func() bool { agent = agentPID(res.Session.PanePID); return agent != 0 })
	// Point the hold at a cgroup whose events cannot be read: unknown.
	bad := filepath.Join(t.TempDir(), "cg")
	if err := os.MkdirAll(filepath.Join(bad, "cgroup.events"), 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(e.home, "fence.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE identities SET cgroup = ?, pane_pid = 0, pane_start = 0`, bad); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_ = syscall.Kill(agent, syscall.SIGKILL) // the agent ends; its helper records it and exits: a dead pane
	waitFor(t, "unresolved verdict", func() bool { return count(e.verdicts(id), verdict.VerdictUnresolved) > 0 })
	waitFor(t, "the blocked generation's session listed with its pane dead", func() bool {
		s, ok := e.census.ByID(res.Session.ID)
		return ok && s.PaneDead
	})
	pub, _, _ := e.store.PublishedFor(context.Background(), id)
	rec, err := e.m.Release(context.Background(), pub.ReservationID)
	if err != nil || rec.Verdict != verdict.VerdictReleased || rec.Evidence["session_removed"] != res.Session.ID {
		t.Fatalf("release: %+v %v", rec, err)
	}
	if got := e.sessions(id.Digest()); len(got) != 0 {
		t.Fatalf("sessions of the identity after release: %v", got)
	}
	again, err := e.createSpec(t, "deadstuck", time.Second, time.Second, "agent", "sleep")
	if err != nil || again.Status != verdict.VerdictPublished {
		t.Fatalf("create after release: %+v %v", again, err)
	}
	if got := e.sessions(id.Digest()); len(got) != 1 || got[0] != again.Session.ID {
		t.Fatalf("sessions of the identity after the next create: %v, want only %s", got, again.Session.ID)
	}
}

// TestCrashBetweenRemovalAndEnded: the state a daemon leaves when it dies
// between finishEnd's removal of a dead-pane session and MarkEnded — the stop
// recorded in the fence, the session gone, the processes gone, the generation
// not ended. The next daemon's start continues the stop and writes the one
// ended verdict, with the reason the stop was recorded with.
func TestCrashBetweenRemovalAndEnded(t *testing.T) {
	e := startEnv(t, "", "", true) // no end detection: nothing ends it but Recover
	res, err := e.createSpec(t, "crashgap", time.Second, time.Second, "agent", "exit", "3")
	if err != nil {
		t.Fatal(err)
	}
	id, _ := e.identity("crashgap")
	waitFor(t, "the agent's exit (a dead pane)", func() bool {
		s, ok := e.census.ByID(res.Session.ID)
		return ok && s.PaneDead
	})
	pub, _, err := e.store.PublishedFor(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := e.store.BeginStop(context.Background(), id, pub.Generation, verdict.ReasonAgentExited,
		time.Now().Add(time.Second)); err != nil || !ok {
		t.Fatalf("begin stop: %v %v", ok, err)
	}
	if out, err := execTmux(e, "kill-session", "-t", res.Session.ID); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := e.m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := e.ended(t, id)
	if rec.Reason != verdict.ReasonAgentExited || rec.Session == nil || rec.Session.Generation != 1 {
		t.Fatalf("ended verdict %+v", rec)
	}
	again, err := e.createSpec(t, "crashgap", time.Second, time.Second, "agent", "sleep")
	if err != nil || again.Status != verdict.VerdictPublished || again.Session.Generation != 2 {
		t.Fatalf("create after: %+v %v", again, err)
	}
}
