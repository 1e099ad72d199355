package postgres

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// CachedIdentityReads returns the identity's reservation row and its most
// recent verdicts (up to limit, at least 1), as a fresh read would, from the
// read cache (fence.ReadCache over readSource). id is used as stored
// (Published.Identity), not canonicalised. The rows and verdicts are the
// fleet's: `show` works on any host.
func (s *Store) CachedIdentityReads(ctx context.Context, id fence.Identity, limit int) (fence.IdentityReads, error) {
	if err := fence.CheckStoredIdentity(id); err != nil {
		return fence.IdentityReads{}, err
	}
	digest := id.Digest()
	gen := s.last.generation()
	out, err := s.rc.Reads(ctx, id, limit)
	if err != nil {
		err = s.dbErr("read_cache", err)
		if last, ok := s.last.get(digest, limit); ok && verdict.CodeOf(err) == verdict.CodeFenceUnavailable {
			return last, nil // the database is unreachable: what was last read (see pubCache.check)
		}
		return fence.IdentityReads{}, err
	}
	s.last.put(digest, limit, out, gen)
	return out, nil
}

// lastReads keeps the last answer of CachedIdentityReads per identity, for
// `show` while the database cannot be reached. An answer stays only while it
// is still the fence's as far as this process knows: every write of this
// Store drops the answers of the identities it wrote (all of them when it
// cannot tell which), so an identity created or ended a moment before the
// database went away is never shown as it was before (its published verdict
// missing). A write of another process is not known here; its notification
// (watch.go) moves the read cache, not these. The slices are shared,
// read-only, as the read cache's are.
type lastReads struct {
	mu  sync.Mutex
	m   map[string]lastRead // by identity digest
	gen uint64              // moves at every drop: a read that began before one is not kept
}

type lastRead struct {
	limit int
	reads fence.IdentityReads
}

// lastReadsMax bounds the entries; beyond it the map starts over.
const lastReadsMax = 8192

func (l *lastReads) get(digest string, limit int) (fence.IdentityReads, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.m[digest]
	return r.reads, ok && r.limit == limit
}

// generation is taken before a read: put keeps the read only if no write
// dropped anything since.
func (l *lastReads) generation() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen
}

func (l *lastReads) put(digest string, limit int, r fence.IdentityReads, gen uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if gen != l.gen {
		return
	}
	if l.m == nil || len(l.m) >= lastReadsMax {
		l.m = map[string]lastRead{}
	}
	l.m[digest] = lastRead{limit: limit, reads: r}
}

// drop forgets the answers of the identities a write changed (by digest);
// none named: all of them.
func (l *lastReads) drop(digests []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gen++
	if len(digests) == 0 {
		l.m = nil
		return
	}
	for _, d := range digests {
		delete(l.m, d)
	}
}

// readSource is the read cache's view of the database. Its version is
// fence_version, which every write transaction of the fleet bumps before it
// draws its verdicts' sequences (store.go): so the verdicts committed after
// a version was read all have sequences above those read before, as the
// cache requires. The pool serves it; nothing is held between calls.
type readSource struct{ s *Store }

var _ fence.ReadSource = readSource{}

// Version returns fence_version: the watcher's copy while it can be
// trusted (no round trip), else the row.
func (r readSource) Version(ctx context.Context) (int64, error) {
	if v, ok := r.s.watch.fenceVersion(); ok {
		return v, nil
	}
	var v int64
	err := r.s.pool.QueryRow(ctx, `SELECT version FROM fence_version`).Scan(&v)
	return v, err
}

// Reserved lists the identities that have a reservation row, on any host.
func (r readSource) Reserved(ctx context.Context) ([]fence.Identity, error) {
	rows, err := r.s.pool.Query(ctx, `SELECT state_dir, session_id FROM reservations`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return fence.ScanIdentities(rows)
}

// Reservation reads the identity's row.
func (r readSource) Reservation(ctx context.Context, id fence.Identity) (fence.Reservation, bool, error) {
	row, ok, err := rowFor(ctx, r.s.pool, id, "")
	return row.Reservation, ok, err
}

// JournalSince returns up to n verdicts of the fleet above after, oldest first.
func (r readSource) JournalSince(ctx context.Context, after int64, n int) ([]fence.JournalRow, error) {
	rows, err := r.s.pool.Query(ctx, `SELECT sequence, state_dir, session_id, record FROM verdicts
		WHERE sequence > $1 ORDER BY sequence LIMIT $2`, after, n)
	if err != nil {
		return nil, err
	}
	return scanJournalRows(rows, n, 0)
}

// JournalNewest returns up to n of the newest verdicts, newest first, up to
// the one whose records pass maxBytes.
func (r readSource) JournalNewest(ctx context.Context, n, maxBytes int) ([]fence.JournalRow, error) {
	rows, err := r.s.pool.Query(ctx, `SELECT sequence, state_dir, session_id, record FROM verdicts
		ORDER BY sequence DESC LIMIT $1`, n)
	if err != nil {
		return nil, err
	}
	return scanJournalRows(rows, n, maxBytes)
}

// JournalFor returns the identity's newest n verdicts, oldest first.
func (r readSource) JournalFor(ctx context.Context, id fence.Identity, n int) ([]fence.JournalRow, error) {
	rows, err := r.s.pool.Query(ctx, `SELECT sequence, state_dir, session_id, record FROM (
			SELECT sequence, state_dir, session_id, record FROM verdicts WHERE state_dir = $1 AND session_id = $2
			ORDER BY sequence DESC LIMIT $3) v
		ORDER BY sequence`, id.StateDir, id.SessionID, n)
	if err != nil {
		return nil, err
	}
	return scanJournalRows(rows, n, 0)
}

// Reset has nothing to drop: the version is the database's, not a
// connection's.
func (readSource) Reset() {}

// scanJournalRows reads (sequence, state_dir, session_id, record) rows,
// closing them, up to n rows or (when maxBytes > 0) until their records pass
// maxBytes.
func scanJournalRows(rows pgx.Rows, n, maxBytes int) ([]fence.JournalRow, error) {
	defer rows.Close()
	return fence.ScanJournal(rows, n, maxBytes)
}
