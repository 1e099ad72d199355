package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// The pane helper opens the fence with its own Store (another process) and
// writes here: its start, before its gate, and the end of an agent it could
// not exec, so that failure is recorded even while the daemon is down.

// RecordHelperStart records the pane helper's pid and incarnation against its
// reservation and generation, creating the postmortem row that RecordPostmortem
// completes. The reservation must still exist, or have published its
// generation; otherwise fence_lost: the helper must not run the agent.
//
// cgroup is the generation's cgroup the helper entered before anything else
// ("" when it entered none): its record tells end detection that the cgroup
// alone holds the whole tree.
func (s *Store) RecordHelperStart(ctx context.Context, resID string, pid int, incarnation, cgroup string) error {
	if err := fence.CheckHelperStart(resID, pid, incarnation); err != nil {
		return err
	}
	return s.write(ctx, "helper_start", func(q queryer) error {
		id, gen, err := generationOf(ctx, q, resID)
		if err != nil {
			return err
		}
		return s.writeHelperStart(ctx, q, resID, id, gen, pid, incarnation, cgroup)
	})
}

// writeHelperStart writes the start record of reservation resID (identity
// id, generation gen): RecordHelperStart's, and a claim's (claimIn).
func (s *Store) writeHelperStart(ctx context.Context, q queryer, resID string, id fence.Identity, gen uint64, pid int, incarnation, cgroup string) error {
	if _, err := q.ExecContext(ctx, `INSERT INTO postmortems (reservation_id, state_dir, session_id,
		generation, helper_pid, helper_incarnation, started_at, cgroup) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (reservation_id) DO UPDATE SET helper_pid = excluded.helper_pid,
		helper_incarnation = excluded.helper_incarnation, cgroup = excluded.cgroup`,
		resID, id.StateDir, id.SessionID, gen, pid, incarnation, fence.Nanos(s.now()), cgroup); err != nil {
		return err
	}
	_, err := q.ExecContext(ctx, `UPDATE reservations SET helper_pid = ? WHERE reservation_id = ?`, pid, resID)
	return err
}

// HelperSpec returns the spec of reservation resID, written with the row by
// Reserve and kept after the row's release until the generation ends (schema 3),
// so the pane helper reads it whether it starts before or after publication.
// ok is false when there is none: the reservation was released unpublished, its
// generation ended, or it never existed.
func (s *Store) HelperSpec(ctx context.Context, resID string) (fence.HelperSpec, bool, error) {
	if err := fence.CheckReservationID(resID); err != nil {
		return fence.HelperSpec{}, false, err
	}
	if err := s.writable("spec"); err != nil {
		return fence.HelperSpec{}, false, err
	}
	var h fence.HelperSpec
	var specJSON string
	err := s.r.QueryRowContext(ctx, `SELECT state_dir, session_id, generation, spec_json FROM specs
		WHERE reservation_id = ?`, resID).Scan(&h.Identity.StateDir, &h.Identity.SessionID, &h.Generation, &specJSON)
	if err == sql.ErrNoRows {
		return fence.HelperSpec{}, false, nil
	}
	if err != nil {
		return fence.HelperSpec{}, false, s.dbErr("spec", err)
	}
	if err := json.Unmarshal([]byte(specJSON), &h.Spec); err != nil {
		return fence.HelperSpec{}, false, s.dbErr("spec", err)
	}
	h.ReservationID = resID
	return h, true, nil
}

// generationOf finds the identity and generation of reservation resID, from
// its row or, once released, from the published record.
func generationOf(ctx context.Context, q queryer, resID string) (fence.Identity, uint64, error) {
	row, ok, err := rowByID(ctx, q, resID)
	if err != nil {
		return fence.Identity{}, 0, err
	}
	if ok {
		return row.Identity, row.Generation, nil
	}
	var id fence.Identity
	var gen uint64
	err = q.QueryRowContext(ctx, `SELECT state_dir, session_id, generation FROM identities
		WHERE reservation_id = ?`, resID).Scan(&id.StateDir, &id.SessionID, &gen)
	if err == sql.ErrNoRows {
		return fence.Identity{}, 0, fence.Lost(resID, "has no row and no published generation")
	}
	return id, gen, err
}

// RecordPostmortem records (or completes) the agent's postmortem, keyed by its
// reservation id. Identity and Generation may be left zero when
// RecordHelperStart created the row.
func (s *Store) RecordPostmortem(ctx context.Context, pm fence.Postmortem) error {
	if err := fence.CheckPostmortem(&pm); err != nil {
		return err
	}
	return s.write(ctx, "postmortem", func(q queryer) error {
		if pm.Identity == (fence.Identity{}) || pm.Generation == 0 {
			id, gen, err := postmortemKey(ctx, q, pm.ReservationID)
			if err != nil {
				return err
			}
			pm.Identity, pm.Generation = id, gen
		}
		var status any
		if pm.ExitStatus != nil {
			status = *pm.ExitStatus
		}
		// agent_pid and the rusage columns (schema 1) stay at their
		// defaults: the helper that records an end never ran an agent.
		_, err := q.ExecContext(ctx, `INSERT INTO postmortems (reservation_id, state_dir, session_id,
			generation, helper_pid, helper_incarnation, exit_status, signal, started_at, ended_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (reservation_id) DO UPDATE SET
			helper_pid = CASE WHEN excluded.helper_pid > 0 THEN excluded.helper_pid ELSE helper_pid END,
			helper_incarnation = CASE WHEN excluded.helper_incarnation <> '' THEN excluded.helper_incarnation
				ELSE helper_incarnation END,
			exit_status = excluded.exit_status, signal = excluded.signal,
			started_at = CASE WHEN excluded.started_at > 0 THEN excluded.started_at ELSE started_at END,
			ended_at = excluded.ended_at`,
			pm.ReservationID, pm.Identity.StateDir, pm.Identity.SessionID, pm.Generation, pm.HelperPID,
			pm.HelperIncarnation, status, pm.Signal, fence.Nanos(pm.StartedAt), fence.Nanos(pm.EndedAt))
		return err
	})
}

func postmortemKey(ctx context.Context, q queryer, resID string) (fence.Identity, uint64, error) {
	var id fence.Identity
	var gen uint64
	err := q.QueryRowContext(ctx, `SELECT state_dir, session_id, generation FROM postmortems
		WHERE reservation_id = ?`, resID).Scan(&id.StateDir, &id.SessionID, &gen)
	if err == sql.ErrNoRows {
		return generationOf(ctx, q, resID)
	}
	return id, gen, err
}

// Postmortem returns the postmortem of the identity's generation gen, if the
// pane helper recorded one (EndedAt is zero while the agent still runs).
func (s *Store) Postmortem(ctx context.Context, id fence.Identity, gen uint64) (fence.Postmortem, bool, error) {
	id, err := fence.CanonicalIdentity(id)
	if err != nil {
		return fence.Postmortem{}, false, err
	}
	if err := s.writable("postmortem"); err != nil {
		return fence.Postmortem{}, false, err
	}
	var pm fence.Postmortem
	var status sql.NullInt64
	var started, ended int64
	err = s.r.QueryRowContext(ctx, `SELECT reservation_id, state_dir, session_id, generation, helper_pid,
		helper_incarnation, agent_pid, exit_status, signal, started_at, ended_at, cgroup FROM postmortems
		WHERE state_dir = ? AND session_id = ? AND generation = ?
		ORDER BY started_at DESC LIMIT 1`, id.StateDir, id.SessionID, gen).Scan(
		&pm.ReservationID, &pm.Identity.StateDir, &pm.Identity.SessionID, &pm.Generation, &pm.HelperPID,
		&pm.HelperIncarnation, &pm.AgentPID, &status, &pm.Signal, &started, &ended, &pm.Cgroup)
	pm, ok, err := noRows(pm, err)
	if err != nil || !ok {
		return fence.Postmortem{}, false, s.dbErrOrNil("postmortem", err)
	}
	if status.Valid {
		v := int(status.Int64)
		pm.ExitStatus = &v
	}
	pm.StartedAt, pm.EndedAt = fence.FromNanos(started), fence.FromNanos(ended)
	return pm, true, nil
}

func (s *Store) dbErrOrNil(op string, err error) error {
	if err == nil {
		return nil
	}
	return s.dbErr(op, err)
}

var _ verdict.Journal = (*Store)(nil)
