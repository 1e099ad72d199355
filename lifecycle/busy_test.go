package lifecycle

import (
	"context"
	"sync/atomic"
	"testing"

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
