package sqlite

import (
	"context"

	"github.com/skc-supervisor/skc-supervisor/fence"
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
func (s *Store) Reserve(ctx context.Context, id fence.Identity, spec fence.Spec) (fence.ReserveResult, error) {
	return s.reserve(ctx, id, spec, nil)
}

// ReserveClaim is Reserve that, for a reservation it makes, records a warm
// pool's standby as the attempt's pane and the standby's start in the same
// transaction (fence.Fence.ReserveClaim).
func (s *Store) ReserveClaim(ctx context.Context, id fence.Identity, spec fence.Spec, claim fence.Claim) (fence.ReserveResult, error) {
	return s.reserve(ctx, id, spec, &claim)
}

func (s *Store) reserve(ctx context.Context, id fence.Identity, spec fence.Spec, claim *fence.Claim) (fence.ReserveResult, error) {
	id, spec, err := fence.CanonicalRequest(id, spec)
	if err != nil {
		return fence.ReserveResult{}, err
	}
	pid, inc, err := s.own.Self()
	if err != nil {
		return fence.ReserveResult{}, err
	}
	var res fence.ReserveResult
	err = s.write(ctx, "reserve", func(q queryer) error {
		row, ok, err := rowFor(ctx, q, id)
		if err != nil {
			return err
		}
		if ok {
			if res, err = s.reserveOver(ctx, q, row, spec, pid, inc); err == nil {
				err = s.claimIn(ctx, q, &res, claim)
			}
			return err
		}
		pub, ok, err := publishedFor(ctx, q, id)
		if err != nil {
			return err
		}
		ans, insert, err := fence.ReserveFree(id, spec, pub, ok, false)
		if err != nil {
			return err
		}
		if !insert {
			res = ans // the answer: nothing written
			return nil
		}
		r, err := s.insertRow(ctx, q, id, spec, pid, inc)
		if err != nil {
			return err
		}
		s.own.Track(r.ID) // before COMMIT: no instant where our own row looks abandoned
		res = fence.ReserveResult{Outcome: fence.Reserved, Reservation: r}
		return s.claimIn(ctx, q, &res, claim)
	})
	if err != nil {
		if res.Outcome == fence.Reserved {
			fence.Untrack(res.Reservation.ID)
		}
		return fence.ReserveResult{}, err
	}
	return res, nil
}

// claimIn applies claim (none: nil) to the reservation res made, inside its
// transaction: the row moves to phase spawned with the standby's evidence and
// the standby's start is recorded, as Advance and RecordHelperStart would.
func (s *Store) claimIn(ctx context.Context, q queryer, res *fence.ReserveResult, claim *fence.Claim) error {
	if claim == nil || res.Outcome != fence.Reserved {
		return nil
	}
	r := &res.Reservation
	applied, err := fence.ApplyClaim(r, *claim, s.now(), s.opt.Lease)
	if err != nil || !applied {
		return err
	}
	if err := writePhase(ctx, q, *r); err != nil {
		return err
	}
	return s.writeHelperStart(ctx, q, r.ID, r.Identity, r.Generation, claim.HelperPID, claim.Incarnation, claim.Cgroup)
}

// reserveOver writes what fence.ReserveOver decides for an existing row.
func (s *Store) reserveOver(ctx context.Context, q queryer, row fence.Reservation, spec fence.Spec, pid int, inc string) (fence.ReserveResult, error) {
	res, replace, err := fence.ReserveOver(row, spec, s.own, pid, inc)
	if !replace {
		return res, err
	}
	r, err := s.replaceRow(ctx, q, row, spec, pid, inc)
	if err != nil {
		return fence.ReserveResult{}, err
	}
	return fence.ReserveResult{Outcome: fence.Reserved, Reservation: r, Displaced: &row}, nil
}

// replaceRow swaps the row pinned to old.ID for a fresh one owned by us.
func (s *Store) replaceRow(ctx context.Context, q queryer, old fence.Reservation, spec fence.Spec, pid int, inc string) (fence.Reservation, error) {
	ok, err := deleteRow(ctx, q, old.ID)
	if err != nil {
		return fence.Reservation{}, err
	}
	if !ok {
		return fence.Reservation{}, fence.Lost(old.ID, "was recovered by someone else")
	}
	r, err := s.insertRow(ctx, q, old.Identity, spec, pid, inc)
	if err == nil {
		s.own.Track(r.ID)
	}
	return r, err
}

// Reclaim replaces the identity's row, pinned to expectedResID, with a fresh
// reservation of ours. The row's owner must be proven dead (or the row is our
// own abandoned attempt); a row that is gone or carries another id means
// someone else recovered it first: fence_lost (fail closed; Reserve again to
// learn the new state). Past phase reserved, a child may exist: call Reclaim
// only after a live inspection found it absent or killed it (RecoverAbandoned).
func (s *Store) Reclaim(ctx context.Context, id fence.Identity, expectedResID string, spec fence.Spec) (fence.Reservation, error) {
	id, spec, err := fence.CanonicalRequest(id, spec)
	if err != nil {
		return fence.Reservation{}, err
	}
	if err := fence.CheckReservationID(expectedResID); err != nil {
		return fence.Reservation{}, err
	}
	pid, inc, err := s.own.Self()
	if err != nil {
		return fence.Reservation{}, err
	}
	var r fence.Reservation
	err = s.write(ctx, "reclaim", func(q queryer) error {
		row, ok, err := rowFor(ctx, q, id)
		if err != nil {
			return err
		}
		if err := fence.ReclaimOver(row, ok, expectedResID, spec, s.own, pid, inc); err != nil {
			return err
		}
		r, err = s.replaceRow(ctx, q, row, spec, pid, inc)
		return err
	})
	if err != nil {
		if r.ID != "" {
			fence.Untrack(r.ID)
		}
		return fence.Reservation{}, err
	}
	return r, nil
}

// RecoverAbandoned resolves a dead owner's row (or our own abandoned one) by
// fence.Recover's rules: reclaim when no child can exist, else a live
// inspection decides between preserving, cleaning up and keeping the row.
func (s *Store) RecoverAbandoned(ctx context.Context, ab fence.Reservation, insp fence.Inspector) (fence.RecoverResult, error) {
	return fence.Recover(ctx, s, s.own, ab, insp)
}
