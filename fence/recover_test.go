package fence

import (
	"context"
	"errors"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// fakeInspector answers a fixed authority and records the order of events.
type fakeInspector struct {
	auth    Authority
	err     error
	killErr error
	goneErr error                // ProcessesGone's answer
	onKill  func(ab Reservation) // runs inside KillConfirm
	onInsp  func(ab Reservation) // runs inside Inspect
	log     *[]string
}

func (f fakeInspector) Inspect(ctx context.Context, ab Reservation, pub *Published) (Authority, error) {
	if f.log != nil {
		*f.log = append(*f.log, "inspect")
	}
	if f.onInsp != nil {
		f.onInsp(ab)
	}
	return f.auth, f.err
}

func (f fakeInspector) KillConfirm(ctx context.Context, ab Reservation) error {
	if f.log != nil {
		*f.log = append(*f.log, "kill")
	}
	if f.onKill != nil {
		f.onKill(ab)
	}
	return f.killErr
}

func (f fakeInspector) ProcessesGone(ctx context.Context, ab Reservation, pub *Published) error {
	if f.log != nil {
		*f.log = append(*f.log, "gone")
	}
	return f.goneErr
}

// failInspector fails the test if recovery inspects at all.
type failInspector struct{ t *testing.T }

func (f failInspector) Inspect(context.Context, Reservation, *Published) (Authority, error) {
	f.t.Error("inspected a row that never invoked the helper")
	return AuthorityUnknown, nil
}

func (f failInspector) KillConfirm(context.Context, Reservation) error {
	f.t.Error("kill of a row that never invoked the helper")
	return nil
}

func (f failInspector) ProcessesGone(context.Context, Reservation, *Published) error {
	f.t.Error("process check of a row that never invoked the helper")
	return nil
}

// abandonedAt leaves a dead owner's row at phase p and returns it, as Reserve
// by the recovering owner sees it.
func abandonedAt(t *testing.T, w *world, p Phase) (dead, rec *Store, ab Reservation) {
	t.Helper()
	dead, rec = w.owner(1), w.owner(2)
	r := mustReserve(t, dead, w.id("x"), w.spec("x"))
	advanceTo(t, dead, &r, p)
	w.set(1, Dead)
	return dead, rec, r
}

func TestRecoverBranches(t *testing.T) {
	type want struct {
		branch RecoverBranch
		code   string
		kept   bool // the abandoned row still exists afterwards
	}
	for _, tc := range []struct {
		name  string
		phase Phase
		insp  fakeInspector
		want  want
	}{
		{"authoritative_published", PhasePublished, fakeInspector{auth: Authoritative},
			want{BranchPreserved, verdict.CodeIdentityExistingOwner, false}},
		{"authoritative_unpublished", PhaseTagged, fakeInspector{auth: Authoritative},
			want{BranchPreserved, verdict.CodeIdentityExistingOwner, true}},
		{"orphan", PhaseSpawned, fakeInspector{auth: Orphan}, want{BranchOrphanCleaned, "", false}},
		{"orphan_kill_fails", PhaseSpawned, fakeInspector{auth: Orphan, killErr: errors.New("still there")},
			want{BranchUnresolved, verdict.CodeIdentityOrphanUnresolved, true}},
		{"absent", PhaseHelperInvoked, fakeInspector{auth: Absent}, want{BranchReclaimed, "", false}},
		{"unknown", PhaseTagged, fakeInspector{auth: AuthorityUnknown}, want{BranchUnresolved, verdict.CodeIdentityOrphanUnresolved, true}},
		{"inspect_error", PhaseTagged, fakeInspector{auth: Absent, err: errors.New("tmux gone")},
			want{BranchUnresolved, verdict.CodeIdentityOrphanUnresolved, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			_, rec, ab := abandonedAt(t, w, tc.phase)
			var log []string
			insp := tc.insp
			insp.log = &log
			insp.onKill = func(ab Reservation) {
				// Kill comes first: the abandoned row must still stand.
				if got, ok, _ := rec.Reservation(ctx, ab.ID); !ok || got.ID != ab.ID {
					t.Error("the row was reclaimed before the orphan was confirmed gone")
				}
			}
			res, err := rec.RecoverAbandoned(ctx, ab, insp)
			if codeOf(t, err) != tc.want.code || res.Branch != tc.want.branch {
				t.Fatalf("branch %s err %v, want %s %q", res.Branch, err, tc.want.branch, tc.want.code)
			}
			_, kept, _ := rec.Reservation(ctx, ab.ID)
			if kept != tc.want.kept {
				t.Fatalf("abandoned row kept=%v, want %v", kept, tc.want.kept)
			}
			if tc.want.code == "" {
				nr := res.Reservation
				if nr == nil || nr.OwnerPID != 2 || nr.Generation != ab.Generation+1 || nr.Phase != PhaseReserved {
					t.Fatalf("new reservation %+v", nr)
				}
			}
			if res.Branch == BranchOrphanCleaned && (len(log) != 3 || log[1] != "kill" || log[2] != "gone") {
				t.Fatalf("order %v", log)
			}
		})
	}
}

// TestRecoverAbsentWhileProcessesRun: "absent" is the session gone and its
// row's generation's processes too; while they are not proven gone the row is
// kept and the inspector's stopping refusal is the answer.
func TestRecoverAbsentWhileProcessesRun(t *testing.T) {
	w := newWorld(t)
	_, rec, ab := abandonedAt(t, w, PhaseTagged)
	stopping := verdict.Errorf(verdict.CodeIdentityReservedLive, map[string]any{"stopping": true}, "stopping")
	var log []string
	res, err := rec.RecoverAbandoned(ctx, ab, fakeInspector{auth: Absent, goneErr: stopping, log: &log})
	if codeOf(t, err) != verdict.CodeIdentityReservedLive || res.Branch != BranchUnresolved || res.Reservation != nil {
		t.Fatalf("absent with live processes: %+v %v", res, err)
	}
	if r, ok, _ := rec.Reservation(ctx, ab.ID); !ok || r.ID != ab.ID {
		t.Fatal("the abandoned row was not kept")
	}
	if len(log) != 2 || log[1] != "gone" {
		t.Fatalf("order %v", log)
	}
	// Any other failure to prove them gone is unresolved.
	res, err = rec.RecoverAbandoned(ctx, ab, fakeInspector{auth: Absent, goneErr: errors.New("unknown")})
	if codeOf(t, err) != verdict.CodeIdentityOrphanUnresolved || res.Reservation != nil {
		t.Fatalf("absent with unknown processes: %+v %v", res, err)
	}
}

func TestRecoverPreservedPublishedThenMaybeExisting(t *testing.T) {
	w := newWorld(t)
	_, rec, ab := abandonedAt(t, w, PhasePublished)
	if _, err := rec.RecoverAbandoned(ctx, ab, fakeInspector{auth: Authoritative}); codeOf(t, err) != verdict.CodeIdentityExistingOwner {
		t.Fatal(err)
	}
	res, err := rec.Reserve(ctx, w.id("x"), w.spec("x"))
	if err != nil || res.Outcome != MaybeExisting || res.Published.ReservationID != ab.ID {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestRecoverReservedNeedsNoCensus(t *testing.T) {
	w := newWorld(t)
	_, rec, ab := abandonedAt(t, w, PhaseReserved)
	res, err := rec.RecoverAbandoned(ctx, ab, failInspector{t})
	if err != nil || res.Branch != BranchReclaimed || res.Inspected {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestRecoverFailsClosed(t *testing.T) {
	w := newWorld(t)
	_, rec, ab := abandonedAt(t, w, PhaseSpawned)
	other := w.owner(3)
	// Someone else recovers the row while we inspect: our reclaim is pinned
	// to the abandoned id and fails closed.
	insp := fakeInspector{auth: Absent, onInsp: func(ab Reservation) {
		if _, err := other.Reclaim(ctx, ab.Identity, ab.ID, ab.Spec); err != nil {
			t.Errorf("competing reclaim: %v", err)
		}
	}}
	res, err := rec.RecoverAbandoned(ctx, ab, insp)
	if !errors.Is(err, ErrFenceLost) || res.Reservation != nil {
		t.Fatalf("%+v %v", res, err)
	}
	// Recovering a row that is gone or live fails closed too.
	if _, err := rec.RecoverAbandoned(ctx, ab, fakeInspector{auth: Absent}); !errors.Is(err, ErrFenceLost) {
		t.Fatalf("gone row: %v", err)
	}
	rows, _ := rec.Reservations(ctx)
	if _, err := rec.RecoverAbandoned(ctx, rows[0], fakeInspector{auth: Absent}); codeOf(t, err) != verdict.CodeIdentityReservedLive {
		t.Fatalf("live owner's row: %v", err)
	}
}

func TestRecoverOwnerNotProvenDead(t *testing.T) {
	w := newWorld(t)
	_, rec, ab := abandonedAt(t, w, PhaseSpawned)
	for l, code := range map[Live]string{
		LiveUnknown: verdict.CodeIdentityReservedUnknown,
		Alive:       verdict.CodeIdentityReservedLive,
	} {
		w.set(1, l) // the owner came back, or cannot be judged: never displaced
		res, err := rec.RecoverAbandoned(ctx, ab, failInspector{t})
		if codeOf(t, err) != code || res.Reservation != nil {
			t.Fatalf("%s: %+v %v", l, res, err)
		}
	}
}

func TestSmallEdges(t *testing.T) {
	w := newWorld(t)
	s := w.owner(1)
	if err := s.Abandon(ctx, "0123456789abcdef0123456789abcdef"); err != nil {
		t.Fatalf("abandon of a gone row: %v", err)
	}
	if _, _, err := s.MarkEnded(ctx, w.id("x"), 0, testRecord("ended")); codeOf(t, err) != verdict.CodeInvalidRequest {
		t.Fatalf("mark generation 0: %v", err)
	}
	if ok, _, err := s.MarkEnded(ctx, w.id("never"), 1, testRecord("ended")); ok || err != nil {
		t.Fatalf("mark of a never-published identity: %v %v", ok, err)
	}
	if _, ok, err := s.PublishedFor(ctx, w.id("never")); ok || err != nil {
		t.Fatalf("published for a never-published identity: %v %v", ok, err)
	}
}
