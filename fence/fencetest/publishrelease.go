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

// testReserveClaim: a create served by a warm pool's standby reserves, records
// the standby as its pane (phase spawned) and the standby's start, in one
// transaction (ReserveClaim). Declined, it is Reserve; any answer but
// Reserved writes nothing of the claim; an invalid claim writes nothing at
// all; a row reclaimed in place takes the claim too; and the claimed row
// publishes and releases as any claimed standby's (PublishRelease).
func testReserveClaim(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	a, b := w.Owner(1), w.Owner(2)
	calls := 0
	claim := fence.Claim{HelperPID: 4242, Incarnation: "boot/1/2/3", Cgroup: "/sys/fs/cgroup/x/gen-sb-1",
		Spawned: func(r fence.Reservation) (fence.Patch, bool) {
			calls++
			return fence.Patch{AttemptName: "skc-" + r.ID, TmuxID: "$7", PanePID: 4242, ServerPID: 55,
				ServerStart: 1234, PaneStart: 99, Cgroup: "/sys/fs/cgroup/x/gen-sb-1"}, true
		}}
	res, err := a.ReserveClaim(ctx, w.ID("x"), w.Spec("x"), claim)
	r := res.Reservation
	if err != nil || res.Outcome != fence.Reserved || r.Phase != fence.PhaseSpawned || calls != 1 ||
		r.AttemptName != "skc-"+r.ID || r.TmuxID != "$7" || r.PanePID != 4242 || r.PaneStart != 99 {
		t.Fatalf("reserve-claim %+v %v (calls %d)", res, err, calls)
	}
	stored, ok, err := b.Reservation(ctx, r.ID)
	if err != nil || !ok || stored.Phase != fence.PhaseSpawned || stored.TmuxID != "$7" ||
		stored.ServerStart != 1234 || stored.HelperPID != 4242 || stored.Cgroup != claim.Cgroup {
		t.Fatalf("stored row %+v %v %v", stored, ok, err)
	}
	// Taken by anyone else, the row is a live owner's: refused, nothing of
	// the claim consulted.
	if _, err := b.ReserveClaim(ctx, w.ID("x"), w.Spec("x"), claim); err == nil || calls != 1 {
		t.Fatalf("reserve-claim over a live owner's row: %v (calls %d)", err, calls)
	}
	if _, _, err := a.PublishRelease(ctx, &r, Record(verdict.VerdictPublished)); err != nil {
		t.Fatal(err)
	}
	pm, ok, err := b.Postmortem(ctx, w.ID("x"), 1)
	if err != nil || !ok || pm.HelperPID != 4242 || pm.HelperIncarnation != "boot/1/2/3" || pm.Cgroup != claim.Cgroup {
		t.Fatalf("the standby's start record %+v %v %v", pm, ok, err)
	}
	// Published and not ended: MaybeExisting, the claim neither asked nor written.
	res, err = a.ReserveClaim(ctx, w.ID("x"), w.Spec("x"), claim)
	if err != nil || res.Outcome != fence.MaybeExisting || calls != 1 {
		t.Fatalf("reserve-claim of a published identity: %+v %v (calls %d)", res, err, calls)
	}
	testReserveClaimRefusals(t, w, a, b, claim)
}

// testReserveClaimRefusals: a declined claim is a plain reservation, an
// abandoned row of our own is reclaimed with the claim, and an invalid claim
// writes nothing.
func testReserveClaimRefusals(t *testing.T, w *World, a, b fence.Fence, claim fence.Claim) {
	// Declined: a plain reservation at phase reserved, no start record.
	decline := claim
	decline.Spawned = func(fence.Reservation) (fence.Patch, bool) { return fence.Patch{}, false }
	res, err := a.ReserveClaim(ctx, w.ID("y"), w.Spec("y"), decline)
	if err != nil || res.Outcome != fence.Reserved || res.Reservation.Phase != fence.PhaseReserved {
		t.Fatalf("declined claim %+v %v", res, err)
	}
	if st, _, _ := b.Reservation(ctx, res.Reservation.ID); st.HelperPID != 0 || st.TmuxID != "" {
		t.Fatalf("declined claim wrote evidence %+v", st)
	}
	// Our own abandoned row at phase reserved is reclaimed in place, claim and all.
	if err := a.Abandon(ctx, res.Reservation.ID); err != nil {
		t.Fatal(err)
	}
	res, err = a.ReserveClaim(ctx, w.ID("y"), w.Spec("y"), claim)
	if err != nil || res.Outcome != fence.Reserved || res.Displaced == nil || res.Reservation.Phase != fence.PhaseSpawned {
		t.Fatalf("reclaim in place with a claim %+v %v", res, err)
	}
	// An invalid claim (no pid) is refused and writes nothing, not even the row.
	bad := claim
	bad.HelperPID = 0
	if _, err := a.ReserveClaim(ctx, w.ID("z"), w.Spec("z"), bad); CodeOf(t, err) != verdict.CodeInvalidRequest {
		t.Fatalf("invalid claim: %v", err)
	}
	res, err = b.Reserve(ctx, w.ID("z"), w.Spec("z"))
	if err != nil || res.Outcome != fence.Reserved || res.Reservation.Generation != 1 {
		t.Fatalf("after an invalid claim: %+v %v", res, err)
	}
}
