package lifecycle

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// busyFence answers identity_fence_contended (writing nothing) to the first
// advances Advance calls and publishes Publish calls: the fence as an
// attempt's own transitions meet it while other creators' transactions queue
// on the identity's lock (seen with three hosts racing on PostgreSQL).
type busyFence struct {
	fence.Fence
	advances, publishes atomic.Int64
}

func (f *busyFence) Advance(ctx context.Context, r *fence.Reservation, to fence.Phase, p fence.Patch) error {
	if f.advances.Add(-1) >= 0 {
		return verdict.Errorf(verdict.CodeIdentityFenceContended, nil, "test: the identity is locked by another writer")
	}
	return f.Fence.Advance(ctx, r, to, p)
}

func (f *busyFence) Publish(ctx context.Context, r *fence.Reservation, rec verdict.Record) (fence.Published, verdict.Record, error) {
	if f.publishes.Add(-1) >= 0 {
		return fence.Published{}, verdict.Record{}, verdict.Errorf(verdict.CodeIdentityFenceContended, nil, "test: the identity is locked by another writer")
	}
	return f.Fence.Publish(ctx, r, rec)
}

// TestOwnTransitionsWaitOutABusyFence: a create whose own advances and
// publication meet a busy fence waits it out and publishes, instead of
// failing with fence_unavailable and leaving its row to recovery.
func TestOwnTransitionsWaitOutABusyFence(t *testing.T) {
	busy := &busyFence{}
	busy.advances.Store(5)
	busy.publishes.Store(3)
	e := startEnvWith(t, &env{wrapFence: func(f fence.Fence) fence.Fence { busy.Fence = f; return busy }}, "", false)
	id, spec := e.identity("busy")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	if err != nil || res.Status != verdict.VerdictPublished {
		t.Fatalf("create with a busy fence: %+v %v", res, err)
	}
	if a, p := busy.advances.Load(), busy.publishes.Load(); a >= 0 || p >= 0 {
		t.Fatalf("busy answers left unconsumed: %d advances, %d publishes", a+1, p+1)
	}
	if n := len(e.sessions(id.Digest())); n != 1 {
		t.Fatalf("%d sessions of the identity, want 1", n)
	}
}

// downFence fails, while down is set, every read and write end detection
// makes (fence_unavailable): the fence as a fleet's daemon meets it while
// PostgreSQL restarts. missed counts the calls it failed.
type downFence struct {
	fence.Fence
	down     atomic.Bool
	downMark atomic.Bool // only the ended verdict's write fails
	missed   atomic.Int64
}

func (f *downFence) MarkEndedNext(ctx context.Context, id fence.Identity, gen uint64, rec verdict.Record, next fence.RestartNext, also *verdict.Record) (bool, verdict.Record, error) {
	if f.down.Load() || f.downMark.Load() {
		return false, verdict.Record{}, f.unavailable()
	}
	return f.Fence.MarkEndedNext(ctx, id, gen, rec, next, also)
}

func (f *downFence) unavailable() error {
	f.missed.Add(1)
	return verdict.Errorf(verdict.CodeFenceUnavailable, nil, "test: the fence is down")
}

func (f *downFence) PublishedByTmux(ctx context.Context, pid int, start int64, id string) (fence.Published, bool, error) {
	if f.down.Load() {
		return fence.Published{}, false, f.unavailable()
	}
	return f.Fence.PublishedByTmux(ctx, pid, start, id)
}

func (f *downFence) Identities(ctx context.Context) ([]fence.Published, error) {
	if f.down.Load() {
		return nil, f.unavailable()
	}
	return f.Fence.Identities(ctx)
}

func (f *downFence) BeginStop(ctx context.Context, id fence.Identity, gen uint64, reason string, deadline time.Time) (fence.Published, bool, error) {
	if f.down.Load() {
		return fence.Published{}, false, f.unavailable()
	}
	return f.Fence.BeginStop(ctx, id, gen, reason, deadline)
}

// TestEndMissedWhileFenceDown: an agent that exits while the fence cannot
// be read is ended once it can — end detection was told of the exit once,
// and the retry (endretry.go) looks again — with the agent's own exit status.
func TestEndMissedWhileFenceDown(t *testing.T) {
	df := &downFence{}
	e := startEnvWith(t, &env{wrapFence: func(f fence.Fence) fence.Fence { df.Fence = f; return df }}, "", false)
	id, res := e.create(t, "down", "agent", "sleep", "60")
	df.down.Store(true)
	pid := res.Session.PanePID
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "end detection meeting the fence down", func() bool { return df.missed.Load() > 0 && !pidAlive(pid) })
	for _, r := range e.verdicts(id) {
		if r.Verdict == verdict.VerdictEnded {
			t.Fatal("ended while the fence was down")
		}
	}
	df.down.Store(false)
	rec := e.ended(t, id)
	if rec.Reason != verdict.ReasonAgentExited || rec.Exit == nil || rec.Exit.Signal != "SIGTERM" {
		t.Fatalf("ended verdict after the fence came back: %+v", rec)
	}
}

// TestStopFiledAfterTheFenceReturns: a kill whose ended verdict the fence
// cannot take (down while the agent, ignoring SIGTERM, waits out its grace)
// SIGKILLs the agent and removes its session; once the fence answers, the
// retry files the end the stop assembled — SIGKILL, sigkill_sent — not one
// rebuilt from what is left (it said sigkill_sent false, no exit; found
// outside-in with PostgreSQL stopped during a kill).
func TestStopFiledAfterTheFenceReturns(t *testing.T) {
	df := &downFence{}
	e := startEnvWith(t, &env{wrapFence: func(f fence.Fence) fence.Fence { df.Fence = f; return df }}, "", false)
	res, err := e.createSpec(t, "downkill", time.Second, 300*time.Millisecond, "agent", "ignore")
	if err != nil {
		t.Fatal(err)
	}
	pid := res.Session.PanePID
	waitFor(t, "agent ready", func() bool { return isReady(pid) })
	df.downMark.Store(true)
	_, err = e.m.Kill(context.Background(), Ref{Name: res.Session.Name})
	if verdict.CodeOf(err) != verdict.CodeFenceUnavailable || pidAlive(pid) {
		t.Fatalf("kill with the fence down: %v (agent alive %v)", err, pidAlive(pid))
	}
	// Down for every read too until the session is gone from tmux, so the
	// retry meets what a longer outage leaves: no session, no process.
	df.down.Store(true)
	id := fence.Identity{StateDir: res.Session.StateDir, SessionID: res.Session.SessionID}
	waitFor(t, "the session gone", func() bool { return len(e.sessions(id.Digest())) == 0 })
	missed := df.missed.Load()
	waitFor(t, "a retry meeting the fence down", func() bool { return df.missed.Load() > missed })
	df.down.Store(false)
	df.downMark.Store(false)
	rec := e.ended(t, id)
	if rec.Exit == nil || rec.Exit.Signal != "SIGKILL" || rec.Evidence["sigkill_sent"] != true {
		t.Fatalf("ended verdict filed after the fence returned: %+v exit %+v", rec, rec.Exit)
	}
}
