package lifecycle

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// reconnectGate holds the tmux client's reconnect (in its StartServer hook, which
// runs before a dial that finds no server) while closed, so a test can act while
// the census is unsynced for as long as it needs.
type reconnectGate struct {
	mu   sync.Mutex
	held chan struct{} // nil: pass through
}

func (g *reconnectGate) hook(ctx context.Context) error {
	g.mu.Lock()
	ch := g.held
	g.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
	return nil // the control client starts the server itself
}

func (g *reconnectGate) hold() {
	g.mu.Lock()
	g.held = make(chan struct{})
	g.mu.Unlock()
}

func (g *reconnectGate) open() {
	g.mu.Lock()
	if g.held != nil {
		close(g.held)
		g.held = nil
	}
	g.mu.Unlock()
}

// killServerUnsynced SIGKILLs the supervised tmux server with the reconnect held,
// and waits until the census knows it is unsynced. It returns the dead server's pid.
func killServerUnsynced(t *testing.T, e *env, g *reconnectGate) int {
	t.Helper()
	info, ok := e.census.Info()
	if !ok {
		t.Fatal("census has no server")
	}
	g.hold()
	if err := syscall.Kill(info.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "census unsynced after the server died", func() bool { return !e.census.Synced() })
	return info.PID
}

// TestCreateRightAfterServerDeath: a create sent while the census is unsynced
// because the tmux server was SIGKILLed waits for the reconnect, which starts a
// new server, and publishes there instead of failing tmux_unavailable at once.
func TestCreateRightAfterServerDeath(t *testing.T) {
	g := &reconnectGate{}
	e := startEnvServer(t, "", "", false, g.hook)
	e.create(t, "before") // a live session on the server about to die
	dead := killServerUnsynced(t, e, g)
	id, spec := e.identity("after")
	type outcome struct {
		res CreateResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
		done <- outcome{res, err}
	}()
	// Only once the create is waiting for the census, let the reconnect go.
	waitFor(t, "create waiting for the census", func() bool { return e.m.syncWaits.Load() > 0 })
	g.open()
	out := <-done
	if out.err != nil {
		t.Fatalf("create right after the server died: %v", out.err)
	}
	info, _ := e.census.Info()
	if out.res.Status != verdict.VerdictPublished || info.PID == dead {
		t.Fatalf("create %+v on server %d (dead one %d)", out.res, info.PID, dead)
	}
	if s := e.sessions(id.Digest()); len(s) != 1 || s[0] != out.res.Session.ID {
		t.Fatalf("sessions on the new server %v, create %+v", s, out.res)
	}
}

// TestCreateUnsyncedFailsClosedWithinCallerContext: while the census cannot sync,
// a create waits no longer than its caller's context and then fails closed with
// tmux_unavailable, leaving no row.
func TestCreateUnsyncedFailsClosedWithinCallerContext(t *testing.T) {
	g := &reconnectGate{}
	e := startEnvServer(t, "", "", false, g.hook)
	killServerUnsynced(t, e, g)
	defer g.open()
	id, spec := e.identity("unsynced")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := e.m.Create(ctx, CreateRequest{Identity: id, Spec: spec})
	if verdict.CodeOf(err) != verdict.CodeTmuxUnavailable {
		t.Fatalf("create with the census unsynced: %v", err)
	}
	if e.m.syncWaits.Load() == 0 {
		t.Fatal("the create did not wait for the census")
	}
	if rows, _ := e.store.Reservations(context.Background()); len(rows) != 0 {
		t.Fatalf("refusal left rows %+v", rows)
	}
}

// TestSpawnNotSentIsSentOnceMore: a new-session that provably was not written (the
// server life changed under it) is sent once more in the current life, so the
// create publishes; a second refusal fails tmux_unavailable with nothing left.
func TestSpawnNotSentIsSentOnceMore(t *testing.T) {
	e := startEnv(t, "", "", false)
	var mu sync.Mutex
	refuse := 1
	withFaults(e, func(args []string) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if args[0] == "new-session" && refuse > 0 {
			refuse--
			return false, tmuxctl.ErrLifeChanged
		}
		return false, nil
	})
	id, spec := e.identity("resend")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	if err != nil || res.Status != verdict.VerdictPublished {
		t.Fatalf("create after one unsent new-session: %+v %v", res, err)
	}
	if s := e.sessions(id.Digest()); len(s) != 1 || s[0] != res.Session.ID {
		t.Fatalf("sessions %v, create %+v", s, res)
	}

	mu.Lock()
	refuse = 2
	mu.Unlock()
	id2, spec2 := e.identity("resend2")
	_, err = e.m.Create(context.Background(), CreateRequest{Identity: id2, Spec: spec2})
	if verdict.CodeOf(err) != verdict.CodeTmuxUnavailable {
		t.Fatalf("create after two unsent new-sessions: %v", err)
	}
	if rec := lastVerdict(t, e, id2); rec.Evidence["compensation"] != compReleased {
		t.Fatalf("verdict %+v", rec)
	}
	checkNoTrace(t, e, id2)
}
