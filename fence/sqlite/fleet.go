package sqlite

import (
	"context"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// The fleet's reads and ForgetHost. An SQLite fence is one host's, so its
// fleet is this host: the fleet reads are the local ones. ForgetHost still
// serves it: rows written under another host name (SKC_HOST changed, or a
// home's fence moved to another machine) can never be proven dead here, and
// before it an operator could clear them only by editing the database.

// Host is this handle's host identity (its name alone when the machine's
// facts cannot be read: every row it would write is refused then anyway).
func (s *Store) Host() fence.Host {
	h, err := s.own.Host()
	if err != nil {
		return fence.Host{Name: s.opt.Host.Name}
	}
	return h
}

// FleetPublishedByName returns the published, not-ended generation living in
// the session named name (the fleet is this host: CachedPublishedByName).
func (s *Store) FleetPublishedByName(ctx context.Context, name string) (fence.Published, bool, error) {
	return s.CachedPublishedByName(ctx, name)
}

// FleetIdentities lists every published identity: Identities.
func (s *Store) FleetIdentities(ctx context.Context) ([]fence.Published, error) {
	return s.Identities(ctx)
}

// FleetVerdictsSince is VerdictsSince: an SQLite journal holds one host's
// verdicts, in its own sequence.
func (s *Store) FleetVerdictsSince(ctx context.Context, after int64, limit int) ([]verdict.Record, error) {
	return s.VerdictsSince(ctx, after, limit)
}

// ForgetHost removes every reservation row host owns and marks its not-ended
// generations ended, appending describe's record, in one transaction
// (fence.Fence.ForgetHost; fence.CheckForget has the refusals).
func (s *Store) ForgetHost(ctx context.Context, host string, describe func(fence.Forgotten) verdict.Record) (fence.Forgotten, verdict.Record, error) {
	if err := fence.CheckForget(host, s.Host()); err != nil {
		return fence.Forgotten{}, verdict.Record{}, err
	}
	var out fence.Forgotten
	var rec verdict.Record
	var endedAt time.Time
	err := s.write(ctx, "forget_host", func(q queryer) error {
		out = fence.Forgotten{Host: host, Reservations: []fence.Reservation{}, Published: []fence.Published{}}
		var err error
		if out.Reservations, err = s.forgetRows(ctx, q, host); err != nil {
			return err
		}
		endedAt = s.now()
		if out.Published, err = forgetGenerations(ctx, q, host, endedAt); err != nil {
			return err
		}
		if len(out.Reservations) == 0 && len(out.Published) == 0 {
			return verdict.Errorf(verdict.CodeNotFound, map[string]any{"host": host},
				"host %s has no reservation row and no running generation", host)
		}
		rec, err = appendVerdict(ctx, q, describe(out), s.now())
		return err
	})
	if err != nil {
		return fence.Forgotten{}, verdict.Record{}, err
	}
	for _, r := range out.Reservations {
		fence.Untrack(r.ID)
	}
	for _, p := range out.Published {
		s.cache.Ended(p.Identity, p.Generation, storedTime(endedAt))
	}
	out.MarkEnded(storedTime(endedAt))
	return out, rec, nil
}

// forgetRows deletes host's reservation rows.
func (s *Store) forgetRows(ctx context.Context, q queryer, host string) ([]fence.Reservation, error) {
	rs, err := q.QueryContext(ctx, `SELECT `+resCols+` FROM reservations WHERE host = ?
		ORDER BY claimed_at, reservation_id`, host)
	if err != nil {
		return nil, err
	}
	rows, err := fence.ScanEach(rs, []fence.Reservation{}, scanReservation)
	rs.Close() // before the deletes: the transaction's one connection
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		if _, err := deleteRow(ctx, q, r.ID); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// forgetGenerations marks host's not-ended generations ended at at and
// returns them as they were.
func forgetGenerations(ctx context.Context, q queryer, host string, at time.Time) ([]fence.Published, error) {
	rs, err := q.QueryContext(ctx, `SELECT `+pubCols+` FROM identities WHERE host = ? AND ended = 0
		ORDER BY state_dir, session_id`, host)
	if err != nil {
		return nil, err
	}
	pubs, err := fence.ScanEach(rs, []fence.Published{}, scanPublished)
	rs.Close() // before the updates: the transaction's one connection
	if err != nil {
		return nil, err
	}
	for _, p := range pubs {
		if _, err := q.ExecContext(ctx, `UPDATE identities SET ended = 1, ended_at = ?
			WHERE state_dir = ? AND session_id = ? AND generation = ? AND ended = 0`,
			fence.Nanos(at), p.Identity.StateDir, p.Identity.SessionID, p.Generation); err != nil {
			return nil, err
		}
		if _, err := q.ExecContext(ctx, `DELETE FROM specs WHERE reservation_id = ?`, p.ReservationID); err != nil {
			return nil, err
		}
	}
	return pubs, nil
}

// TakeOverRenamed makes this host the owner of the rows an earlier name of
// this very machine wrote into this home's fence: reservation rows, and the
// generations that are not over (running, or between two starts). A daemon
// started under a new name (SKC_HOST or --host-name changed, the same home)
// adopts the sessions of the old one from its own tmux server — they are its
// sessions — but the rows kept the old name, so `fence forget` of that name
// ended generations this daemon supervised while their agents ran (found
// outside-in), and an owner row of the old name was never probed. Only rows
// whose machine id is this machine's are taken: a fence moved from another
// machine keeps its rows for `fence forget`. It returns the names taken over
// from; serve calls it once at its start, before recovery reads anything.
func (s *Store) TakeOverRenamed(ctx context.Context) ([]string, error) {
	here := s.Host()
	if here.Name == "" || here.MachineID == "" {
		return nil, nil
	}
	var names []string
	err := s.write(ctx, "take_over_renamed", func(q queryer) error {
		names = names[:0]
		rs, err := q.QueryContext(ctx, `SELECT host FROM reservations WHERE host <> '' AND host <> ? AND host_machine_id = ?
			UNION SELECT host FROM identities WHERE host <> '' AND host <> ? AND host_machine_id = ?
				AND (ended = 0 OR restart_state = 'exited') ORDER BY 1`,
			here.Name, here.MachineID, here.Name, here.MachineID)
		if err != nil {
			return err
		}
		names, err = fence.ScanEach(rs, names, func(r fence.Scanner) (string, error) {
			var n string
			return n, r.Scan(&n)
		})
		rs.Close()
		if err != nil || len(names) == 0 {
			return err
		}
		if _, err := q.ExecContext(ctx, `UPDATE reservations SET host = ? WHERE host <> '' AND host <> ? AND host_machine_id = ?`,
			here.Name, here.Name, here.MachineID); err != nil {
			return err
		}
		_, err = q.ExecContext(ctx, `UPDATE identities SET host = ? WHERE host <> '' AND host <> ? AND host_machine_id = ?
			AND (ended = 0 OR restart_state = 'exited')`, here.Name, here.Name, here.MachineID)
		return err
	})
	if err != nil {
		return nil, s.dbErr("take_over_renamed", err)
	}
	if len(names) > 0 {
		s.cache.Reset() // the cached rows name the old host
	}
	return names, nil
}
