package sqlite

import (
	"slices"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/fencetest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestTakeOverRenamed: a daemon started on the same machine and home under a
// new host name owns the rows its earlier name left — a running generation
// and an in-flight row — so `fence forget` of the old name no longer ends a
// generation it supervises (found outside-in); a row from another machine
// (a fence moved here) stays that machine's, for `fence forget`.
func TestTakeOverRenamed(t *testing.T) {
	w := fencetest.NewWorld(t, harness)
	a := w.OwnerOn(1, fence.Host{Name: "host-a", MachineID: "m1"})
	p := fencetest.PublishAt(t, a, w, "x", "$1", 55, 1234)
	r := fencetest.MustReserve(t, a, w.ID("y"), w.Spec("y"))
	fencetest.AdvanceTo(t, a, &r, fence.PhaseSpawned)
	far := w.OwnerOn(3, fence.Host{Name: "host-far", MachineID: "m2"})
	fencetest.PublishAt(t, far, w, "z", "$3", 56, 1234)
	b := w.OwnerOn(2, fence.Host{Name: "host-b", MachineID: "m1"}).(*Store)
	if got, ok, err := b.CachedPublished(ctx, p.Identity.Digest()); err != nil || !ok || got.Host != "host-a" {
		t.Fatalf("before: %+v %v %v", got, ok, err) // loads the cache the take-over must reset
	}
	names, err := b.TakeOverRenamed(ctx)
	if err != nil || !slices.Equal(names, []string{"host-a"}) {
		t.Fatalf("TakeOverRenamed: %v %v", names, err)
	}
	if got, ok, err := b.CachedPublished(ctx, p.Identity.Digest()); err != nil || !ok || got.Host != "host-b" || got.Ended {
		t.Fatalf("taken-over generation: %+v %v %v", got, ok, err)
	}
	describe := func(fg fence.Forgotten) verdict.Record { return fencetest.Record(verdict.VerdictReleased) }
	_, _, err = b.ForgetHost(ctx, "host-a", describe)
	fencetest.WantCode(t, err, verdict.CodeNotFound)
	if fg, _, err := b.ForgetHost(ctx, "host-far", describe); err != nil || len(fg.Published) != 1 {
		t.Fatalf("another machine's host is forgotten as before: %+v %v", fg, err)
	}
	if names, err := b.TakeOverRenamed(ctx); err != nil || len(names) != 0 {
		t.Fatalf("a second take-over: %v %v", names, err)
	}
}
