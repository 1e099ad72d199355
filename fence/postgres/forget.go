package postgres

import (
	"context"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// RegisterHost records this host's identity in the hosts table (name,
// machine id, boot id, when its daemon last started): the daemon does it at start, so
// `fence forget` and the fleet views can name the hosts.
func (s *Store) RegisterHost(ctx context.Context) error {
	if s.hostStop == nil {
		if err := s.lockHostName(ctx); err != nil {
			return err
		}
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO hosts (name, machine_id, boot_id, seen_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (name) DO UPDATE SET machine_id = excluded.machine_id, boot_id = excluded.boot_id,
		seen_at = excluded.seen_at, forgotten_at = 0`, s.host.Name, s.host.MachineID, s.host.BootID, fence.Nanos(s.now()))
	return s.dbErrOrNil("register_host", err)
}

// ForgetHost is the operator's escape for a host that is gone for good
// (fence.Fence.ForgetHost): in one transaction it removes the host's
// reservation rows, marks its not-ended generations ended, and appends
// describe's verdict. Nothing on another host can prove that host's owners
// dead or alive, so the operator's word decides; fence.CheckForget refuses
// this host's own rows (their owners can be probed here, and `fence
// release` resolves one), and a host with no rows is not_found.
func (s *Store) ForgetHost(ctx context.Context, host string, describe func(fence.Forgotten) verdict.Record) (fence.Forgotten, verdict.Record, error) {
	if err := fence.CheckForget(host, s.host); err != nil {
		return fence.Forgotten{}, verdict.Record{}, err
	}
	var out fence.Forgotten
	var rec verdict.Record
	var endedAt time.Time
	err := s.write(ctx, "forget_host", lockOn{}, func(t *tx) error {
		out = fence.Forgotten{Host: host}
		var err error
		if out.Reservations, err = s.forgetRows(t, host); err != nil {
			return err
		}
		endedAt = storedTime(s.now())
		if out.Published, err = s.forgetGenerations(t, host, endedAt); err != nil {
			return err
		}
		if len(out.Reservations) == 0 && len(out.Published) == 0 {
			return verdict.Errorf(verdict.CodeNotFound, map[string]any{"host": host},
				"host %s has no reservation row and no running generation", host)
		}
		if len(out.Published) > 0 {
			t.touch(host)
		}
		t.exec(`UPDATE hosts SET forgotten_at = $1 WHERE name = $2`, fence.Nanos(endedAt), host)
		t.queueVerdict(describe(out), s.host.Name, &rec)
		return nil
	})
	if err != nil {
		return fence.Forgotten{}, verdict.Record{}, err
	}
	out.MarkEnded(endedAt)
	return out, rec, nil
}

// forgetRows deletes the host's reservation rows, each under its identity's
// lock, and returns them.
func (s *Store) forgetRows(t *tx, host string) ([]fence.Reservation, error) {
	rows, err := s.rowsWhere(t, `WHERE owner_host = $1`, host)
	if err != nil {
		return nil, err
	}
	out := make([]fence.Reservation, 0, len(rows))
	for _, r := range rows {
		if err := t.lockIdentity(r.Identity.Digest()); err != nil {
			return nil, err
		}
		ok, err := deleteRow(t, r.ID)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, r.Reservation)
		}
	}
	return out, nil
}

// forgetGenerations marks the host's not-ended generations ended at at, each
// under its identity's lock, and returns them as they were.
func (s *Store) forgetGenerations(t *tx, host string, at time.Time) ([]fence.Published, error) {
	rs, err := t.Query(t.ctx, `SELECT `+pubCols+` FROM identities WHERE host = $1 AND NOT ended
		ORDER BY state_dir, session_id`, host)
	if err != nil {
		return nil, err
	}
	pubs, err := fence.ScanEach(rs, nil, scanPub)
	rs.Close() // before the updates: the transaction's one connection
	if err != nil {
		return nil, err
	}
	out := make([]fence.Published, 0, len(pubs))
	for _, p := range pubs {
		if err := t.lockIdentity(p.Identity.Digest()); err != nil {
			return nil, err
		}
		tag, err := t.Exec(t.ctx, `UPDATE identities SET ended = true, ended_at = $1
			WHERE state_dir = $2 AND session_id = $3 AND generation = $4 AND host = $5 AND NOT ended`,
			fence.Nanos(at), p.Identity.StateDir, p.Identity.SessionID, int64(p.Generation), host)
		if err != nil {
			return nil, err
		}
		if tag.RowsAffected() == 1 {
			endSpecs(t, p.Identity)
			out = append(out, p.Published)
		}
	}
	return out, nil
}

// rowsWhere reads reservation rows inside a transaction.
func (s *Store) rowsWhere(t *tx, where string, args ...any) ([]row, error) {
	rs, err := t.Query(t.ctx, `SELECT `+resCols+` FROM reservations `+where+` ORDER BY claimed_at, reservation_id`, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	return fence.ScanEach(rs, nil, scanRow)
}
