package fencetest

import (
	"errors"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// testPublishRelease: a claimed standby's saga publishes from phase spawned
// (attempt name and evidence recorded in one Advance straight from reserved)
// and releases in the same transaction: the published record is the row's, the
// row is gone, the helper's spec stays, and the next Reserve sees the
// published generation. Below spawned it writes nothing; a row that is not
// ours is fence_lost; Publish alone still needs tagged.
func testPublishRelease(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	a, b := w.Owner(1), w.Owner(2)
	r := MustReserve(t, a, w.ID("x"), w.Spec("x"))
	if _, _, err := a.PublishRelease(ctx, &r, Record(verdict.VerdictPublished)); CodeOf(t, err) != verdict.CodeInvalidRequest {
		t.Fatalf("publish-release at reserved: %v", err)
	}
	claim := fence.Patch{AttemptName: "skc-" + r.ID, TmuxID: "$7", PanePID: 77, ServerPID: 55, ServerStart: 1234}
	if err := a.Advance(ctx, &r, fence.PhaseSpawned, claim); err != nil {
		t.Fatalf("advance reserved → spawned: %v", err)
	}
	if _, _, err := a.Publish(ctx, &r, Record(verdict.VerdictPublished)); CodeOf(t, err) != verdict.CodeInvalidRequest {
		t.Fatalf("publish at spawned: %v", err)
	}
	if _, _, err := b.PublishRelease(ctx, &r, Record(verdict.VerdictPublished)); !errors.Is(err, fence.ErrFenceLost) {
		t.Fatalf("publish-release by another owner: %v", err)
	}
	pub, rec, err := a.PublishRelease(ctx, &r, Record(verdict.VerdictPublished))
	if err != nil || pub.Generation != 1 || rec.Sequence != 1 || r.Phase != fence.PhasePublished {
		t.Fatalf("publish-release %+v %+v %v", pub, rec, err)
	}
	if pub.SessionName != "skc-"+r.ID || pub.TmuxID != "$7" || pub.PanePID != 77 || pub.ReservationID != r.ID {
		t.Fatalf("published evidence %+v", pub)
	}
	if _, ok, err := a.Reservation(ctx, r.ID); ok || err != nil {
		t.Fatalf("row still there after publish-release: %v %v", ok, err)
	}
	if hs, found, err := a.HelperSpec(ctx, r.ID); err != nil || !found || hs.Generation != 1 {
		t.Fatalf("helper spec after publish-release: %+v %v %v", hs, found, err)
	}
	got, ok, err := b.PublishedByReservation(ctx, r.ID)
	if err != nil || !ok || got.Generation != 1 || got.Ended {
		t.Fatalf("published by reservation: %+v %v %v", got, ok, err)
	}
	res, err := b.Reserve(ctx, w.ID("x"), w.Spec("x"))
	if err != nil || res.Outcome != fence.MaybeExisting || res.Published.Generation != 1 {
		t.Fatalf("reserve after publish-release: %+v %v", res, err)
	}
	// From tagged, as a create's saga would reach it, it works too.
	r2 := MustReserve(t, a, w.ID("y"), w.Spec("y"))
	AdvanceTo(t, a, &r2, fence.PhaseTagged)
	if _, _, err := a.PublishRelease(ctx, &r2, Record(verdict.VerdictPublished)); err != nil {
		t.Fatalf("publish-release at tagged: %v", err)
	}
	if _, ok, _ := a.Reservation(ctx, r2.ID); ok {
		t.Fatal("row y still there")
	}
}
