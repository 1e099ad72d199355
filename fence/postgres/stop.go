package postgres

import (
	"context"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// localGen is the compare-and-set condition on one generation of this host.
const localGen = `state_dir = $1 AND session_id = $2 AND generation = $3 AND host = $4 AND machine_id = $5`

func (s *Store) genArgs(id fence.Identity, gen uint64) []any {
	return []any{id.StateDir, id.SessionID, int64(gen), s.host.Name, s.host.MachineID}
}

// BeginStop records that the identity's published generation gen is
// stopping (fence.Fence.BeginStop); the first stop recorded stands. Only a
// generation of this host is stopped from here (ok false otherwise).
func (s *Store) BeginStop(ctx context.Context, id fence.Identity, gen uint64, reason string, deadline time.Time) (fence.Published, bool, error) {
	id, err := fence.CanonicalIdentity(id)
	if err != nil {
		return fence.Published{}, false, err
	}
	var p pub
	var ok bool
	err = s.write(ctx, "begin_stop", lockOn{digest: id.Digest()}, func(t *tx) error {
		t.touch(s.host.Name)
		args := append(s.genArgs(id, gen), fence.Nanos(s.now()), fence.Nanos(deadline), reason)
		if _, err := t.Exec(t.ctx, `UPDATE identities SET stop_since = $6, stop_deadline = $7, stop_reason = $8
			WHERE `+localGen+` AND NOT ended AND stop_since = 0`, args...); err != nil {
			return err
		}
		var err error
		p, ok, err = pubFor(t.ctx, t, id, "")
		ok = fence.RunningGeneration(p.Published, ok, gen) && !s.remote(p.Host, p.HostMachineID)
		return err
	})
	if err != nil {
		return fence.Published{}, false, err
	}
	if ok {
		s.cache.put(p.Published)
	}
	return p.Published, ok, nil
}

// StopKilled records that SIGKILL was sent to the stopping generation gen.
func (s *Store) StopKilled(ctx context.Context, id fence.Identity, gen uint64) error {
	id, err := fence.CanonicalIdentity(id)
	if err != nil {
		return err
	}
	var p pub
	var ok bool
	err = s.write(ctx, "stop_killed", lockOn{digest: id.Digest()}, func(t *tx) error {
		t.touch(s.host.Name)
		if _, err := t.Exec(t.ctx, `UPDATE identities SET stop_killed = true
			WHERE `+localGen+` AND NOT ended AND stop_since <> 0`, s.genArgs(id, gen)...); err != nil {
			return err
		}
		var err error
		p, ok, err = pubFor(t.ctx, t, id, "")
		return err
	})
	if err == nil && ok && !s.remote(p.Host, p.HostMachineID) {
		s.cache.put(p.Published)
	}
	return err
}

// ReleaseStuck is the operator's escape (fence.Fence.ReleaseStuck): it
// removes the reservation row resID, or marks ended the not-ended generation
// it published, whatever host owns it — the operator's decision, asked of
// allowed inside the transaction — and appends describe's verdict.
func (s *Store) ReleaseStuck(ctx context.Context, resID string, allowed func(fence.Released) error,
	describe func(fence.Released) verdict.Record) (fence.Released, verdict.Record, error) {
	if err := fence.CheckReservationID(resID); err != nil {
		return fence.Released{}, verdict.Record{}, err
	}
	var out fence.Released
	var rec verdict.Record
	var endedAt time.Time
	err := s.write(ctx, "release_stuck", lockOn{resID: resID}, func(t *tx) error {
		out = fence.Released{}
		host, err := findStuck(t, resID, &out)
		if err != nil {
			return err
		}
		if err := allowed(out); err != nil {
			return err
		}
		if out.Reservation != nil {
			if _, err := deleteRow(t, resID); err != nil {
				return err
			}
		}
		if p := out.Published; p != nil {
			endedAt = storedTime(s.now())
			t.touch(host)
			t.exec(`UPDATE identities SET ended = true, ended_at = $1
				WHERE state_dir = $2 AND session_id = $3 AND generation = $4 AND NOT ended`,
				fence.Nanos(endedAt), p.Identity.StateDir, p.Identity.SessionID, int64(p.Generation))
			t.exec(`DELETE FROM specs WHERE reservation_id = $1`, resID)
		}
		t.queueVerdict(describe(out), s.host.Name, &rec)
		return nil
	})
	if err != nil {
		return fence.Released{}, verdict.Record{}, err
	}
	if out.Reservation != nil {
		fence.Untrack(resID)
	}
	if p := out.Published; p != nil {
		s.cache.ended(p.Identity, p.Generation, endedAt, fence.RestartNext{})
	}
	return out, rec, nil
}

// findStuck fills in what reservation id resID names: its row and its
// not-ended published generation; neither is not_found.
func findStuck(t *tx, resID string, out *fence.Released) (host string, err error) {
	r, hasRow, err := rowByID(t.ctx, t, resID, forUpdate)
	if err != nil {
		return "", err
	}
	p, hasPub, err := noRows(scanPub(t.QueryRow(t.ctx, `SELECT `+pubCols+` FROM identities WHERE reservation_id = $1
		FOR UPDATE`, resID)))
	if err != nil {
		return "", err
	}
	if *out, err = fence.FindStuck(resID, r.Reservation, hasRow, p.Published, hasPub); err != nil {
		return "", err
	}
	return p.Host, nil
}

// SetRestart changes the restart decision of this host's ended generation
// gen as a compare-and-set on its state from (fence.Fence.SetRestart).
func (s *Store) SetRestart(ctx context.Context, id fence.Identity, gen uint64, from string, next fence.RestartNext, also *verdict.Record) (bool, error) {
	id, err := fence.CanonicalIdentity(id)
	if err != nil {
		return false, err
	}
	var ok bool
	var due time.Time
	err = s.write(ctx, "set_restart", lockOn{digest: id.Digest()}, func(t *tx) error {
		ok = false
		due = storedTime(fence.RestartDue(next, s.now()))
		args := append(s.genArgs(id, gen), next.State, fence.Nanos(due), next.Reason, next.Failures, from)
		tag, err := t.Exec(t.ctx, `UPDATE identities SET restart_state = $6, restart_due = $7, restart_reason = $8,
			failures = $9 WHERE `+localGen+` AND ended AND restart_state = $10`, args...)
		if err != nil || tag.RowsAffected() != 1 {
			return err
		}
		ok = true
		t.touch(s.host.Name)
		if also != nil {
			t.queueVerdict(*also, s.host.Name, also)
		}
		return nil
	})
	if err != nil || !ok {
		return false, err
	}
	s.cache.restart(id, gen, next, due)
	return true, nil
}

// RestartsDue lists this host's identities whose next start is due by
// before, or all that wait (before zero), earliest first: the restarter of
// each host starts its own.
func (s *Store) RestartsDue(ctx context.Context, before time.Time) ([]fence.Published, error) {
	q := `SELECT ` + pubCols + ` FROM identities WHERE restart_state = 'exited' AND ended
		AND host = $1 AND machine_id = $2`
	args := []any{s.host.Name, s.host.MachineID}
	if !before.IsZero() {
		q += ` AND restart_due <= $3`
		args = append(args, fence.Nanos(before))
	}
	out, err := s.pubs(ctx, "restarts_due", q+` ORDER BY restart_due`, args...)
	if len(out) == 0 {
		return nil, err
	}
	return out, err
}
