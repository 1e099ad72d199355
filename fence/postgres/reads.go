package postgres

import (
	"context"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Reads. The ones the daemon iterates over (Reservations, Identities, the
// cache, RestartsDue, PublishedByTmux) see this host's rows only: recovery,
// end detection and the restarter act on what they find, and a row of
// another host is not theirs to act on (its session is not in this host's
// tmux). Reads of one identity (PublishedFor, ReservationFor, VerdictsFor)
// see the fleet's row; the writes that would act on it refuse a row of
// another host. The fleet's rows are listed by FleetReservations and
// FleetIdentities.

// PublishedFor returns the identity's published record, ended or not, on
// whatever host it was published.
func (s *Store) PublishedFor(ctx context.Context, id fence.Identity) (fence.Published, bool, error) {
	id, err := fence.CanonicalIdentity(id)
	if err != nil {
		return fence.Published{}, false, err
	}
	p, ok, err := pubFor(ctx, s.pool, id, "")
	if err != nil {
		return fence.Published{}, false, s.dbErr("published", err)
	}
	return p.Published, ok, nil
}

// PublishedHost returns the identity's published record with the name of
// the host that published it.
func (s *Store) PublishedHost(ctx context.Context, id fence.Identity) (fence.Published, string, bool, error) {
	id, err := fence.CanonicalIdentity(id)
	if err != nil {
		return fence.Published{}, "", false, err
	}
	p, ok, err := pubFor(ctx, s.pool, id, "")
	if err != nil {
		return fence.Published{}, "", false, s.dbErr("published", err)
	}
	return p.Published, p.Host, ok, nil
}

// PublishedByReservation returns the published record whose generation
// reservation resID published, while it is the identity's current one.
func (s *Store) PublishedByReservation(ctx context.Context, resID string) (fence.Published, bool, error) {
	if err := fence.CheckReservationID(resID); err != nil {
		return fence.Published{}, false, err
	}
	p, ok, err := noRows(scanPub(s.pool.QueryRow(ctx, `SELECT `+pubCols+` FROM identities
		WHERE reservation_id = $1`, resID)))
	if err != nil {
		return fence.Published{}, false, s.dbErr("published", err)
	}
	return p.Published, ok, nil
}

// PublishedByTmux returns this host's published, not-ended generation living
// in tmux session tmuxID of the server life (serverPID, serverStart): one
// indexed read (identities_tmux). Tmux ids belong to one server life of one
// host, so both are part of the key.
func (s *Store) PublishedByTmux(ctx context.Context, serverPID int, serverStart int64, tmuxID string) (fence.Published, bool, error) {
	if tmuxID == "" || serverPID <= 0 {
		return fence.Published{}, false, nil
	}
	p, ok, err := noRows(scanPub(s.pool.QueryRow(ctx, `SELECT `+pubCols+` FROM identities
		WHERE host = $1 AND server_pid = $2 AND server_start = $3 AND tmux_id = $4 AND NOT ended
		AND machine_id = $5 ORDER BY published_at DESC LIMIT 1`,
		s.host.Name, serverPID, serverStart, tmuxID, s.host.MachineID)))
	if err != nil {
		return fence.Published{}, false, s.dbErr("published", err)
	}
	return p.Published, ok, nil
}

// Reservation returns the reservation row with id resID, if it exists.
func (s *Store) Reservation(ctx context.Context, resID string) (fence.Reservation, bool, error) {
	if err := fence.CheckReservationID(resID); err != nil {
		return fence.Reservation{}, false, err
	}
	r, ok, err := rowByID(ctx, s.pool, resID, "")
	if err != nil {
		return fence.Reservation{}, false, s.dbErr("reservation", err)
	}
	return r.Reservation, ok, nil
}

// ReservationFor returns the identity's reservation row, if any, on
// whatever host it is owned.
func (s *Store) ReservationFor(ctx context.Context, id fence.Identity) (fence.Reservation, bool, error) {
	id, err := fence.CanonicalIdentity(id)
	if err != nil {
		return fence.Reservation{}, false, err
	}
	r, ok, err := rowFor(ctx, s.pool, id, "")
	if err != nil {
		return fence.Reservation{}, false, s.dbErr("reservation", err)
	}
	return r.Reservation, ok, nil
}

// Reservations lists every host's reservation rows, oldest claim first
// (each carries its owner's host; recovery here refuses another host's by
// the owner's rule).
func (s *Store) Reservations(ctx context.Context) ([]fence.Reservation, error) {
	rows, err := s.fleetRows(ctx, "")
	out := make([]fence.Reservation, len(rows))
	for i, r := range rows {
		out[i] = r.Reservation
	}
	return out, err
}

// FleetReservation is a reservation row with its owner's host.
type FleetReservation struct {
	fence.Reservation
	Host string `json:"host"`
}

// FleetReservations lists every host's reservation rows, oldest claim first.
func (s *Store) FleetReservations(ctx context.Context) ([]FleetReservation, error) {
	rows, err := s.fleetRows(ctx, "")
	out := make([]FleetReservation, len(rows))
	for i, r := range rows {
		out[i] = FleetReservation{Reservation: r.Reservation, Host: r.Host}
	}
	return out, err
}

func (s *Store) fleetRows(ctx context.Context, where string, args ...any) ([]row, error) {
	rs, err := s.pool.Query(ctx, `SELECT `+resCols+` FROM reservations `+where+` ORDER BY claimed_at, reservation_id`, args...)
	if err != nil {
		return nil, s.dbErr("reservations", err)
	}
	defer rs.Close()
	out, err := fence.ScanEach(rs, nil, scanRow)
	return out, s.dbErrOrNil("reservations", err)
}

// Identities lists this host's published identities, ended ones included,
// ordered by state_dir then session_id.
func (s *Store) Identities(ctx context.Context) ([]fence.Published, error) {
	return s.pubs(ctx, "identities", `SELECT `+pubCols+` FROM identities WHERE host = $1 AND machine_id = $2
		ORDER BY state_dir, session_id`, s.host.Name, s.host.MachineID)
}

// FleetIdentities lists every host's published identities, ended ones
// included, ordered by state_dir then session_id.
// (each carries its Host).
func (s *Store) FleetIdentities(ctx context.Context) ([]fence.Published, error) {
	return s.pubs(ctx, "identities", `SELECT `+pubCols+` FROM identities ORDER BY state_dir, session_id`)
}

// FleetPublishedByName returns the published, not-ended generation living in
// the session named name, on whatever host published it (a direct read: it
// serves only names this host's census and cache do not know).
func (s *Store) FleetPublishedByName(ctx context.Context, name string) (fence.Published, bool, error) {
	p, ok, err := noRows(scanPub(s.pool.QueryRow(ctx, `SELECT `+pubCols+` FROM identities
		WHERE session_name = $1 AND NOT ended ORDER BY published_at DESC LIMIT 1`, name)))
	if err != nil {
		return fence.Published{}, false, s.dbErr("published", err)
	}
	return p.Published, ok, nil
}

// pubs runs a query of pubCols rows.
func (s *Store) pubs(ctx context.Context, op, sql string, args ...any) ([]fence.Published, error) {
	rs, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, s.dbErr(op, err)
	}
	defer rs.Close()
	pubs, err := fence.ScanEach(rs, nil, scanPub)
	if err != nil {
		return nil, s.dbErr(op, err)
	}
	out := make([]fence.Published, len(pubs))
	for i, p := range pubs {
		out[i] = p.Published
	}
	return out, nil
}

// VerdictsFor returns the identity's most recent verdicts, up to limit (all
// when limit <= 0), oldest first, from every host (verdicts_identity index).
func (s *Store) VerdictsFor(ctx context.Context, id fence.Identity, limit int) ([]verdict.Record, error) {
	id, err := fence.CanonicalIdentity(id)
	if err != nil {
		return nil, err
	}
	return s.verdictsQuery(ctx, "verdicts", `SELECT sequence, record FROM (
			SELECT sequence, record FROM verdicts WHERE state_dir = $1 AND session_id = $2
			ORDER BY sequence DESC LIMIT $3) v
		ORDER BY sequence`, id.StateDir, id.SessionID, limitOrAll(limit))
}
