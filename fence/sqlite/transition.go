package sqlite

import (
	"context"
	"encoding/json"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Advance records that the saga reached phase to, with its evidence, on the
// row r names, and updates r. It returns fence_lost (errors.Is ErrFenceLost)
// when the row is gone, owned by someone else, or abandoned: the caller then
// performs no tmux mutation. A backwards or unknown phase, PhasePublished
// before Publish recorded it (Advance to published after Publish only
// re-confirms ownership), or missing evidence (attempt name at helper_invoked, tmux id
// at spawned) is invalid_request, and nothing is written.
func (s *Store) Advance(ctx context.Context, r *fence.Reservation, to fence.Phase, p fence.Patch) error {
	if err := fence.CheckAdvance(r, to, p); err != nil {
		return err
	}
	pid, inc, err := s.own.Self()
	if err != nil {
		return err
	}
	var cur fence.Reservation
	err = s.write(ctx, "advance", func(q queryer) error {
		var err error
		if cur, err = s.ownRow(ctx, q, r.ID, pid, inc); err != nil {
			return err
		}
		if err := fence.AdvanceRow(&cur, to, p, s.now(), s.opt.Lease); err != nil {
			return err
		}
		return writePhase(ctx, q, cur)
	})
	if err == nil {
		cur.StartReason = r.StartReason // in memory only
		*r = cur
	}
	return err
}

// writePhase writes the phase and evidence of cur (AdvanceRow's result) to
// its row.
func writePhase(ctx context.Context, q queryer, cur fence.Reservation) error {
	_, err := q.ExecContext(ctx, `UPDATE reservations SET phase = ?, attempt_name = ?, tmux_id = ?,
		pane_pid = ?, server_pid = ?, server_start = ?, updated_at = ?, lease_until = ?,
		pane_start = ?, cgroup = ? WHERE reservation_id = ?`,
		int(cur.Phase), cur.AttemptName, cur.TmuxID, cur.PanePID, cur.ServerPID, cur.ServerStart,
		fence.Nanos(cur.UpdatedAt), fence.Nanos(cur.LeaseUntil), cur.PaneStart, cur.Cgroup, cur.ID)
	return err
}

// ownRow reads the row pinned to resID and checks it is still ours: same
// owner, not abandoned, in flight in this process. Anything else is fence_lost.
func (s *Store) ownRow(ctx context.Context, q queryer, resID string, pid int, inc string) (fence.Reservation, error) {
	row, ok, err := rowByID(ctx, q, resID)
	if err != nil {
		return fence.Reservation{}, err
	}
	if err := fence.CheckOwn(row, ok, resID, pid, inc); err != nil {
		return fence.Reservation{}, err
	}
	return row, nil
}

// Abandon keeps the row as evidence for recovery and stops treating it as in
// flight: it becomes this process's own abandoned attempt, which a later
// Reserve resolves (DESIGN §6: when cleanup is uncertain the row is kept).
// Abandoning a row that is gone is not an error.
func (s *Store) Abandon(ctx context.Context, resID string) error {
	if err := fence.CheckReservationID(resID); err != nil {
		return err
	}
	defer fence.Untrack(resID) // even if the write fails: in memory the attempt is abandoned
	return s.write(ctx, "abandon", func(q queryer) error {
		now := s.now()
		_, err := q.ExecContext(ctx, `UPDATE reservations SET abandoned = 1, updated_at = ? WHERE reservation_id = ?`,
			fence.Nanos(now), resID)
		return err
	})
}

// Release deletes the row pinned to resID. It is idempotent and never deletes
// a successor's row (reservation ids are never reused).
func (s *Store) Release(ctx context.Context, resID string) error {
	if err := fence.CheckReservationID(resID); err != nil {
		return err
	}
	defer fence.Untrack(resID)
	return s.write(ctx, "release", func(q queryer) error {
		_, err := deleteRow(ctx, q, resID)
		return err
	})
}

// Publish publishes r's generation for its identity, in its own write, so
// "published" is known even if the creator dies right after; the row moves to
// phase published in the same transaction, and rec (the published verdict) is
// appended to the verdict log with its sequence. The row must be ours and at
// phase tagged. The caller Releases the row next.
func (s *Store) Publish(ctx context.Context, r *fence.Reservation, rec verdict.Record) (fence.Published, verdict.Record, error) {
	return s.publish(ctx, r, rec, false)
}

// PublishRelease is Publish and Release in one transaction, for a row at
// phase spawned or tagged (fence.Fence.PublishRelease).
func (s *Store) PublishRelease(ctx context.Context, r *fence.Reservation, rec verdict.Record) (fence.Published, verdict.Record, error) {
	return s.publish(ctx, r, rec, true)
}

func (s *Store) publish(ctx context.Context, r *fence.Reservation, rec verdict.Record, release bool) (fence.Published, verdict.Record, error) {
	if err := fence.CheckReservation(r); err != nil {
		return fence.Published{}, verdict.Record{}, err
	}
	pid, inc, err := s.own.Self()
	if err != nil {
		return fence.Published{}, verdict.Record{}, err
	}
	var pub fence.Published
	err = s.write(ctx, "publish", func(q queryer) error {
		cur, err := s.ownRow(ctx, q, r.ID, pid, inc)
		if err != nil {
			return err
		}
		if err := fence.CheckPublishPhase(cur, release); err != nil {
			return err
		}
		cur.StartReason = r.StartReason
		if pub, err = s.publishRow(ctx, q, cur, release); err != nil {
			return err
		}
		if rec, err = appendVerdict(ctx, q, rec, s.now()); err != nil || !release {
			return err
		}
		_, err = deleteRow(ctx, q, r.ID)
		return err
	})
	if err != nil {
		return fence.Published{}, verdict.Record{}, err
	}
	if release {
		fence.Untrack(r.ID)
	}
	r.Phase, r.UpdatedAt = fence.PhasePublished, pub.PublishedAt
	s.cache.Put(storedPub(pub))
	return pub, rec, nil
}

// publishRow writes cur's published record and moves the row to phase
// published; with release it leaves the row alone, which the same
// transaction deletes.
func (s *Store) publishRow(ctx context.Context, q queryer, cur fence.Reservation, release bool) (fence.Published, error) {
	old, ok, err := publishedFor(ctx, q, cur.Identity)
	if err != nil {
		return fence.Published{}, err
	}
	now := s.now()
	pub, err := fence.NewPublished(cur, old, ok, now)
	if err != nil {
		return fence.Published{}, err
	}
	specJSON, err := json.Marshal(cur.Spec)
	if err != nil {
		return fence.Published{}, err
	}
	_, err = q.ExecContext(ctx, `INSERT INTO identities (state_dir, session_id, generation, reservation_id,
		session_name, tmux_id, server_pid, server_start, state_file, label, published_at, ended, ended_at,
		pane_pid, pane_start, boot_id, cgroup, stop_timeout_ms, stop_since, stop_deadline, stop_reason, stop_killed,
		spec_json, restart_state, restart_due, restart_reason, restarts, failures, starts_json, host, host_machine_id)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?, ?, ?, ?, 0, 0, '', 0, ?, '', 0, '', ?, ?, ?, ?, ?)
		ON CONFLICT (state_dir, session_id) DO UPDATE SET generation = excluded.generation,
		reservation_id = excluded.reservation_id, session_name = excluded.session_name,
		tmux_id = excluded.tmux_id, server_pid = excluded.server_pid, server_start = excluded.server_start,
		state_file = excluded.state_file, label = excluded.label, published_at = excluded.published_at,
		ended = 0, ended_at = 0, pane_pid = excluded.pane_pid, pane_start = excluded.pane_start,
		boot_id = excluded.boot_id, cgroup = excluded.cgroup, stop_timeout_ms = excluded.stop_timeout_ms,
		stop_since = 0, stop_deadline = 0, stop_reason = '', stop_killed = 0,
		spec_json = excluded.spec_json, restart_state = '', restart_due = 0, restart_reason = '',
		restarts = excluded.restarts, failures = excluded.failures, starts_json = excluded.starts_json,
		host = excluded.host, host_machine_id = excluded.host_machine_id`,
		pub.Identity.StateDir, pub.Identity.SessionID, pub.Generation, pub.ReservationID, pub.SessionName,
		pub.TmuxID, pub.ServerPID, pub.ServerStart, pub.StateFile, pub.Label, fence.Nanos(now),
		pub.PanePID, pub.PaneStart, pub.BootID, pub.Cgroup, pub.StopTimeoutMS,
		string(specJSON), pub.Restart.Restarts, pub.Restart.Failures, fence.EncodeStarts(pub.Restart.Starts),
		pub.Host, pub.HostMachineID)
	if err != nil || release {
		return pub, err
	}
	_, err = q.ExecContext(ctx, `UPDATE reservations SET phase = ?, updated_at = ? WHERE reservation_id = ?`,
		int(fence.PhasePublished), fence.Nanos(now), cur.ID)
	return pub, err
}

// MarkEnded marks the identity's published generation gen ended, as a
// compare-and-set on the generation: it returns false (and writes nothing)
// when the published generation is another one or already ended. On success
// rec (the ended verdict) is appended in the same transaction.
func (s *Store) MarkEnded(ctx context.Context, id fence.Identity, gen uint64, rec verdict.Record) (bool, verdict.Record, error) {
	return s.MarkEndedNext(ctx, id, gen, rec, fence.RestartNext{}, nil)
}

// MarkEndedNext is MarkEnded that also records, in the same transaction,
// what follows the end (the restart policy's decision: next start due,
// stopped, gave up) and appends also (the gave_up verdict) after rec when
// not nil. The decision and the ended verdict are one commit: a daemon
// killed after it finds the next start due in the fence.
func (s *Store) MarkEndedNext(ctx context.Context, id fence.Identity, gen uint64, rec verdict.Record, next fence.RestartNext, also *verdict.Record) (bool, verdict.Record, error) {
	id, err := fence.CanonicalIdentity(id)
	if err != nil {
		return false, verdict.Record{}, err
	}
	if err := fence.CheckGeneration(gen); err != nil {
		return false, verdict.Record{}, err
	}
	var done bool
	var endedAt time.Time
	err = s.write(ctx, "mark_ended", func(q queryer) error {
		now := s.now()
		endedAt = now
		res, err := q.ExecContext(ctx, `UPDATE identities SET ended = 1, ended_at = ?
			WHERE state_dir = ? AND session_id = ? AND generation = ? AND ended = 0`,
			fence.Nanos(now), id.StateDir, id.SessionID, gen)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return err
		}
		done = true
		if _, err := q.ExecContext(ctx, `DELETE FROM specs WHERE reservation_id =
			(SELECT reservation_id FROM identities WHERE state_dir = ? AND session_id = ?)
			AND NOT EXISTS (SELECT 1 FROM reservations WHERE reservation_id = specs.reservation_id)`,
			id.StateDir, id.SessionID); err != nil {
			return err
		}
		if next.State != "" {
			if _, err := q.ExecContext(ctx, `UPDATE identities SET restart_state = ?, restart_due = ?,
				restart_reason = ?, failures = ? WHERE state_dir = ? AND session_id = ?`,
				next.State, fence.Nanos(fence.RestartDue(next, now)), next.Reason, next.Failures, id.StateDir, id.SessionID); err != nil {
				return err
			}
		}
		if rec, err = appendVerdict(ctx, q, rec, now); err != nil || also == nil {
			return err
		}
		*also, err = appendVerdict(ctx, q, *also, now)
		return err
	})
	if err != nil || !done {
		return false, verdict.Record{}, err
	}
	s.cache.Ended(id, gen, storedTime(endedAt))
	if next.State != "" {
		s.cache.Restart(id, gen, next, storedTime(fence.RestartDue(next, endedAt)))
	}
	return true, rec, nil
}
