package sqlite

import (
	"context"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// BeginStop records that the identity's published generation gen is stopping
// (DESIGN §5: a generation ends only once its processes are proven gone), with
// the reason and the time SIGKILL is due, unless a stop is already recorded:
// then the first one stands, so a restarted daemon continues a stop with its
// original deadline instead of granting a new grace period. It returns the
// generation as now recorded; ok is false when gen is not the published,
// not-ended generation.
func (s *Store) BeginStop(ctx context.Context, id fence.Identity, gen uint64, reason string, deadline time.Time) (fence.Published, bool, error) {
	id, err := fence.CanonicalIdentity(id)
	if err != nil {
		return fence.Published{}, false, err
	}
	var pub fence.Published
	var ok bool
	err = s.write(ctx, "begin_stop", func(q queryer) error {
		if _, err := q.ExecContext(ctx, `UPDATE identities SET stop_since = ?, stop_deadline = ?, stop_reason = ?
			WHERE state_dir = ? AND session_id = ? AND generation = ? AND ended = 0 AND stop_since = 0`,
			fence.Nanos(s.now()), fence.Nanos(deadline), reason, id.StateDir, id.SessionID, gen); err != nil {
			return err
		}
		var err error
		pub, ok, err = publishedFor(ctx, q, id)
		ok = fence.RunningGeneration(pub, ok, gen)
		return err
	})
	if err != nil {
		return fence.Published{}, false, err
	}
	if ok {
		s.cache.Put(storedPub(pub))
	}
	return pub, ok, nil
}

// StopKilled records that SIGKILL was sent to the stopping generation gen.
func (s *Store) StopKilled(ctx context.Context, id fence.Identity, gen uint64) error {
	id, err := fence.CanonicalIdentity(id)
	if err != nil {
		return err
	}
	var pub fence.Published
	var ok bool
	err = s.write(ctx, "stop_killed", func(q queryer) error {
		if _, err := q.ExecContext(ctx, `UPDATE identities SET stop_killed = 1
			WHERE state_dir = ? AND session_id = ? AND generation = ? AND ended = 0 AND stop_since <> 0`,
			id.StateDir, id.SessionID, gen); err != nil {
			return err
		}
		var err error
		pub, ok, err = publishedFor(ctx, q, id)
		return err
	})
	if err == nil && ok {
		s.cache.Put(storedPub(pub))
	}
	return err
}

// ReleaseStuck is the operator's escape (`fence release --reservation ID`):
// it removes the reservation row resID, or marks ended the not-ended
// published generation whose reservation it was, and appends rec (filled in
// by describe from what was found) in the same transaction. allowed is asked
// inside the transaction, with what was found, and refuses by returning an
// error: the caller decides there whether the owner or the processes are
// proven alive. Nothing found is not_found.
func (s *Store) ReleaseStuck(ctx context.Context, resID string, allowed func(fence.Released) error,
	describe func(fence.Released) verdict.Record) (fence.Released, verdict.Record, error) {
	if err := fence.CheckReservationID(resID); err != nil {
		return fence.Released{}, verdict.Record{}, err
	}
	var out fence.Released
	var rec verdict.Record
	var endedAt time.Time
	err := s.write(ctx, "release_stuck", func(q queryer) error {
		out = fence.Released{}
		row, hasRow, err := rowByID(ctx, q, resID)
		if err != nil {
			return err
		}
		pub, hasPub, err := scanPublishedRow(ctx, q, resID)
		if err != nil {
			return err
		}
		if out, err = fence.FindStuck(resID, row, hasRow, pub, hasPub); err != nil {
			return err
		}
		if err := allowed(out); err != nil {
			return err
		}
		if out.Reservation != nil {
			if _, err := deleteRow(ctx, q, resID); err != nil {
				return err
			}
		}
		if p := out.Published; p != nil {
			endedAt = s.now()
			if _, err := q.ExecContext(ctx, `UPDATE identities SET ended = 1, ended_at = ?
				WHERE state_dir = ? AND session_id = ? AND generation = ? AND ended = 0`,
				fence.Nanos(endedAt), p.Identity.StateDir, p.Identity.SessionID, p.Generation); err != nil {
				return err
			}
			if _, err := q.ExecContext(ctx, `DELETE FROM specs WHERE reservation_id = ?`, resID); err != nil {
				return err
			}
		}
		rec, err = appendVerdict(ctx, q, describe(out), s.now())
		return err
	})
	if err != nil {
		return fence.Released{}, verdict.Record{}, err
	}
	if out.Reservation != nil {
		fence.Untrack(resID)
	}
	if p := out.Published; p != nil {
		s.cache.Ended(p.Identity, p.Generation, storedTime(endedAt))
	}
	return out, rec, nil
}

func scanPublishedRow(ctx context.Context, q queryer, resID string) (fence.Published, bool, error) {
	p, err := scanPublished(q.QueryRowContext(ctx,
		`SELECT `+pubCols+` FROM identities WHERE reservation_id = ?`, resID))
	return noRows(p, err)
}

// SetRestart changes the restart decision of the identity's ended
// generation gen, as a compare-and-set on the state it had (from): a kill
// of an identity waiting out its delay (exited → stopped), a restart
// request (exited → exited, due now) or a start limit found at the start
// (exited → gave_up, with its verdict also, appended in the same
// transaction). ok is false (nothing written) when gen is no longer the
// identity's generation, is not ended, or its state is not from.
func (s *Store) SetRestart(ctx context.Context, id fence.Identity, gen uint64, from string, next fence.RestartNext, also *verdict.Record) (bool, error) {
	id, err := fence.CanonicalIdentity(id)
	if err != nil {
		return false, err
	}
	var ok bool
	var due time.Time
	err = s.write(ctx, "set_restart", func(q queryer) error {
		due = fence.RestartDue(next, s.now())
		res, err := q.ExecContext(ctx, `UPDATE identities SET restart_state = ?, restart_due = ?, restart_reason = ?,
			failures = ? WHERE state_dir = ? AND session_id = ? AND generation = ? AND ended = 1 AND restart_state = ?`,
			next.State, fence.Nanos(due), next.Reason, next.Failures, id.StateDir, id.SessionID, gen, from)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return err
		}
		ok = true
		if also != nil {
			*also, err = appendVerdict(ctx, q, *also, s.now())
		}
		return err
	})
	if err != nil || !ok {
		return false, err
	}
	s.cache.Restart(id, gen, next, storedTime(due))
	return true, nil
}

// RestartsDue lists the identities whose next start is due by before, or
// all that wait (before zero): the restarter's work after a daemon start.
func (s *Store) RestartsDue(ctx context.Context, before time.Time) ([]fence.Published, error) {
	q := `SELECT ` + pubCols + ` FROM identities WHERE restart_state = 'exited' AND ended = 1`
	args := []any{}
	if !before.IsZero() {
		q += ` AND restart_due <= ?`
		args = append(args, fence.Nanos(before))
	}
	rows, err := s.r.QueryContext(ctx, q+` ORDER BY restart_due`, args...)
	if err != nil {
		return nil, s.dbErr("restarts_due", err)
	}
	defer rows.Close()
	out, err := fence.ScanEach(rows, nil, scanPublished)
	return out, s.dbErrOrNil("restarts_due", err)
}
