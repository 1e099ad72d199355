package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skc-supervisor/skc-supervisor/fence"
)

// The row helpers below run inside a transition's transaction (or on the
// pool, for reads); they never start one.

// row is a reservation as stored, with its owner's host.
type row struct {
	fence.Reservation
}

const resCols = `state_dir, session_id, reservation_id, spec_json, owner_pid, owner_incarnation,
	phase, generation, attempt_name, tmux_id, pane_pid, server_pid, server_start, helper_pid,
	abandoned, claimed_at, updated_at, lease_until, pane_start, cgroup,
	owner_host, owner_machine_id, owner_boot_id`

func scanRow(sc fence.Scanner) (row, error) {
	var rs fence.ReservationScan
	if err := sc.Scan(rs.Dest()...); err != nil {
		return row{}, err
	}
	r, err := rs.Decode()
	return row{r}, err
}

// storedTime is t as the tables return it: whole nanoseconds, UTC, no
// monotonic reading, zero kept zero.
func storedTime(t time.Time) time.Time { return fence.FromNanos(fence.Nanos(t)) }

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// rowFor returns the identity's reservation row, if any; in a transaction
// forUpdate locks it until COMMIT.
func rowFor(ctx context.Context, q querier, id fence.Identity, lock string) (row, bool, error) {
	r, err := scanRow(q.QueryRow(ctx, `SELECT `+resCols+` FROM reservations
		WHERE state_dir = $1 AND session_id = $2`+lock, id.StateDir, id.SessionID))
	return noRows(r, err)
}

// rowByID returns the reservation row with id resID, if it still exists.
func rowByID(ctx context.Context, q querier, resID, lock string) (row, bool, error) {
	r, err := scanRow(q.QueryRow(ctx, `SELECT `+resCols+` FROM reservations WHERE reservation_id = $1`+lock, resID))
	return noRows(r, err)
}

// forUpdate is the lock clause of reads a transition decides on.
const forUpdate = ` FOR UPDATE`

func noRows[T any](v T, err error) (T, bool, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		var zero T
		return zero, false, nil
	}
	return v, err == nil, err
}

// pub is a published identity as stored, with its host.
type pub struct {
	fence.Published
}

const pubCols = `state_dir, session_id, generation, reservation_id, session_name, tmux_id,
	server_pid, server_start, state_file, label, published_at, ended, ended_at,
	pane_pid, pane_start, boot_id, cgroup, stop_timeout_ms, stop_since, stop_deadline, stop_reason, stop_killed,
	spec_json, restart_state, restart_due, restart_reason, restarts, failures, starts_json, host, machine_id`

func scanPub(sc fence.Scanner) (pub, error) {
	var ps fence.PublishedScan
	if err := sc.Scan(ps.Dest()...); err != nil {
		return pub{}, err
	}
	p, err := ps.Decode()
	return pub{p}, err
}

func pubFor(ctx context.Context, q querier, id fence.Identity, lock string) (pub, bool, error) {
	p, err := scanPub(q.QueryRow(ctx, `SELECT `+pubCols+` FROM identities
		WHERE state_dir = $1 AND session_id = $2`+lock, id.StateDir, id.SessionID))
	return noRows(p, err)
}

// rowRead prefetches the reservation row where (with $1… args), locked.
func rowRead(dst *row, found *bool, where string, args ...any) prefetch {
	return prefetch{`SELECT ` + resCols + ` FROM reservations WHERE ` + where + forUpdate, args,
		func(r pgx.Row) (err error) {
			*dst, *found, err = noRows(scanRow(r))
			return err
		}}
}

// pubRead prefetches the identities row where (with $1… args), locked.
func pubRead(dst *pub, found *bool, where string, args ...any) prefetch {
	return prefetch{`SELECT ` + pubCols + ` FROM identities WHERE ` + where + forUpdate, args,
		func(r pgx.Row) (err error) {
			*dst, *found, err = noRows(scanPub(r))
			return err
		}}
}

// byIdentity and byReservation are the where clauses of the reads.
const (
	byIdentity    = `state_dir = $1 AND session_id = $2`
	byReservation = `reservation_id = $1`
	// pubOfReservation: the identities row of reservation $1's identity.
	pubOfReservation = `(state_dir, session_id) = (SELECT state_dir, session_id FROM reservations WHERE reservation_id = $1)`
)

// genRead prefetches the highest generation ever reserved or published for
// id (0 when none): insertRow hands out the next one.
func genRead(last *int64, id fence.Identity) prefetch {
	return prefetch{`SELECT GREATEST(
			COALESCE((SELECT last FROM generations WHERE state_dir = $1 AND session_id = $2), 0),
			COALESCE((SELECT generation FROM identities WHERE state_dir = $1 AND session_id = $2), 0))`,
		[]any{id.StateDir, id.SessionID}, func(r pgx.Row) error { return r.Scan(last) }}
}

// insertRow writes a fresh reservation row owned by (pid, inc) of this host
// at phase reserved, with its spec and the next generation after last
// (genRead), recorded at once so that it is never handed out again.
func (s *Store) insertRow(t *tx, id fence.Identity, spec fence.Spec, pid int, inc string, last int64) (fence.Reservation, error) {
	gen := uint64(last + 1)
	t.exec(`INSERT INTO generations (state_dir, session_id, last) VALUES ($1, $2, $3)
		ON CONFLICT (state_dir, session_id) DO UPDATE SET last = excluded.last`,
		id.StateDir, id.SessionID, last+1)
	resID, err := fence.NewReservationID()
	if err != nil {
		return fence.Reservation{}, err
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return fence.Reservation{}, err
	}
	now := storedTime(s.now())
	r := fence.NewReservation(resID, id, spec, pid, inc, gen, now, s.opt.Lease, s.host)
	t.exec(`INSERT INTO reservations (state_dir, session_id, reservation_id, state_file,
		spec_json, owner_host, owner_machine_id, owner_boot_id, owner_pid, owner_incarnation, phase,
		generation, claimed_at, updated_at, lease_until)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
		id.StateDir, id.SessionID, resID, spec.StateFile, string(specJSON), s.host.Name, s.host.MachineID,
		s.host.BootID, pid, inc, int(fence.PhaseReserved), int64(gen), fence.Nanos(now), fence.Nanos(now), fence.Nanos(r.LeaseUntil))
	t.exec(`INSERT INTO specs (reservation_id, state_dir, session_id, generation, spec_json)
		VALUES ($1, $2, $3, $4, $5)`, resID, id.StateDir, id.SessionID, int64(gen), string(specJSON))
	return r, nil
}

// deleteRow removes the row pinned to resID and reports whether it existed.
func deleteRow(t *tx, resID string) (bool, error) {
	tag, err := t.Exec(t.ctx, `DELETE FROM reservations WHERE reservation_id = $1`, resID)
	if err != nil {
		return false, err
	}
	deleteSpecLater(t, resID)
	return tag.RowsAffected() == 1, nil
}

// deleteRowLater is deleteRow sent with COMMIT, for a caller that does not
// need to know whether the row existed (Release: idempotent).
func deleteRowLater(t *tx, resID string) {
	t.exec(`DELETE FROM reservations WHERE reservation_id = $1`, resID)
	deleteSpecLater(t, resID)
}

// deleteSpecLater deletes the spec of a released row unless its generation is
// published and not ended (the pane helper may still be about to read it).
func deleteSpecLater(t *tx, resID string) {
	t.exec(`DELETE FROM specs WHERE reservation_id = $1 AND NOT EXISTS
		(SELECT 1 FROM identities WHERE reservation_id = $1 AND NOT ended)`, resID)
}
