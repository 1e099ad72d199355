package fencetest

import (
	"testing"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// testForgetHost: `fence forget --host NAME` clears every reservation row and
// running generation of a host that is gone for good, in one write with one
// verdict, so its identities can be reserved elsewhere; its old handle has
// lost its rows. This host is refused (its owners can be probed here), a bad
// name is invalid, a host with nothing is not_found — and none of those write.
func testForgetHost(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	a := w.OwnerOn(1, fence.Host{Name: "host-a"})
	b := w.OwnerOn(2, fence.Host{Name: "host-b"})
	if got := b.Host().Name; got != "host-b" {
		t.Fatalf("Host() = %q", got)
	}
	p := PublishAt(t, a, w, "x", "$1", 55, 1234)
	r := MustReserve(t, a, w.ID("y"), w.Spec("y"))
	AdvanceTo(t, a, &r, fence.PhaseSpawned)
	if got, ok, err := b.FleetPublishedByName(ctx, p.SessionName); err != nil || !ok || got.Host != "host-a" {
		t.Fatalf("FleetPublishedByName: %+v %v %v", got, ok, err)
	}
	all, err := b.FleetIdentities(ctx)
	if err != nil || len(all) != 1 || all[0].Host != "host-a" || all[0].Generation != p.Generation {
		t.Fatalf("FleetIdentities: %+v %v", all, err)
	}
	describe := func(fg fence.Forgotten) verdict.Record {
		rec := Record(verdict.VerdictReleased)
		rec.Evidence = map[string]any{"host": fg.Host}
		return rec
	}
	before, _ := b.FleetVerdictsSince(ctx, 0, 0)
	for _, tc := range []struct{ host, code string }{
		{"host-b", verdict.CodeInvalidRequest}, {"-bad", verdict.CodeInvalidRequest}, {"host-c", verdict.CodeNotFound},
	} {
		_, _, err := b.ForgetHost(ctx, tc.host, describe)
		WantCode(t, err, tc.code)
	}
	if after, _ := b.FleetVerdictsSince(ctx, 0, 0); len(after) != len(before) {
		t.Fatalf("a refused forget wrote verdicts: %d then %d", len(before), len(after))
	}
	fg, rec, err := b.ForgetHost(ctx, "host-a", describe)
	if err != nil || rec.Sequence == 0 || len(fg.Reservations) != 1 || fg.Reservations[0].ID != r.ID ||
		len(fg.Published) != 1 || fg.Published[0].Generation != p.Generation {
		t.Fatalf("forget: %+v %+v %v", fg, rec, err)
	}
	if !fg.Published[0].Ended || fg.Published[0].EndedAt.IsZero() {
		t.Fatalf("forget answered its generation as running: %+v", fg.Published[0])
	}
	vs, err := b.FleetVerdictsSince(ctx, rec.Sequence-1, 0)
	if err != nil || len(vs) != 1 || vs[0].Sequence != rec.Sequence || vs[0].Evidence["host"] != "host-a" {
		t.Fatalf("the forget's verdict in the fleet journal: %+v %v", vs, err)
	}
	if _, ok, err := b.FleetPublishedByName(ctx, p.SessionName); err != nil || ok {
		t.Fatalf("a forgotten generation is still running: %v %v", ok, err)
	}
	nx := MustReserve(t, b, w.ID("x"), w.Spec("x"))
	if nx.Generation != p.Generation+1 {
		t.Fatalf("generation %d after forgotten %d", nx.Generation, p.Generation)
	}
	MustReserve(t, b, w.ID("y"), w.Spec("y"))
	WantCode(t, a.Advance(ctx, &r, fence.PhaseTagged, fence.Patch{}), verdict.CodeFenceLost)
	_, _, err = b.ForgetHost(ctx, "host-a", describe)
	WantCode(t, err, verdict.CodeNotFound)
}
