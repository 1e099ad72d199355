package sqlite

import (
	"context"
	"database/sql"

	"github.com/skc-supervisor/skc-supervisor/fence"
)

// CachedIdentityReads returns the identity's reservation row and its most recent
// verdicts (up to limit, at least 1), as a fresh read would, from the read cache
// (fence.ReadCache over readSource). id is used as the fence stored it
// (Published.Identity): it is not canonicalised again, so it matches the rows
// written under it.
func (s *Store) CachedIdentityReads(ctx context.Context, id fence.Identity, limit int) (fence.IdentityReads, error) {
	if err := fence.CheckStoredIdentity(id); err != nil {
		return fence.IdentityReads{}, err
	}
	// Before the cache: a refusal here says nothing about what it holds.
	if err := s.writable("read_cache"); err != nil {
		return fence.IdentityReads{}, err
	}
	out, err := s.rc.Reads(ctx, id, limit)
	if err != nil {
		return fence.IdentityReads{}, s.dbErr("read_cache", err)
	}
	return out, nil
}

// readSource is the read cache's view of the fence file: one reader connection,
// held, because PRAGMA data_version is per connection — it changes whenever any
// other connection commits (the daemon's writer, a pane helper, another
// process). Asking it is one prepared statement, a few µs. The cache calls the
// source with its lock held, so the connection is never shared.
type readSource struct {
	db    *sql.DB   // the Store's reader pool, where conn comes from
	conn  *sql.Conn // held
	probe *sql.Stmt // PRAGMA data_version on conn
}

var _ fence.ReadSource = (*readSource)(nil)

// Version opens the connection when needed and returns its data_version.
func (r *readSource) Version(ctx context.Context) (int64, error) {
	if r.conn == nil {
		conn, err := r.db.Conn(ctx)
		if err != nil {
			return 0, err
		}
		r.conn = conn
		if r.probe, err = conn.PrepareContext(ctx, `PRAGMA data_version`); err != nil {
			return 0, err
		}
	}
	var v int64
	err := r.probe.QueryRowContext(ctx).Scan(&v)
	return v, err
}

// Reserved lists the identities that have a reservation row.
func (r *readSource) Reserved(ctx context.Context) ([]fence.Identity, error) {
	rows, err := r.conn.QueryContext(ctx, `SELECT state_dir, session_id FROM reservations`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return fence.ScanIdentities(rows)
}

// Reservation reads the identity's row on the held connection.
func (r *readSource) Reservation(ctx context.Context, id fence.Identity) (fence.Reservation, bool, error) {
	return rowFor(ctx, r.conn, id)
}

// JournalSince returns up to n verdicts above after, oldest first.
func (r *readSource) JournalSince(ctx context.Context, after int64, n int) ([]fence.JournalRow, error) {
	rows, err := r.conn.QueryContext(ctx, `SELECT sequence, state_dir, session_id, record FROM verdicts
		WHERE sequence > ? ORDER BY sequence LIMIT ?`, after, n)
	if err != nil {
		return nil, err
	}
	return scanJournalRows(rows, n, 0)
}

// JournalNewest returns up to n of the newest verdicts, newest first, up to
// the one whose records pass maxBytes.
func (r *readSource) JournalNewest(ctx context.Context, n, maxBytes int) ([]fence.JournalRow, error) {
	rows, err := r.conn.QueryContext(ctx, `SELECT sequence, state_dir, session_id, record FROM verdicts
		ORDER BY sequence DESC LIMIT ?`, n)
	if err != nil {
		return nil, err
	}
	return scanJournalRows(rows, n, maxBytes)
}

// JournalFor returns the identity's newest n verdicts, oldest first (as
// VerdictsFor reads them).
func (r *readSource) JournalFor(ctx context.Context, id fence.Identity, n int) ([]fence.JournalRow, error) {
	rows, err := r.conn.QueryContext(ctx, `SELECT sequence, state_dir, session_id, record FROM (
			SELECT sequence, state_dir, session_id, record FROM verdicts WHERE state_dir = ? AND session_id = ?
			ORDER BY sequence DESC LIMIT ?)
		ORDER BY sequence`, id.StateDir, id.SessionID, n)
	if err != nil {
		return nil, err
	}
	return scanJournalRows(rows, n, 0)
}

// Reset closes the held connection: after any error its state, and so its
// data_version, is unknown.
func (r *readSource) Reset() {
	if r.probe != nil {
		_ = r.probe.Close()
	}
	if r.conn != nil {
		_ = r.conn.Close()
	}
	r.conn, r.probe = nil, nil
}

// scanJournalRows reads (sequence, state_dir, session_id, record) rows, closing
// them, up to n rows or (when maxBytes > 0) until their records pass maxBytes.
func scanJournalRows(rows *sql.Rows, n, maxBytes int) ([]fence.JournalRow, error) {
	defer rows.Close()
	return fence.ScanJournal(rows, n, maxBytes)
}
