package fencetest

import (
	"reflect"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// testHelperSpecOutlivesRelease: the pane helper's spec is readable from Reserve
// on, stays readable after the published generation's row is released (the
// helper may start after publication), and goes when the generation ends or when
// a row is released unpublished (compensation) — an orphan's helper finds nothing.
func testHelperSpecOutlivesRelease(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	s := w.Owner(100)
	spec := w.Spec("a")
	spec.Argv, spec.Env, spec.Cwd = []string{"agent", "--x"}, []string{"K=V"}, w.Dir
	r := MustReserve(t, s, w.ID("a"), spec)
	want := func(when string, ok bool) {
		t.Helper()
		h, found, err := s.HelperSpec(ctx, r.ID)
		if err != nil || found != ok {
			t.Fatalf("%s: HelperSpec found=%v err=%v, want found=%v", when, found, err, ok)
		}
		if ok && (h.Generation != r.Generation || h.Identity != r.Identity || !reflect.DeepEqual(h.Spec, r.Spec)) {
			t.Fatalf("%s: HelperSpec %+v, want the reservation's %+v", when, h, r)
		}
	}
	want("reserved", true)
	for _, to := range []fence.Phase{fence.PhaseHelperInvoked, fence.PhaseSpawned, fence.PhaseTagged} {
		p := fence.Patch{}
		if to == fence.PhaseHelperInvoked {
			p.AttemptName = "skc-" + r.ID
		}
		if to == fence.PhaseSpawned {
			p = fence.Patch{TmuxID: "$1", PanePID: 7, ServerPID: 55, ServerStart: 1000}
		}
		if err := s.Advance(ctx, &r, to, p); err != nil {
			t.Fatal(err)
		}
	}
	pub, _, err := s.Publish(ctx, &r, Record(verdict.VerdictPublished))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	want("published and released", true)
	if ok, _, err := s.MarkEnded(ctx, pub.Identity, pub.Generation, Record(verdict.VerdictEnded)); err != nil || !ok {
		t.Fatalf("mark ended: %v %v", ok, err)
	}
	want("ended", false)

	r = MustReserve(t, s, w.ID("a"), spec)
	want("second reservation", true)
	if err := s.Release(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	want("released unpublished", false)
}
