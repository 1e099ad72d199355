package lifecycle

import (
	"context"
	"testing"
	"time"
)

// TestPoolCreatedAt: a session served by a standby is dated by its create,
// not by the standby's spawn (which may be long before, even before the
// identity's previous generation ended), in the create's answer, in Show and
// in List — also after the census re-read tmux's session_created.
func TestPoolCreatedAt(t *testing.T) {
	e := startPoolEnv(t, "", 1)
	waitFor(t, "the pool full", func() bool { return e.m.PoolStats().Ready == 1 })
	// tmux's session_created counts whole seconds: let the standby's lie
	// wholly before the create.
	time.Sleep(1100 * time.Millisecond)
	ctx := context.Background()
	id, spec := e.identity("dated")
	t0 := time.Now()
	res, err := e.m.Create(ctx, CreateRequest{Identity: id, Spec: spec})
	if err != nil || e.m.PoolStats().Claims != 1 {
		t.Fatalf("create %+v %v, pool %+v", res, err, e.m.PoolStats())
	}
	if res.Session.CreatedAt.Before(t0) {
		t.Errorf("create's answer: created_at %v before the create (%v)", res.Session.CreatedAt, t0)
	}
	if err := e.census.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	sh, err := e.m.Show(ctx, Ref{Identity: &id})
	if err != nil || sh.Session == nil || sh.Session.CreatedAt.Before(t0) {
		t.Errorf("show: %+v %v: created_at before the create (%v)", sh.Session, err, t0)
	}
	l, err := e.m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Sessions {
		if s.ID == res.Session.ID && s.CreatedAt.Before(t0) {
			t.Errorf("ls: created_at %v before the create (%v)", s.CreatedAt, t0)
		}
	}
}
