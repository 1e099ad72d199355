package postgres

import (
	"context"

	"github.com/skc-supervisor/skc-supervisor/fence"
)

// Reserve claims the identity's reservation row for this process, in one
// transaction holding the identity's lock (fence.Fence.Reserve has the rules;
// the order is model/saga.pml's). Beyond the SQLite engine's rules, a fleet's:
//
//   - a row owned on another host is identity_reserved_unknown: its owner's
//     liveness cannot be proven from here, whatever its lease says;
//   - a published generation of another host that is not marked ended is
//     PublishedElsewhere: only its host can tell whether its session lives,
//     so no create here may treat it as maybe gone (it answers existing).
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
	var r row
	var p pub
	var hasRow, hasPub bool
	var last int64
	lk := lockOn{digest: id.Digest(), reads: []prefetch{
		rowRead(&r, &hasRow, byIdentity, id.StateDir, id.SessionID),
		pubRead(&p, &hasPub, byIdentity, id.StateDir, id.SessionID),
		genRead(&last, id),
	}}
	err = s.write(ctx, "reserve", lk, func(t *tx) error {
		var err error
		if hasRow {
			if res, err = s.reserveOver(t, r, spec, pid, inc, last); err == nil {
				err = s.claimIn(t, &res, claim)
			}
			return err
		}
		elsewhere := hasPub && s.remote(p.Host, p.HostMachineID)
		ans, insert, err := fence.ReserveFree(id, spec, p.Published, hasPub, elsewhere)
		if err != nil {
			return err
		}
		if !insert {
			res = ans // the answer: nothing written
			return nil
		}
		nr, err := s.insertRow(t, id, spec, pid, inc, last)
		if err != nil {
			return err
		}
		s.own.Track(nr.ID) // before COMMIT: no instant where our own row looks abandoned
		res = fence.ReserveResult{Outcome: fence.Reserved, Reservation: nr}
		return s.claimIn(t, &res, claim)
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
func (s *Store) claimIn(t *tx, res *fence.ReserveResult, claim *fence.Claim) error {
	if claim == nil || res.Outcome != fence.Reserved {
		return nil
	}
	r := &res.Reservation
	applied, err := fence.ApplyClaim(r, *claim, storedTime(s.now()), s.opt.Lease)
	if err != nil || !applied {
		return err
	}
	writePhase(t, *r)
	s.writeHelperStart(t, r.ID, r.Identity, r.Generation, claim.HelperPID, claim.Incarnation, claim.Cgroup)
	return nil
}

// reserveOver writes what fence.ReserveOver decides for an existing row: a
// row of another host is never displaced (identity_reserved_unknown,
// fence.OwnerLive), one of this host's earlier boots is dead.
func (s *Store) reserveOver(t *tx, r row, spec fence.Spec, pid int, inc string, last int64) (fence.ReserveResult, error) {
	res, replace, err := fence.ReserveOver(r.Reservation, spec, s.own, pid, inc)
	if !replace {
		return res, err
	}
	nr, err := s.replaceRow(t, r.Reservation, spec, pid, inc, last)
	if err != nil {
		return fence.ReserveResult{}, err
	}
	old := r.Reservation
	return fence.ReserveResult{Outcome: fence.Reserved, Reservation: nr, Displaced: &old}, nil
}

// replaceRow swaps the row pinned to old.ID for a fresh one owned by us.
func (s *Store) replaceRow(t *tx, old fence.Reservation, spec fence.Spec, pid int, inc string, last int64) (fence.Reservation, error) {
	ok, err := deleteRow(t, old.ID)
	if err != nil {
		return fence.Reservation{}, err
	}
	if !ok {
		return fence.Reservation{}, fence.Lost(old.ID, "was recovered by someone else")
	}
	r, err := s.insertRow(t, old.Identity, spec, pid, inc, last)
	if err == nil {
		s.own.Track(r.ID)
	}
	return r, err
}

// Reclaim replaces the identity's row, pinned to expectedResID, with a fresh
// reservation of ours (fence.Fence.Reclaim); a row of another host is
// identity_reserved_unknown.
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
	var cur row
	var ok bool
	var last int64
	lk := lockOn{digest: id.Digest(), reads: []prefetch{
		rowRead(&cur, &ok, byIdentity, id.StateDir, id.SessionID), genRead(&last, id)}}
	err = s.write(ctx, "reclaim", lk, func(t *tx) error {
		err := fence.ReclaimOver(cur.Reservation, ok, expectedResID, spec, s.own, pid, inc)
		if err != nil {
			return err
		}
		r, err = s.replaceRow(t, cur.Reservation, spec, pid, inc, last)
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
// fence.Recover's rules (a row of another host is refused there, by the
// owner's rule, before any inspection).
func (s *Store) RecoverAbandoned(ctx context.Context, ab fence.Reservation, insp fence.Inspector) (fence.RecoverResult, error) {
	return fence.Recover(ctx, s, s.own, ab, insp)
}
