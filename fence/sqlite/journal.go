package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// appendVerdict stores rec with the next sequence number, inside the caller's
// transaction: sequences increase by one per verdict, across restarts, and a
// verdict written with a transition (published, ended) commits with it.
func appendVerdict(ctx context.Context, q queryer, rec verdict.Record, now time.Time) (verdict.Record, error) {
	var seq int64
	if err := q.QueryRowContext(ctx, `SELECT COALESCE(MAX(sequence), 0) + 1 FROM verdicts`).Scan(&seq); err != nil {
		return verdict.Record{}, err
	}
	rec.Sequence = seq
	if rec.Timestamp.IsZero() {
		rec.Timestamp = now
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return verdict.Record{}, verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "verdict"},
			"verdict record cannot be encoded: %w", err)
	}
	var dir, sid string
	if rec.Identity != nil {
		dir, sid = rec.Identity.StateDir, rec.Identity.SessionID
	}
	if _, err := q.ExecContext(ctx, `INSERT INTO verdicts (sequence, record, state_dir, session_id) VALUES (?, ?, ?, ?)`,
		seq, string(b), dir, sid); err != nil {
		return verdict.Record{}, err
	}
	return rec, nil
}

// AppendVerdict journals rec with the next sequence number and returns it with
// Sequence (and Timestamp, when zero) set. It implements verdict.Journal.
func (s *Store) AppendVerdict(ctx context.Context, rec verdict.Record) (verdict.Record, error) {
	var out verdict.Record
	err := s.write(ctx, "append_verdict", func(q queryer) error {
		var err error
		out, err = appendVerdict(ctx, q, rec, s.now())
		return err
	})
	return out, err
}

// VerdictsSince returns up to limit verdicts with a sequence above after,
// oldest first; limit <= 0 means all of them.
func (s *Store) VerdictsSince(ctx context.Context, after int64, limit int) ([]verdict.Record, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	if err := s.writable("verdicts"); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT sequence, record FROM verdicts WHERE sequence > ?
		ORDER BY sequence LIMIT ?`, after, limit)
	if err != nil {
		return nil, s.dbErr("verdicts", err)
	}
	return s.scanVerdicts(rows)
}

// scanVerdicts decodes (sequence, record) rows, closing them.
func (s *Store) scanVerdicts(rows *sql.Rows) ([]verdict.Record, error) {
	defer rows.Close()
	var out []verdict.Record
	for rows.Next() {
		var seq int64
		var text string
		if err := rows.Scan(&seq, &text); err != nil {
			return nil, s.dbErr("verdicts", err)
		}
		var rec verdict.Record
		if err := json.Unmarshal([]byte(text), &rec); err != nil {
			return nil, s.dbErr("verdicts", fmt.Errorf("verdict %d: %w", seq, err))
		}
		rec.Sequence = seq
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, s.dbErr("verdicts", err)
	}
	return out, nil
}

// PublishedFor returns the identity's published record, ended or not.
func (s *Store) PublishedFor(ctx context.Context, id fence.Identity) (fence.Published, bool, error) {
	id, err := fence.CanonicalIdentity(id)
	if err != nil {
		return fence.Published{}, false, err
	}
	if err := s.writable("published"); err != nil {
		return fence.Published{}, false, err
	}
	p, ok, err := publishedFor(ctx, s.r, id)
	if err != nil {
		return fence.Published{}, false, s.dbErr("published", err)
	}
	return p, ok, nil
}

// PublishedByReservation returns the published record whose generation was
// published by reservation resID, if it is still the identity's current one.
// The pane helper polls it: its agent may start only once this answers true
// and not ended.
func (s *Store) PublishedByReservation(ctx context.Context, resID string) (fence.Published, bool, error) {
	if err := fence.CheckReservationID(resID); err != nil {
		return fence.Published{}, false, err
	}
	if err := s.writable("published"); err != nil {
		return fence.Published{}, false, err
	}
	p, err := scanPublished(s.r.QueryRowContext(ctx,
		`SELECT `+pubCols+` FROM identities WHERE reservation_id = ?`, resID))
	p, ok, err := noRows(p, err)
	if err != nil {
		return fence.Published{}, false, s.dbErr("published", err)
	}
	return p, ok, nil
}

// Reservation returns the reservation row with id resID, if it exists.
func (s *Store) Reservation(ctx context.Context, resID string) (fence.Reservation, bool, error) {
	if err := fence.CheckReservationID(resID); err != nil {
		return fence.Reservation{}, false, err
	}
	if err := s.writable("reservation"); err != nil {
		return fence.Reservation{}, false, err
	}
	r, ok, err := rowByID(ctx, s.r, resID)
	if err != nil {
		return fence.Reservation{}, false, s.dbErr("reservation", err)
	}
	return r, ok, nil
}

// ReservationFor returns the identity's reservation row, if any: one keyed read.
func (s *Store) ReservationFor(ctx context.Context, id fence.Identity) (fence.Reservation, bool, error) {
	id, err := fence.CanonicalIdentity(id)
	if err != nil {
		return fence.Reservation{}, false, err
	}
	if err := s.writable("reservation"); err != nil {
		return fence.Reservation{}, false, err
	}
	r, ok, err := rowFor(ctx, s.r, id)
	if err != nil {
		return fence.Reservation{}, false, s.dbErr("reservation", err)
	}
	return r, ok, nil
}

// Reservations lists every reservation row, oldest claim first.
func (s *Store) Reservations(ctx context.Context) ([]fence.Reservation, error) {
	if err := s.writable("reservations"); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+resCols+` FROM reservations ORDER BY claimed_at, reservation_id`)
	if err != nil {
		return nil, s.dbErr("reservations", err)
	}
	defer rows.Close()
	out, err := fence.ScanEach(rows, []fence.Reservation{}, scanReservation)
	return out, s.dbErrOrNil("reservations", err)
}

// Identities lists every published identity, ended ones included.
func (s *Store) Identities(ctx context.Context) ([]fence.Published, error) {
	if err := s.writable("identities"); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+pubCols+` FROM identities ORDER BY state_dir, session_id`)
	if err != nil {
		return nil, s.dbErr("identities", err)
	}
	defer rows.Close()
	out, err := fence.ScanEach(rows, []fence.Published{}, scanPublished)
	return out, s.dbErrOrNil("identities", err)
}

// Check runs PRAGMA integrity_check and returns its first message ("ok" when sound).
func (s *Store) Check(ctx context.Context) (string, error) {
	if err := s.writable("integrity_check"); err != nil {
		return "", err
	}
	var msg string
	if err := s.r.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&msg); err != nil {
		return "", s.dbErr("integrity_check", err)
	}
	return msg, nil
}
