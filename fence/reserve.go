package fence

import (
	"context"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Reserve claims the identity's reservation row for this process, in one
// BEGIN IMMEDIATE transaction (the order of model/saga.pml):
//
//   - a row whose state_file differs: identity_state_file_mismatch;
//   - a row of our own in flight, or of a live owner: identity_reserved_live;
//     an owner whose liveness is unknown: identity_reserved_unknown;
//   - a proven-dead owner's row (or our own abandoned one) at phase reserved:
//     no child can exist, so it is reclaimed in place (Reserved);
//     at a later phase: NeedsRecovery, with the row in Abandoned;
//   - no row, and a published generation not marked ended: MaybeExisting;
//   - no row otherwise: a fresh row with the next generation (Reserved).
//
// Refusals are *verdict.Error and leave no trace. A contended database is
// identity_fence_contended.
func (s *Store) Reserve(ctx context.Context, id Identity, spec Spec) (ReserveResult, error) {
	id, spec, err := canonicalRequest(id, spec)
	if err != nil {
		return ReserveResult{}, err
	}
	pid, inc, err := s.self()
	if err != nil {
		return ReserveResult{}, err
	}
	var res ReserveResult
	err = s.write(ctx, "reserve", func(q queryer) error {
		row, ok, err := rowFor(ctx, q, id)
		if err != nil {
			return err
		}
		if ok {
			res, err = s.reserveOver(ctx, q, row, spec, pid, inc)
			return err
		}
		pub, ok, err := publishedFor(ctx, q, id)
		if err != nil {
			return err
		}
		if ok && !pub.Ended {
			if pub.StateFile != spec.StateFile {
				return mismatch(id, pub.StateFile, spec.StateFile)
			}
			res = ReserveResult{Outcome: MaybeExisting, Published: pub}
			return nil
		}
		r, err := s.insertRow(ctx, q, id, spec, pid, inc)
		if err == nil {
			s.track(r.ID) // before COMMIT: no instant where our own row looks abandoned
			res = ReserveResult{Outcome: Reserved, Reservation: r}
		}
		return err
	})
	if err != nil {
		if res.Outcome == Reserved {
			untrack(res.Reservation.ID)
		}
		return ReserveResult{}, err
	}
	return res, nil
}

// reserveOver decides what an existing row means for a new reservation.
func (s *Store) reserveOver(ctx context.Context, q queryer, row Reservation, spec Spec, pid int, inc string) (ReserveResult, error) {
	if row.Spec.StateFile != spec.StateFile {
		return ReserveResult{}, mismatch(row.Identity, row.Spec.StateFile, spec.StateFile)
	}
	if err := s.displaceable(row, pid, inc); err != nil {
		return ReserveResult{}, err
	}
	if row.Phase >= PhaseHelperInvoked {
		return ReserveResult{Outcome: NeedsRecovery, Abandoned: row}, nil
	}
	r, err := s.replaceRow(ctx, q, row, spec, pid, inc)
	if err != nil {
		return ReserveResult{}, err
	}
	return ReserveResult{Outcome: Reserved, Reservation: r, Displaced: &row}, nil
}

// displaceable returns nil when row's owner is proven dead or the row is our
// own attempt that is no longer in flight; otherwise the refusal.
func (s *Store) displaceable(row Reservation, pid int, inc string) error {
	details := map[string]any{"owner_pid": row.OwnerPID, "reservation_id": row.ID, "phase": row.Phase.String()}
	if row.OwnerPID == pid && row.OwnerIncarnation == inc {
		if inFlight(row.ID) {
			return verdict.Errorf(verdict.CodeIdentityReservedLive, details,
				"the identity is being created by this process (reservation %s, phase %s)", row.ID, row.Phase)
		}
		return nil
	}
	switch l := s.opt.Liveness(row.OwnerPID, row.OwnerIncarnation); l {
	case Dead:
		return nil
	case Alive:
		return verdict.Errorf(verdict.CodeIdentityReservedLive, details,
			"the identity is reserved by live process %d (reservation %s, phase %s)", row.OwnerPID, row.ID, row.Phase)
	default:
		return verdict.Errorf(verdict.CodeIdentityReservedUnknown, details,
			"the identity is reserved by process %d whose liveness cannot be established (reservation %s)", row.OwnerPID, row.ID)
	}
}

// replaceRow swaps the row pinned to old.ID for a fresh one owned by us.
func (s *Store) replaceRow(ctx context.Context, q queryer, old Reservation, spec Spec, pid int, inc string) (Reservation, error) {
	ok, err := deleteRow(ctx, q, old.ID)
	if err != nil {
		return Reservation{}, err
	}
	if !ok {
		return Reservation{}, lost(old.ID, "was recovered by someone else")
	}
	r, err := s.insertRow(ctx, q, old.Identity, spec, pid, inc)
	if err == nil {
		s.track(r.ID)
	}
	return r, err
}

// Reclaim replaces the identity's row, pinned to expectedResID, with a fresh
// reservation of ours. The row's owner must be proven dead (or the row is our
// own abandoned attempt); a row that is gone or carries another id means
// someone else recovered it first: fence_lost (fail closed; Reserve again to
// learn the new state). Past phase reserved, a child may exist: call Reclaim
// only after a live inspection found it absent or killed it (RecoverAbandoned).
func (s *Store) Reclaim(ctx context.Context, id Identity, expectedResID string, spec Spec) (Reservation, error) {
	id, spec, err := canonicalRequest(id, spec)
	if err != nil {
		return Reservation{}, err
	}
	if err := checkReservationID(expectedResID); err != nil {
		return Reservation{}, err
	}
	pid, inc, err := s.self()
	if err != nil {
		return Reservation{}, err
	}
	var r Reservation
	err = s.write(ctx, "reclaim", func(q queryer) error {
		row, ok, err := rowFor(ctx, q, id)
		if err != nil {
			return err
		}
		if !ok || row.ID != expectedResID {
			return lost(expectedResID, "is no longer the identity's row")
		}
		if row.Spec.StateFile != spec.StateFile {
			return mismatch(id, row.Spec.StateFile, spec.StateFile)
		}
		if err := s.displaceable(row, pid, inc); err != nil {
			return err
		}
		r, err = s.replaceRow(ctx, q, row, spec, pid, inc)
		return err
	})
	if err != nil {
		if r.ID != "" {
			untrack(r.ID)
		}
		return Reservation{}, err
	}
	return r, nil
}

func canonicalRequest(id Identity, spec Spec) (Identity, Spec, error) {
	id, err := CanonicalIdentity(id)
	if err != nil {
		return Identity{}, Spec{}, err
	}
	spec, err = canonicalSpec(spec)
	return id, spec, err
}

func mismatch(id Identity, recorded, asked string) error {
	return verdict.Errorf(verdict.CodeIdentityStateFileMismatch,
		map[string]any{"field": "state_file", "recorded": recorded, "requested": asked},
		"identity %s/%s is recorded with state file %s, not %s", id.StateDir, id.SessionID, recorded, asked)
}

func lost(resID, why string) error {
	return &verdict.Error{Code: verdict.CodeFenceLost, Err: ErrFenceLost,
		Details: map[string]any{"reservation_id": resID},
		Message: "reservation " + resID + " " + why}
}
