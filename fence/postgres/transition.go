package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Advance records that the saga reached phase to, with its evidence, on the
// row r names, and updates r (fence.Fence.Advance).
func (s *Store) Advance(ctx context.Context, r *fence.Reservation, to fence.Phase, p fence.Patch) error {
	if err := fence.CheckAdvance(r, to, p); err != nil {
		return err
	}
	pid, inc, err := s.own.Self()
	if err != nil {
		return err
	}
	if cur, done, err := s.advanceFast(ctx, r, to, p, pid, inc); done {
		if err == nil {
			cur.StartReason = r.StartReason // in memory only
			*r = cur
		}
		return err
	}
	var cur fence.Reservation
	var got row
	var found bool
	lk := lockOn{resID: r.ID, reads: []prefetch{rowRead(&got, &found, byReservation, r.ID)}}
	err = s.write(ctx, "advance", lk, func(t *tx) error {
		var err error
		if cur, err = s.ownRow(got, found, r.ID, pid, inc); err != nil {
			return err
		}
		if err := fence.AdvanceRow(&cur, to, p, storedTime(s.now()), s.opt.Lease); err != nil {
			return err
		}
		writePhase(t, cur)
		return nil
	})
	if err == nil {
		cur.StartReason = r.StartReason // in memory only
		*r = cur
	}
	return err
}

// writePhase writes the phase and evidence of cur (AdvanceRow's result) to
// its row, in t.
func writePhase(t *tx, cur fence.Reservation) {
	t.exec(`UPDATE reservations SET phase = $1, attempt_name = $2, tmux_id = $3,
		pane_pid = $4, server_pid = $5, server_start = $6, updated_at = $7, lease_until = $8,
		pane_start = $9, cgroup = $10 WHERE reservation_id = $11`,
		int(cur.Phase), cur.AttemptName, cur.TmuxID, cur.PanePID, cur.ServerPID, cur.ServerStart,
		fence.Nanos(cur.UpdatedAt), fence.Nanos(cur.LeaseUntil), int64(cur.PaneStart), cur.Cgroup, cur.ID)
}

// advanceFast is Advance in one round trip for the common case: the row is
// still exactly as the caller's r says (a compare-and-set on r's owner and
// every column Advance writes) and r is in flight here. The new values are
// fence.ApplyPatch's on r. done is false when the row differs from r in any
// way: then the full Advance reads the row and says why (or advances a row
// the caller held a stale copy of, as it always did).
func (s *Store) advanceFast(ctx context.Context, r *fence.Reservation, to fence.Phase, p fence.Patch, pid int, inc string) (fence.Reservation, bool, error) {
	if !fence.InFlight(r.ID) || r.OwnerPID != pid || r.OwnerIncarnation != inc {
		return fence.Reservation{}, false, nil
	}
	w := *r
	fence.ApplyPatch(&w, to, p, storedTime(s.now()), s.opt.Lease)
	var got row
	var ok bool
	err := s.write(ctx, "advance", lockOn{resID: r.ID}, func(t *tx) error {
		t.execScan(func(pr pgx.Row) (err error) {
			got, ok, err = noRows(scanRow(pr))
			return err
		}, `UPDATE reservations SET phase = $2, attempt_name = $3, tmux_id = $4, pane_pid = $5,
			server_pid = $6, server_start = $7, pane_start = $8, cgroup = $9, updated_at = $10, lease_until = $11
			WHERE reservation_id = $1 AND owner_pid = $12 AND owner_incarnation = $13 AND owner_host = $14
			AND owner_machine_id = $15 AND NOT abandoned AND phase = $16 AND attempt_name = $17
			AND tmux_id = $18 AND pane_pid = $19 AND server_pid = $20 AND server_start = $21
			AND pane_start = $22 AND cgroup = $23
			RETURNING `+resCols,
			r.ID, int(w.Phase), w.AttemptName, w.TmuxID, w.PanePID, w.ServerPID, w.ServerStart,
			int64(w.PaneStart), w.Cgroup, fence.Nanos(w.UpdatedAt), fence.Nanos(w.LeaseUntil),
			pid, inc, s.host.Name, s.host.MachineID, int(r.Phase), r.AttemptName, r.TmuxID, r.PanePID,
			r.ServerPID, r.ServerStart, int64(r.PaneStart), r.Cgroup)
		return nil
	})
	if err != nil {
		return fence.Reservation{}, true, err
	}
	return got.Reservation, ok, nil
}

// ownRow checks that the row read (locked, under its identity's lock) for
// resID is still ours: same owner on this host, not abandoned, in flight in
// this process. Anything else is fence_lost.
func (s *Store) ownRow(r row, ok bool, resID string, pid int, inc string) (fence.Reservation, error) {
	if ok && s.remote(r.Host, r.HostMachineID) {
		return fence.Reservation{}, fence.Lost(resID, "is owned on host "+r.Host)
	}
	if err := fence.CheckOwn(r.Reservation, ok, resID, pid, inc); err != nil {
		return fence.Reservation{}, err
	}
	return r.Reservation, nil
}

// Abandon keeps the row as evidence for recovery and stops treating it as in
// flight. Abandoning a row that is gone is not an error.
func (s *Store) Abandon(ctx context.Context, resID string) error {
	if err := fence.CheckReservationID(resID); err != nil {
		return err
	}
	defer fence.Untrack(resID) // even if the write fails: in memory the attempt is abandoned
	return s.write(ctx, "abandon", lockOn{resID: resID}, func(t *tx) error {
		t.exec(`UPDATE reservations SET abandoned = true, updated_at = $1 WHERE reservation_id = $2`,
			fence.Nanos(s.now()), resID)
		return nil
	})
}

// Release deletes the row pinned to resID. It is idempotent and never deletes
// a successor's row (reservation ids are never reused).
func (s *Store) Release(ctx context.Context, resID string) error {
	if err := fence.CheckReservationID(resID); err != nil {
		return err
	}
	defer fence.Untrack(resID)
	return s.write(ctx, "release", lockOn{resID: resID}, func(t *tx) error {
		deleteRowLater(t, resID)
		return nil
	})
}

// Publish publishes r's generation for its identity (fence.Fence.Publish), in
// one transaction with the row's move to phase published and rec's append.
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
	var p fence.Published
	var out verdict.Record
	var got row
	var old pub
	var found, hadOld bool
	lk := lockOn{resID: r.ID, reads: []prefetch{
		rowRead(&got, &found, byReservation, r.ID), pubRead(&old, &hadOld, pubOfReservation, r.ID)}}
	err = s.write(ctx, "publish", lk, func(t *tx) error {
		cur, err := s.ownRow(got, found, r.ID, pid, inc)
		if err != nil {
			return err
		}
		if err := fence.CheckPublishPhase(cur, release); err != nil {
			return err
		}
		cur.StartReason = r.StartReason
		if p, err = s.publishRow(t, cur, old.Published, hadOld); err != nil {
			return err
		}
		if release {
			deleteRowLater(t, r.ID)
		}
		t.touch(s.host.Name)
		t.queueVerdict(rec, s.host.Name, &out)
		return nil
	})
	if err != nil {
		return fence.Published{}, verdict.Record{}, err
	}
	if release {
		fence.Untrack(r.ID)
	}
	r.Phase, r.UpdatedAt = fence.PhasePublished, p.PublishedAt
	s.cache.put(p)
	return p, out, nil
}

func (s *Store) publishRow(t *tx, cur fence.Reservation, old fence.Published, ok bool) (fence.Published, error) {
	if ok && old.Identity != cur.Identity {
		return fence.Published{}, fence.Lost(cur.ID, "changed identity") // the read and the row disagree: write nothing
	}
	now := storedTime(s.now())
	p, err := fence.NewPublished(cur, old, ok, now)
	if err != nil {
		return fence.Published{}, err
	}
	specJSON, err := json.Marshal(cur.Spec)
	if err != nil {
		return fence.Published{}, err
	}
	t.exec(`INSERT INTO identities (state_dir, session_id, generation, reservation_id,
		host, machine_id, session_name, tmux_id, server_pid, server_start, state_file, label, published_at,
		pane_pid, pane_start, boot_id, cgroup, stop_timeout_ms, spec_json, restarts, failures, starts_json)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)
		ON CONFLICT (state_dir, session_id) DO UPDATE SET generation = excluded.generation,
		reservation_id = excluded.reservation_id, host = excluded.host, machine_id = excluded.machine_id,
		session_name = excluded.session_name, tmux_id = excluded.tmux_id, server_pid = excluded.server_pid,
		server_start = excluded.server_start, state_file = excluded.state_file, label = excluded.label,
		published_at = excluded.published_at, ended = false, ended_at = 0, pane_pid = excluded.pane_pid,
		pane_start = excluded.pane_start, boot_id = excluded.boot_id, cgroup = excluded.cgroup,
		stop_timeout_ms = excluded.stop_timeout_ms, stop_since = 0, stop_deadline = 0, stop_reason = '',
		stop_killed = false, spec_json = excluded.spec_json, restart_state = '', restart_due = 0,
		restart_reason = '', restarts = excluded.restarts, failures = excluded.failures,
		starts_json = excluded.starts_json`,
		p.Identity.StateDir, p.Identity.SessionID, int64(p.Generation), p.ReservationID, p.Host,
		p.HostMachineID, p.SessionName, p.TmuxID, p.ServerPID, p.ServerStart, p.StateFile, p.Label, fence.Nanos(now),
		p.PanePID, int64(p.PaneStart), p.BootID, p.Cgroup, p.StopTimeoutMS,
		string(specJSON), p.Restart.Restarts, p.Restart.Failures, fence.EncodeStarts(p.Restart.Starts))
	t.exec(`UPDATE reservations SET phase = $1, updated_at = $2 WHERE reservation_id = $3`,
		int(fence.PhasePublished), fence.Nanos(now), cur.ID)
	return p, nil
}

// MarkEnded marks the identity's published generation gen ended, as a
// compare-and-set on the generation (fence.Fence.MarkEnded).
func (s *Store) MarkEnded(ctx context.Context, id fence.Identity, gen uint64, rec verdict.Record) (bool, verdict.Record, error) {
	return s.MarkEndedNext(ctx, id, gen, rec, fence.RestartNext{}, nil)
}

// MarkEndedNext is MarkEnded that also records what follows the end and
// appends also after rec, in one commit. Only this host's generations are
// ended here: the compare-and-set names the host, so a generation of another
// host (whose session only it can see) is never ended by this one's view.
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
	var out verdict.Record
	err = s.write(ctx, "mark_ended", lockOn{digest: id.Digest()}, func(t *tx) error {
		done = false
		endedAt = storedTime(s.now())
		tag, err := t.Exec(t.ctx, `UPDATE identities SET ended = true, ended_at = $1
			WHERE state_dir = $2 AND session_id = $3 AND generation = $4 AND NOT ended AND host = $5 AND machine_id = $6`,
			fence.Nanos(endedAt), id.StateDir, id.SessionID, int64(gen), s.host.Name, s.host.MachineID)
		if err != nil || tag.RowsAffected() != 1 {
			return err
		}
		done = true
		t.touch(s.host.Name)
		endSpecs(t, id)
		if next.State != "" {
			t.exec(`UPDATE identities SET restart_state = $1, restart_due = $2,
				restart_reason = $3, failures = $4 WHERE state_dir = $5 AND session_id = $6`,
				next.State, fence.Nanos(fence.RestartDue(next, endedAt)), next.Reason, next.Failures,
				id.StateDir, id.SessionID)
		}
		t.queueVerdict(rec, s.host.Name, &out)
		if also != nil {
			t.queueVerdict(*also, s.host.Name, also)
		}
		return nil
	})
	if err != nil || !done {
		return false, verdict.Record{}, err
	}
	s.cache.ended(id, gen, endedAt, next)
	return true, out, nil
}

// endSpecs deletes the spec of the identity's ended generation once no
// reservation row needs it (with COMMIT).
func endSpecs(t *tx, id fence.Identity) {
	t.exec(`DELETE FROM specs WHERE reservation_id =
		(SELECT reservation_id FROM identities WHERE state_dir = $1 AND session_id = $2)
		AND NOT EXISTS (SELECT 1 FROM reservations WHERE reservation_id = specs.reservation_id)`,
		id.StateDir, id.SessionID)
}
