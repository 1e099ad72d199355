package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"

	"github.com/skc-supervisor/skc-supervisor/fence"
)

// The row helpers below run inside a transition's transaction (or on the
// reader pool); they never start one.

const resCols = `state_dir, session_id, reservation_id, spec_json, owner_pid, owner_incarnation,
	phase, generation, attempt_name, tmux_id, pane_pid, server_pid, server_start, helper_pid,
	abandoned, claimed_at, updated_at, lease_until, pane_start, cgroup, host, host_machine_id, host_boot_id`

type scanner = fence.Scanner

func scanReservation(sc scanner) (fence.Reservation, error) {
	var rs fence.ReservationScan
	if err := sc.Scan(rs.Dest()...); err != nil {
		return fence.Reservation{}, err
	}
	return rs.Decode()
}

// rowFor returns the identity's reservation row, if any.
func rowFor(ctx context.Context, q queryer, id fence.Identity) (fence.Reservation, bool, error) {
	r, err := scanReservation(q.QueryRowContext(ctx,
		`SELECT `+resCols+` FROM reservations WHERE state_dir = ? AND session_id = ?`, id.StateDir, id.SessionID))
	return noRows(r, err)
}

// rowByID returns the reservation row with id resID, if it still exists.
func rowByID(ctx context.Context, q queryer, resID string) (fence.Reservation, bool, error) {
	r, err := scanReservation(q.QueryRowContext(ctx,
		`SELECT `+resCols+` FROM reservations WHERE reservation_id = ?`, resID))
	return noRows(r, err)
}

func noRows[T any](v T, err error) (T, bool, error) {
	if errors.Is(err, sql.ErrNoRows) {
		var zero T
		return zero, false, nil
	}
	return v, err == nil, err
}

const pubCols = `state_dir, session_id, generation, reservation_id, session_name, tmux_id,
	server_pid, server_start, state_file, label, published_at, ended, ended_at,
	pane_pid, pane_start, boot_id, cgroup, stop_timeout_ms, stop_since, stop_deadline, stop_reason, stop_killed,
	spec_json, restart_state, restart_due, restart_reason, restarts, failures, starts_json, host, host_machine_id`

func scanPublished(sc scanner) (fence.Published, error) {
	var ps fence.PublishedScan
	if err := sc.Scan(ps.Dest()...); err != nil {
		return fence.Published{}, err
	}
	return ps.Decode()
}

func publishedFor(ctx context.Context, q queryer, id fence.Identity) (fence.Published, bool, error) {
	p, err := scanPublished(q.QueryRowContext(ctx,
		`SELECT `+pubCols+` FROM identities WHERE state_dir = ? AND session_id = ?`, id.StateDir, id.SessionID))
	return noRows(p, err)
}

// nextGeneration hands out the identity's next generation: one more than the
// highest ever reserved or published, recorded at once so it is never reused.
func nextGeneration(ctx context.Context, q queryer, id fence.Identity) (uint64, error) {
	var last uint64
	err := q.QueryRowContext(ctx, `SELECT MAX(
			COALESCE((SELECT last FROM generations WHERE state_dir = ?1 AND session_id = ?2), 0),
			COALESCE((SELECT generation FROM identities WHERE state_dir = ?1 AND session_id = ?2), 0))`,
		id.StateDir, id.SessionID).Scan(&last)
	if err != nil {
		return 0, err
	}
	_, err = q.ExecContext(ctx, `INSERT INTO generations (state_dir, session_id, last) VALUES (?, ?, ?)
		ON CONFLICT (state_dir, session_id) DO UPDATE SET last = excluded.last`,
		id.StateDir, id.SessionID, last+1)
	return last + 1, err
}

// insertRow writes a fresh reservation row owned by (pid, inc) at phase reserved.
func (s *Store) insertRow(ctx context.Context, q queryer, id fence.Identity, spec fence.Spec, pid int, inc string) (fence.Reservation, error) {
	gen, err := nextGeneration(ctx, q, id)
	if err != nil {
		return fence.Reservation{}, err
	}
	resID, err := fence.NewReservationID()
	if err != nil {
		return fence.Reservation{}, err
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return fence.Reservation{}, err
	}
	host, err := s.own.Host()
	if err != nil {
		return fence.Reservation{}, err
	}
	now := s.now()
	r := fence.NewReservation(resID, id, spec, pid, inc, gen, now, s.opt.Lease, host)
	_, err = q.ExecContext(ctx, `INSERT INTO reservations (state_dir, session_id, reservation_id, state_file,
		spec_json, owner_pid, owner_incarnation, phase, generation, claimed_at, updated_at, lease_until,
		host, host_machine_id, host_boot_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		id.StateDir, id.SessionID, resID, spec.StateFile, string(specJSON), pid, inc, int(fence.PhaseReserved),
		gen, fence.Nanos(now), fence.Nanos(now), fence.Nanos(r.LeaseUntil), host.Name, host.MachineID, host.BootID)
	if err != nil {
		return r, err
	}
	_, err = q.ExecContext(ctx, `INSERT INTO specs (reservation_id, state_dir, session_id, generation, spec_json)
		VALUES (?, ?, ?, ?, ?)`, resID, id.StateDir, id.SessionID, gen, string(specJSON))
	return r, err
}

// deleteRow removes the row pinned to resID and reports whether it existed.
func deleteRow(ctx context.Context, q queryer, resID string) (bool, error) {
	res, err := q.ExecContext(ctx, `DELETE FROM reservations WHERE reservation_id = ?`, resID)
	if err != nil {
		return false, err
	}
	// The spec stays while its generation is published and not ended (the
	// pane helper may still be about to read it); otherwise it goes too.
	if _, err := q.ExecContext(ctx, `DELETE FROM specs WHERE reservation_id = ?1 AND NOT EXISTS
		(SELECT 1 FROM identities WHERE reservation_id = ?1 AND ended = 0)`, resID); err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}
