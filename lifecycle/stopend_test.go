package lifecycle

import (
	"context"
	"sync"
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
	if n := count(e.verdicts(id), verdict.VerdictEnded); n != 1 {
		t.Fatalf("%d ended verdicts: %v", n, verdictNames(e.verdicts(id)))
	}
}
