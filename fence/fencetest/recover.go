package fencetest

import (
	"context"
	"errors"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// fakeInspector answers a fixed authority and records the order of events.
type fakeInspector struct {
	auth    fence.Authority
	err     error
	killErr error
	goneErr error                      // ProcessesGone's answer
	onKill  func(ab fence.Reservation) // runs inside KillConfirm
	onInsp  func(ab fence.Reservation) // runs inside Inspect
	log     *[]string
}

func (f fakeInspector) Inspect(ctx context.Context, ab fence.Reservation, pub *fence.Published) (fence.Authority, error) {
	if f.log != nil {
		*f.log = append(*f.log, "inspect")
	}
	if f.onInsp != nil {
		f.onInsp(ab)
	}
	return f.auth, f.err
}

func (f fakeInspector) KillConfirm(ctx context.Context, ab fence.Reservation) error {
	if f.log != nil {
		*f.log = append(*f.log, "kill")
	}
	if f.onKill != nil {
		f.onKill(ab)
	}
	return f.killErr
}

func (f fakeInspector) ProcessesGone(ctx context.Context, ab fence.Reservation, pub *fence.Published) error {
	if f.log != nil {
		*f.log = append(*f.log, "gone")
	}
	return f.goneErr
}

// failInspector fails the test if recovery inspects at all.
type failInspector struct{ t *testing.T }

func (f failInspector) Inspect(context.Context, fence.Reservation, *fence.Published) (fence.Authority, error) {
	f.t.Error("inspected a row that never invoked the helper")
	return fence.AuthorityUnknown, nil
}

func (f failInspector) KillConfirm(context.Context, fence.Reservation) error {
	f.t.Error("kill of a row that never invoked the helper")
	return nil
}

func (f failInspector) ProcessesGone(context.Context, fence.Reservation, *fence.Published) error {
	f.t.Error("process check of a row that never invoked the helper")
	return nil
}

// abandonedAt leaves a dead owner's row at phase p and returns it, as Reserve
// by the recovering owner sees it.
func abandonedAt(t *testing.T, w *World, p fence.Phase) (dead, rec fence.Fence, ab fence.Reservation) {
	t.Helper()
	dead, rec = w.Owner(1), w.Owner(2)
	r := MustReserve(t, dead, w.ID("x"), w.Spec("x"))
	AdvanceTo(t, dead, &r, p)
	w.Set(1, fence.Dead)
	return dead, rec, r
}

func testRecoverBranches(t *testing.T, h Harness) {
	type want struct {
		branch fence.RecoverBranch
		code   string
		kept   bool // the abandoned row still exists afterwards
	}
	for _, tc := range []struct {
		name  string
		phase fence.Phase
		insp  fakeInspector
		want  want
	}{
		{"authoritative_published", fence.PhasePublished, fakeInspector{auth: fence.Authoritative},
			want{fence.BranchPreserved, verdict.CodeIdentityExistingOwner, false}},
		{"authoritative_unpublished", fence.PhaseTagged, fakeInspector{auth: fence.Authoritative},
			want{fence.BranchPreserved, verdict.CodeIdentityExistingOwner, true}},
		{"orphan", fence.PhaseSpawned, fakeInspector{auth: fence.Orphan}, want{fence.BranchOrphanCleaned, "", false}},
		{"orphan_kill_fails", fence.PhaseSpawned, fakeInspector{auth: fence.Orphan, killErr: errors.New("still there")},
			want{fence.BranchUnresolved, verdict.CodeIdentityOrphanUnresolved, true}},
		{"absent", fence.PhaseHelperInvoked, fakeInspector{auth: fence.Absent}, want{fence.BranchReclaimed, "", false}},
		{"unknown", fence.PhaseTagged, fakeInspector{auth: fence.AuthorityUnknown}, want{fence.BranchUnresolved, verdict.CodeIdentityOrphanUnresolved, true}},
		{"inspect_error", fence.PhaseTagged, fakeInspector{auth: fence.Absent, err: errors.New("tmux gone")},
			want{fence.BranchUnresolved, verdict.CodeIdentityOrphanUnresolved, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWorld(t, h)
			_, rec, ab := abandonedAt(t, w, tc.phase)
			var log []string
			insp := tc.insp
			insp.log = &log
			insp.onKill = func(ab fence.Reservation) {
				// Kill comes first: the abandoned row must still stand.
				if got, ok, _ := rec.Reservation(ctx, ab.ID); !ok || got.ID != ab.ID {
					t.Error("the row was reclaimed before the orphan was confirmed gone")
				}
			}
			res, err := rec.RecoverAbandoned(ctx, ab, insp)
			if CodeOf(t, err) != tc.want.code || res.Branch != tc.want.branch {
				t.Fatalf("branch %s err %v, want %s %q", res.Branch, err, tc.want.branch, tc.want.code)
			}
			_, kept, _ := rec.Reservation(ctx, ab.ID)
			if kept != tc.want.kept {
				t.Fatalf("abandoned row kept=%v, want %v", kept, tc.want.kept)
			}
			if tc.want.code == "" {
				nr := res.Reservation
				if nr == nil || nr.OwnerPID != 2 || nr.Generation != ab.Generation+1 || nr.Phase != fence.PhaseReserved {
					t.Fatalf("new reservation %+v", nr)
				}
			}
			if res.Branch == fence.BranchOrphanCleaned && (len(log) != 3 || log[1] != "kill" || log[2] != "gone") {
				t.Fatalf("order %v", log)
			}
		})
	}
}

// testRecoverAbsentWhileProcessesRun: "absent" is the session gone and its
// row's generation's processes too; while they are not proven gone the row is
// kept and the inspector's stopping refusal is the answer.
func testRecoverAbsentWhileProcessesRun(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	_, rec, ab := abandonedAt(t, w, fence.PhaseTagged)
	stopping := verdict.Errorf(verdict.CodeIdentityReservedLive, map[string]any{"stopping": true}, "stopping")
	var log []string
	res, err := rec.RecoverAbandoned(ctx, ab, fakeInspector{auth: fence.Absent, goneErr: stopping, log: &log})
	if CodeOf(t, err) != verdict.CodeIdentityReservedLive || res.Branch != fence.BranchUnresolved || res.Reservation != nil {
		t.Fatalf("absent with live processes: %+v %v", res, err)
	}
	if r, ok, _ := rec.Reservation(ctx, ab.ID); !ok || r.ID != ab.ID {
		t.Fatal("the abandoned row was not kept")
	}
	if len(log) != 2 || log[1] != "gone" {
		t.Fatalf("order %v", log)
	}
	// Any other failure to prove them gone is unresolved.
	res, err = rec.RecoverAbandoned(ctx, ab, fakeInspector{auth: fence.Absent, goneErr: errors.New("unknown")})
	if CodeOf(t, err) != verdict.CodeIdentityOrphanUnresolved || res.Reservation != nil {
		t.Fatalf("absent with unknown processes: %+v %v", res, err)
	}
}

func testRecoverPreservedPublishedThenMaybeExisting(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	_, rec, ab := abandonedAt(t, w, fence.PhasePublished)
	if _, err := rec.RecoverAbandoned(ctx, ab, fakeInspector{auth: fence.Authoritative}); CodeOf(t, err) != verdict.CodeIdentityExistingOwner {
		t.Fatal(err)
	}
	res, err := rec.Reserve(ctx, w.ID("x"), w.Spec("x"))
	if err != nil || res.Outcome != fence.MaybeExisting || res.Published.ReservationID != ab.ID {
		t.Fatalf("%+v %v", res, err)
	}
}

func testRecoverReservedNeedsNoCensus(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	_, rec, ab := abandonedAt(t, w, fence.PhaseReserved)
	res, err := rec.RecoverAbandoned(ctx, ab, failInspector{t})
	if err != nil || res.Branch != fence.BranchReclaimed || res.Inspected {
		t.Fatalf("%+v %v", res, err)
	}
}

func testRecoverFailsClosed(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	_, rec, ab := abandonedAt(t, w, fence.PhaseSpawned)
	other := w.Owner(3)
	// Someone else recovers the row while we inspect: our reclaim is pinned
	// to the abandoned id and fails closed.
	insp := fakeInspector{auth: fence.Absent, onInsp: func(ab fence.Reservation) {
		if _, err := other.Reclaim(ctx, ab.Identity, ab.ID, ab.Spec); err != nil {
			t.Errorf("competing reclaim: %v", err)
		}
	}}
	res, err := rec.RecoverAbandoned(ctx, ab, insp)
	if !errors.Is(err, fence.ErrFenceLost) || res.Reservation != nil {
		t.Fatalf("%+v %v", res, err)
	}
	// Recovering a row that is gone or live fails closed too.
	if _, err := rec.RecoverAbandoned(ctx, ab, fakeInspector{auth: fence.Absent}); !errors.Is(err, fence.ErrFenceLost) {
		t.Fatalf("gone row: %v", err)
	}
	rows, _ := rec.Reservations(ctx)
	if _, err := rec.RecoverAbandoned(ctx, rows[0], fakeInspector{auth: fence.Absent}); CodeOf(t, err) != verdict.CodeIdentityReservedLive {
		t.Fatalf("live owner's row: %v", err)
	}
}

func testRecoverOwnerNotProvenDead(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	_, rec, ab := abandonedAt(t, w, fence.PhaseSpawned)
	for l, code := range map[fence.Live]string{
		fence.LiveUnknown: verdict.CodeIdentityReservedUnknown,
		fence.Alive:       verdict.CodeIdentityReservedLive,
	} {
		w.Set(1, l) // the owner came back, or cannot be judged: never displaced
		res, err := rec.RecoverAbandoned(ctx, ab, failInspector{t})
		if CodeOf(t, err) != code || res.Reservation != nil {
			t.Fatalf("%s: %+v %v", l, res, err)
		}
	}
}

func testSmallEdges(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	s := w.Owner(1)
	if err := s.Abandon(ctx, "0123456789abcdef0123456789abcdef"); err != nil {
		t.Fatalf("abandon of a gone row: %v", err)
	}
	if _, _, err := s.MarkEnded(ctx, w.ID("x"), 0, Record("ended")); CodeOf(t, err) != verdict.CodeInvalidRequest {
		t.Fatalf("mark generation 0: %v", err)
	}
	if ok, _, err := s.MarkEnded(ctx, w.ID("never"), 1, Record("ended")); ok || err != nil {
		t.Fatalf("mark of a never-published identity: %v %v", ok, err)
	}
	if _, ok, err := s.PublishedFor(ctx, w.ID("never")); ok || err != nil {
		t.Fatalf("published for a never-published identity: %v %v", ok, err)
	}
}
