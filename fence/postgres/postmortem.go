package postgres

import (
	"context"
	"encoding/json"

	"github.com/skc-supervisor/skc-supervisor/fence"
)

// The pane helper opens the fence with its own Store (another process) and
// writes here, so an agent's exit is recorded even while the daemon is down.

// RecordHelperStart records the pane helper's pid, incarnation and cgroup
// against its reservation and generation (fence.Fence.RecordHelperStart).
func (s *Store) RecordHelperStart(ctx context.Context, resID string, pid int, incarnation, cgroup string) error {
	if err := fence.CheckHelperStart(resID, pid, incarnation); err != nil {
		return err
	}
	return s.write(ctx, "helper_start", lockOn{resID: resID}, func(t *tx) error {
		id, gen, err := generationOf(t, resID)
		if err != nil {
			return err
		}
		s.writeHelperStart(t, resID, id, gen, pid, incarnation, cgroup)
		return nil
	})
}

// writeHelperStart writes the start record of reservation resID (identity
// id, generation gen) in t: RecordHelperStart's, and a claim's (claimIn).
func (s *Store) writeHelperStart(t *tx, resID string, id fence.Identity, gen uint64, pid int, incarnation, cgroup string) {
	t.exec(`INSERT INTO postmortems (reservation_id, host, state_dir, session_id,
		generation, helper_pid, helper_incarnation, started_at, cgroup) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (reservation_id) DO UPDATE SET helper_pid = excluded.helper_pid,
		helper_incarnation = excluded.helper_incarnation, cgroup = excluded.cgroup`,
		resID, s.host.Name, id.StateDir, id.SessionID, int64(gen), pid, incarnation, fence.Nanos(s.now()), cgroup)
	t.exec(`UPDATE reservations SET helper_pid = $1 WHERE reservation_id = $2`, pid, resID)
}

// HelperSpec returns the spec of reservation resID, kept after the row's
// release until its generation ends; ok is false when there is none.
func (s *Store) HelperSpec(ctx context.Context, resID string) (fence.HelperSpec, bool, error) {
	if err := fence.CheckReservationID(resID); err != nil {
		return fence.HelperSpec{}, false, err
	}
	var h fence.HelperSpec
	var specJSON string
	var gen int64
	err := s.pool.QueryRow(ctx, `SELECT state_dir, session_id, generation, spec_json FROM specs
		WHERE reservation_id = $1`, resID).Scan(&h.Identity.StateDir, &h.Identity.SessionID, &gen, &specJSON)
	if _, ok, err := noRows(h, err); err != nil || !ok {
		return fence.HelperSpec{}, false, s.dbErrOrNil("spec", err)
	}
	if err := json.Unmarshal([]byte(specJSON), &h.Spec); err != nil {
		return fence.HelperSpec{}, false, s.dbErr("spec", err)
	}
	h.ReservationID, h.Generation = resID, uint64(gen)
	return h, true, nil
}

// generationOf finds the identity and generation of reservation resID, from
// its row or, once released, from the published record.
func generationOf(t *tx, resID string) (fence.Identity, uint64, error) {
	var id fence.Identity
	var gen int64
	err := t.QueryRow(t.ctx, `SELECT state_dir, session_id, generation FROM reservations WHERE reservation_id = $1
		UNION ALL SELECT state_dir, session_id, generation FROM identities WHERE reservation_id = $1 LIMIT 1`,
		resID).Scan(&id.StateDir, &id.SessionID, &gen)
	if _, ok, err := noRows(id, err); err != nil {
		return fence.Identity{}, 0, err
	} else if !ok {
		return fence.Identity{}, 0, fence.Lost(resID, "has no row and no published generation")
	}
	return id, uint64(gen), nil
}

// RecordPostmortem records (or completes) the agent's postmortem, keyed by
// its reservation id (fence.Fence.RecordPostmortem).
func (s *Store) RecordPostmortem(ctx context.Context, pm fence.Postmortem) error {
	if err := fence.CheckPostmortem(&pm); err != nil {
		return err
	}
	return s.write(ctx, "postmortem", lockOn{}, func(t *tx) error {
		if pm.Identity == (fence.Identity{}) || pm.Generation == 0 {
			id, gen, err := postmortemKey(t, pm.ReservationID)
			if err != nil {
				return err
			}
			pm.Identity, pm.Generation = id, gen
		}
		var status any
		if pm.ExitStatus != nil {
			status = *pm.ExitStatus
		}
		// agent_pid stays at its default: the helper that records an end
		// never ran an agent (it execs it; the exit is then tmux's).
		t.exec(`INSERT INTO postmortems AS p (reservation_id, host, state_dir, session_id,
			generation, helper_pid, helper_incarnation, exit_status, signal, started_at, ended_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
			ON CONFLICT (reservation_id) DO UPDATE SET
			helper_pid = CASE WHEN excluded.helper_pid > 0 THEN excluded.helper_pid ELSE p.helper_pid END,
			helper_incarnation = CASE WHEN excluded.helper_incarnation <> '' THEN excluded.helper_incarnation
				ELSE p.helper_incarnation END,
			exit_status = excluded.exit_status, signal = excluded.signal,
			started_at = CASE WHEN excluded.started_at > 0 THEN excluded.started_at ELSE p.started_at END,
			ended_at = excluded.ended_at`,
			pm.ReservationID, s.host.Name, pm.Identity.StateDir, pm.Identity.SessionID, int64(pm.Generation),
			pm.HelperPID, pm.HelperIncarnation, status, pm.Signal, fence.Nanos(pm.StartedAt), fence.Nanos(pm.EndedAt))
		return nil
	})
}

func postmortemKey(t *tx, resID string) (fence.Identity, uint64, error) {
	var id fence.Identity
	var gen int64
	err := t.QueryRow(t.ctx, `SELECT state_dir, session_id, generation FROM postmortems
		WHERE reservation_id = $1`, resID).Scan(&id.StateDir, &id.SessionID, &gen)
	if _, ok, err := noRows(id, err); err != nil {
		return fence.Identity{}, 0, err
	} else if !ok {
		return generationOf(t, resID)
	}
	return id, uint64(gen), nil
}

// Postmortem returns the postmortem of the identity's generation gen, if the
// pane helper recorded one (EndedAt is zero while the agent still runs).
func (s *Store) Postmortem(ctx context.Context, id fence.Identity, gen uint64) (fence.Postmortem, bool, error) {
	id, err := fence.CanonicalIdentity(id)
	if err != nil {
		return fence.Postmortem{}, false, err
	}
	var pm fence.Postmortem
	var status *int32
	var g, started, ended int64
	err = s.pool.QueryRow(ctx, `SELECT reservation_id, state_dir, session_id, generation, helper_pid,
		helper_incarnation, agent_pid, exit_status, signal, started_at, ended_at, cgroup FROM postmortems
		WHERE state_dir = $1 AND session_id = $2 AND generation = $3
		ORDER BY started_at DESC LIMIT 1`, id.StateDir, id.SessionID, int64(gen)).Scan(
		&pm.ReservationID, &pm.Identity.StateDir, &pm.Identity.SessionID, &g, &pm.HelperPID,
		&pm.HelperIncarnation, &pm.AgentPID, &status, &pm.Signal, &started, &ended, &pm.Cgroup)
	if _, ok, err := noRows(pm, err); err != nil || !ok {
		return fence.Postmortem{}, false, s.dbErrOrNil("postmortem", err)
	}
	if status != nil {
		v := int(*status)
		pm.ExitStatus = &v
	}
	pm.Generation = uint64(g)
	pm.StartedAt, pm.EndedAt = fence.FromNanos(started), fence.FromNanos(ended)
	return pm, true, nil
}

func (s *Store) dbErrOrNil(op string, err error) error {
	if err == nil {
		return nil
	}
	return s.dbErr(op, err)
}
