package fence

import (
	"context"
	"encoding/json"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Advance records that the saga reached phase to, with its evidence, on the
// row r names, and updates r. It returns fence_lost (errors.Is ErrFenceLost)
// when the row is gone, owned by someone else, or abandoned: the caller then
// performs no tmux mutation. A backwards or unknown phase, PhasePublished
// before Publish recorded it (Advance to published after Publish only
// re-confirms ownership), or missing evidence (attempt name at helper_invoked, tmux id
// at spawned) is invalid_request, and nothing is written.
func (s *Store) Advance(ctx context.Context, r *Reservation, to Phase, p Patch) error {
	if r == nil {
		return invalid("reservation", "nil reservation")
	}
	if err := checkReservationID(r.ID); err != nil {
		return err
	}
	switch {
	case !to.Valid():
		return invalid("phase", "unknown phase %d", int(to))
	case to == PhasePublished && r.Phase != PhasePublished:
		return invalid("phase", "phase published is recorded by Publish")
	case to < r.Phase:
		return invalid("phase", "phase %s is before the reservation's %s", to, r.Phase)
	}
	if err := checkPatch(r.ID, to, p); err != nil {
		return err
	}
	pid, inc, err := s.self()
	if err != nil {
		return err
	}
	var cur Reservation
	err = s.write(ctx, "advance", func(q queryer) error {
		var err error
		if cur, err = s.ownRow(ctx, q, r.ID, pid, inc); err != nil {
			return err
		}
		if to < cur.Phase {
			return invalid("phase", "phase %s is before the recorded %s", to, cur.Phase)
		}
		applyPatch(&cur, to, p, s.now(), s.opt.Lease)
		_, err = q.ExecContext(ctx, `UPDATE reservations SET phase = ?, attempt_name = ?, tmux_id = ?,
			pane_pid = ?, server_pid = ?, server_start = ?, updated_at = ?, lease_until = ?,
			pane_start = ?, cgroup = ? WHERE reservation_id = ?`,
			int(cur.Phase), cur.AttemptName, cur.TmuxID, cur.PanePID, cur.ServerPID, cur.ServerStart,
			nanos(cur.UpdatedAt), nanos(cur.LeaseUntil), cur.PaneStart, cur.Cgroup, cur.ID)
		return err
	})
	if err == nil {
		cur.StartReason = r.StartReason // in memory only
		*r = cur
	}
	return err
}

func applyPatch(r *Reservation, to Phase, p Patch, now time.Time, lease time.Duration) {
	r.Phase, r.UpdatedAt, r.LeaseUntil = to, now, now.Add(lease)
	if p.AttemptName != "" {
		r.AttemptName = p.AttemptName
	}
	if p.TmuxID != "" {
		r.TmuxID = p.TmuxID
	}
	if p.PanePID != 0 {
		r.PanePID = p.PanePID
	}
	if p.ServerPID != 0 {
		r.ServerPID = p.ServerPID
	}
	if p.ServerStart != 0 {
		r.ServerStart = p.ServerStart
	}
	if p.PaneStart != 0 {
		r.PaneStart = p.PaneStart
	}
	if p.Cgroup != "" {
		r.Cgroup = p.Cgroup
	}
}

// ownRow reads the row pinned to resID and checks it is still ours: same
// owner, not abandoned, in flight in this process. Anything else is fence_lost.
func (s *Store) ownRow(ctx context.Context, q queryer, resID string, pid int, inc string) (Reservation, error) {
	row, ok, err := rowByID(ctx, q, resID)
	switch {
	case err != nil:
		return Reservation{}, err
	case !ok:
		return Reservation{}, lost(resID, "no longer exists")
	case row.OwnerPID != pid || row.OwnerIncarnation != inc:
		return Reservation{}, lost(resID, "is owned by another process")
	case row.Abandoned || !inFlight(resID):
		return Reservation{}, lost(resID, "was abandoned")
	}
	return row, nil
}

// Abandon keeps the row as evidence for recovery and stops treating it as in
// flight: it becomes this process's own abandoned attempt, which a later
// Reserve resolves (DESIGN §6: when cleanup is uncertain the row is kept).
// Abandoning a row that is gone is not an error.
func (s *Store) Abandon(ctx context.Context, resID string) error {
	if err := checkReservationID(resID); err != nil {
		return err
	}
	defer untrack(resID) // even if the write fails: in memory the attempt is abandoned
	return s.write(ctx, "abandon", func(q queryer) error {
		now := s.now()
		_, err := q.ExecContext(ctx, `UPDATE reservations SET abandoned = 1, updated_at = ? WHERE reservation_id = ?`,
			nanos(now), resID)
		return err
	})
}

// Release deletes the row pinned to resID. It is idempotent and never deletes
// a successor's row (reservation ids are never reused).
func (s *Store) Release(ctx context.Context, resID string) error {
	if err := checkReservationID(resID); err != nil {
		return err
	}
	defer untrack(resID)
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
func (s *Store) Publish(ctx context.Context, r *Reservation, rec verdict.Record) (Published, verdict.Record, error) {
	if r == nil {
		return Published{}, verdict.Record{}, invalid("reservation", "nil reservation")
	}
	if err := checkReservationID(r.ID); err != nil {
		return Published{}, verdict.Record{}, err
	}
	pid, inc, err := s.self()
	if err != nil {
		return Published{}, verdict.Record{}, err
	}
	var pub Published
	err = s.write(ctx, "publish", func(q queryer) error {
		cur, err := s.ownRow(ctx, q, r.ID, pid, inc)
		if err != nil {
			return err
		}
		if cur.Phase != PhaseTagged {
			return invalid("phase", "publish needs phase tagged; reservation %s is at %s", cur.ID, cur.Phase)
		}
		cur.StartReason = r.StartReason
		if pub, err = s.publishRow(ctx, q, cur); err != nil {
			return err
		}
		rec, err = appendVerdict(ctx, q, rec, s.now())
		return err
	})
	if err != nil {
		return Published{}, verdict.Record{}, err
	}
	r.Phase, r.UpdatedAt = PhasePublished, pub.PublishedAt
	s.cache.put(pub)
	return pub, rec, nil
}

func (s *Store) publishRow(ctx context.Context, q queryer, cur Reservation) (Published, error) {
	old, ok, err := publishedFor(ctx, q, cur.Identity)
	if err != nil {
		return Published{}, err
	}
	if ok && old.Generation >= cur.Generation {
		return Published{}, verdict.Errorf(verdict.CodeInternal, map[string]any{"generation": cur.Generation},
			"generation %d is not above the published %d", cur.Generation, old.Generation)
	}
	if cur.StartReason != "" && (!ok || !old.Ended || old.Restart.State != RestartExited) {
		// The next start was cancelled while this one was under way (a kill
		// of the waiting identity): it must not publish.
		return Published{}, verdict.Errorf(verdict.CodeSpawnFailed, map[string]any{"restart_state": old.Restart.State},
			"restart of generation %d cancelled: the identity no longer waits for its next start", old.Generation)
	}
	now := s.now()
	pub := Published{Identity: cur.Identity, Generation: cur.Generation, ReservationID: cur.ID,
		SessionName: cur.AttemptName, TmuxID: cur.TmuxID, ServerPID: cur.ServerPID, ServerStart: cur.ServerStart,
		StateFile: cur.Spec.StateFile, Label: cur.Spec.Label, PublishedAt: now,
		PanePID: cur.PanePID, PaneStart: cur.PaneStart, Cgroup: cur.Cgroup,
		StopTimeoutMS: cur.Spec.StopTimeout().Milliseconds(), Spec: cur.Spec}
	pub.Restart = nextStarts(old, ok, cur.StartReason, now)
	if ok {
		pub.Superseded = &old
	}
	pub.BootID, _ = bootID() // "" only where the fence could not have reserved either
	specJSON, err := json.Marshal(cur.Spec)
	if err != nil {
		return Published{}, err
	}
	_, err = q.ExecContext(ctx, `INSERT INTO identities (state_dir, session_id, generation, reservation_id,
		session_name, tmux_id, server_pid, server_start, state_file, label, published_at, ended, ended_at,
		pane_pid, pane_start, boot_id, cgroup, stop_timeout_ms, stop_since, stop_deadline, stop_reason, stop_killed,
		spec_json, restart_state, restart_due, restart_reason, restarts, failures, starts_json)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?, ?, ?, ?, 0, 0, '', 0, ?, '', 0, '', ?, ?, ?)
		ON CONFLICT (state_dir, session_id) DO UPDATE SET generation = excluded.generation,
		reservation_id = excluded.reservation_id, session_name = excluded.session_name,
		tmux_id = excluded.tmux_id, server_pid = excluded.server_pid, server_start = excluded.server_start,
		state_file = excluded.state_file, label = excluded.label, published_at = excluded.published_at,
		ended = 0, ended_at = 0, pane_pid = excluded.pane_pid, pane_start = excluded.pane_start,
		boot_id = excluded.boot_id, cgroup = excluded.cgroup, stop_timeout_ms = excluded.stop_timeout_ms,
		stop_since = 0, stop_deadline = 0, stop_reason = '', stop_killed = 0,
		spec_json = excluded.spec_json, restart_state = '', restart_due = 0, restart_reason = '',
		restarts = excluded.restarts, failures = excluded.failures, starts_json = excluded.starts_json`,
		pub.Identity.StateDir, pub.Identity.SessionID, pub.Generation, pub.ReservationID, pub.SessionName,
		pub.TmuxID, pub.ServerPID, pub.ServerStart, pub.StateFile, pub.Label, nanos(now),
		pub.PanePID, pub.PaneStart, pub.BootID, pub.Cgroup, pub.StopTimeoutMS,
		string(specJSON), pub.Restart.Restarts, pub.Restart.Failures, encodeStarts(pub.Restart.Starts))
	if err != nil {
		return Published{}, err
	}
	_, err = q.ExecContext(ctx, `UPDATE reservations SET phase = ?, updated_at = ? WHERE reservation_id = ?`,
		int(PhasePublished), nanos(now), cur.ID)
	return pub, err
}

// maxStarts bounds the start times kept per identity: the start limit
// (restart_burst, at most this) needs no more.
const maxStarts = 100

// nextStarts is the restart bookkeeping of a generation published at now: a
// restart (reason set, over an earlier generation) counts one more start
// after the first and keeps the consecutive failures; a create starts over.
func nextStarts(old Published, hadOld bool, reason string, now time.Time) RestartInfo {
	if reason == "" || !hadOld {
		return RestartInfo{Starts: []time.Time{now}}
	}
	starts := append(append([]time.Time(nil), old.Restart.Starts...), now)
	if len(starts) > maxStarts {
		starts = starts[len(starts)-maxStarts:]
	}
	return RestartInfo{Restarts: old.Restart.Restarts + 1, Failures: old.Restart.Failures, Starts: starts}
}

// MarkEnded marks the identity's published generation gen ended, as a
// compare-and-set on the generation: it returns false (and writes nothing)
// when the published generation is another one or already ended. On success
// rec (the ended verdict) is appended in the same transaction.
func (s *Store) MarkEnded(ctx context.Context, id Identity, gen uint64, rec verdict.Record) (bool, verdict.Record, error) {
	return s.MarkEndedNext(ctx, id, gen, rec, RestartNext{}, nil)
}

// MarkEndedNext is MarkEnded that also records, in the same transaction,
// what follows the end (the restart policy's decision: next start due,
// stopped, gave up) and appends also (the gave_up verdict) after rec when
// not nil. The decision and the ended verdict are one commit: a daemon
// killed after it finds the next start due in the fence.
func (s *Store) MarkEndedNext(ctx context.Context, id Identity, gen uint64, rec verdict.Record, next RestartNext, also *verdict.Record) (bool, verdict.Record, error) {
	id, err := CanonicalIdentity(id)
	if err != nil {
		return false, verdict.Record{}, err
	}
	if gen == 0 {
		return false, verdict.Record{}, invalid("generation", "generation 0 is never published")
	}
	var done bool
	var endedAt time.Time
	err = s.write(ctx, "mark_ended", func(q queryer) error {
		now := s.now()
		endedAt = now
		res, err := q.ExecContext(ctx, `UPDATE identities SET ended = 1, ended_at = ?
			WHERE state_dir = ? AND session_id = ? AND generation = ? AND ended = 0`,
			nanos(now), id.StateDir, id.SessionID, gen)
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
				next.State, nanos(dueOf(next, now)), next.Reason, next.Failures, id.StateDir, id.SessionID); err != nil {
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
	s.cache.ended(id, gen, endedAt)
	if next.State != "" {
		s.cache.restart(id, gen, next, dueOf(next, endedAt))
	}
	return true, rec, nil
}
