package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// The read cache answers `show`'s fence reads (an identity's reservation row and
// its latest verdicts) from memory: two SQLite queries and the decoding of the
// verdicts were most of a lookup's time, for data that changes only when
// somebody writes the fence.
//
// Validity is SQLite's own: PRAGMA data_version, asked on one reader connection
// the cache holds, changes whenever any other connection commits — the daemon's
// writer, a pane helper, another process (tests write the fence from several).
// Every read asks it first (one prepared statement, a few µs). When it moved,
// the cache re-reads which identities have a reservation row (one narrow scan
// of a table that holds only creates in flight or abandoned) and the verdicts
// journaled since its last read: sequences grow by one per committed verdict,
// in commit order, so everything new has a sequence above the last one read.
// The version is asked before the data is read, so data is never older than the
// version it is filed under: a read that starts after a commit returned always
// sees that commit.
//
// Verdicts: the first read loads the journal's newest verdicts (all of them up
// to readCacheBulk, within half the byte bound), grouped by identity, so that a
// lookup of any identity — the benchmark looks up a different session each
// time — finds them in memory; an identity with older verdicts beyond that
// window is read on its own. They are held encoded exactly as json.Marshal
// encodes a verdict.Record (decoded from the journal and re-encoded once), so a
// lookup copies bytes.

// Bounds of the read cache: its verdicts' encoded bytes (beyond it the cache
// starts over) and the backlog of new verdicts one refresh reads (a longer one
// starts over instead).
const (
	readCacheBytes = 16 << 20
	readCacheTail  = 1024
)

// readCacheBulk bounds the verdicts the cache's first read loads. It is a
// variable so that tests can make the journal outgrow it.
var readCacheBulk = 16384

// CachedIdentityReads returns the identity's reservation row and its most recent
// verdicts (up to limit, at least 1), as a fresh read would, from the read cache.
// id is used as the fence stored it (Published.Identity): it is not
// canonicalised again, so it matches the rows written under it.
func (s *Store) CachedIdentityReads(ctx context.Context, id fence.Identity, limit int) (fence.IdentityReads, error) {
	if id.StateDir == "" || id.SessionID == "" {
		return fence.IdentityReads{}, verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "identity"},
			"fence: identity reads need a stored identity")
	}
	// Before the cache: a refusal here says nothing about what it holds.
	if err := s.writable("read_cache"); err != nil {
		return fence.IdentityReads{}, err
	}
	c := s.rc
	c.mu.Lock()
	defer c.mu.Unlock()
	out, err := c.reads(ctx, id, max(limit, 1))
	if err != nil {
		c.reset()
		return fence.IdentityReads{}, s.dbErr("read_cache", err)
	}
	return out, nil
}

// drop empties the cache and closes its connection, keeping the cache itself:
// a reader that already holds it finds it empty and starts over (Store.Close,
// and begin's retry after a read-only connection).
func (c *readCache) drop() {
	if c == nil {
		return // Open failed before the readers existed
	}
	c.mu.Lock()
	c.reset()
	c.mu.Unlock()
}

// readCache is one Store's cache. mu serialises everything, the held
// connection included.
type readCache struct {
	db *sql.DB // the Store's reader pool, where conn comes from

	mu      sync.Mutex
	conn    *sql.Conn // held: data_version is per connection
	probe   *sql.Stmt // PRAGMA data_version on conn
	valid   bool      // version describes what is held
	version int64     // data_version when the cache was last brought up to date

	reserved map[fence.Identity]*resEntry // identities with a reservation row; row read on first use
	verdicts verdictCache
}

// resEntry is a reservation row, read and encoded on first use.
type resEntry struct {
	row  *fence.Reservation // nil until read
	json []byte
}

// reset forgets everything and closes the connection: after any error the
// connection's state, and so its data_version, is unknown.
func (c *readCache) reset() {
	if c.probe != nil {
		_ = c.probe.Close()
	}
	if c.conn != nil {
		_ = c.conn.Close()
	}
	c.conn, c.probe, c.valid, c.reserved = nil, nil, false, nil
	c.verdicts = verdictCache{}
}

// reads brings the cache up to date and answers for id. c.mu is held.
func (c *readCache) reads(ctx context.Context, id fence.Identity, limit int) (fence.IdentityReads, error) {
	if c.verdicts.limit != limit || c.verdicts.bytes > readCacheBytes {
		c.reset() // one limit at a time (Show always asks the same); bounded memory
	}
	if err := c.refresh(ctx, limit); err != nil {
		return fence.IdentityReads{}, err
	}
	out := fence.IdentityReads{ReservationJSON: []byte("null")}
	if r := c.reserved[id]; r != nil {
		if r.row == nil {
			row, found, err := rowFor(ctx, c.conn, id)
			if err != nil || !found {
				// The scan that listed it saw the same database (no
				// commit since, or the version would have moved).
				return fence.IdentityReads{}, cmp.Or(err, fmt.Errorf("reservation row of %v vanished", id))
			}
			b, err := json.Marshal(&row)
			if err != nil {
				return fence.IdentityReads{}, err
			}
			r.row, r.json = &row, slices.Clip(b)
		}
		row := *r.row
		out.Reservation, out.ReservationJSON = &row, r.json
	}
	v, err := c.verdicts.array(ctx, c.conn, id)
	if err != nil {
		return fence.IdentityReads{}, err
	}
	out.VerdictsJSON = v
	return out, nil
}

// refresh opens the connection when needed and, when data_version moved since
// the last refresh, re-reads which identities have reservation rows and the
// verdicts journaled since.
func (c *readCache) refresh(ctx context.Context, limit int) error {
	if c.conn == nil {
		conn, err := c.db.Conn(ctx)
		if err != nil {
			return err
		}
		c.conn = conn
		if c.probe, err = conn.PrepareContext(ctx, `PRAGMA data_version`); err != nil {
			return err
		}
	}
	var v int64
	if err := c.probe.QueryRowContext(ctx).Scan(&v); err != nil {
		return err
	}
	if c.valid && v == c.version {
		return nil
	}
	c.valid = false
	if err := c.scanReserved(ctx); err != nil {
		return err
	}
	if err := c.verdicts.update(ctx, c.conn, limit); err != nil {
		return err
	}
	c.version, c.valid = v, true
	return nil
}

// scanReserved lists the identities that have a reservation row.
func (c *readCache) scanReserved(ctx context.Context) error {
	rows, err := c.conn.QueryContext(ctx, `SELECT state_dir, session_id FROM reservations`)
	if err != nil {
		return err
	}
	defer rows.Close()
	c.reserved = map[fence.Identity]*resEntry{}
	for rows.Next() {
		var id fence.Identity
		if err := rows.Scan(&id.StateDir, &id.SessionID); err != nil {
			return err
		}
		c.reserved[id] = &resEntry{}
	}
	return rows.Err()
}
