package fence

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// The read cache answers `show`'s fence reads (an identity's reservation row and
// its latest verdicts) from memory: two queries and the decoding of the
// verdicts were most of a lookup's time, for data that changes only when
// somebody writes the fence.
//
// Validity is the engine's signal (ReadSource.Version): a number that moves
// whenever anything committed — the daemon's own writes, a pane helper's,
// another process's (SQLite: PRAGMA data_version on one connection the source
// holds). Every read asks it first. When it moved, the cache re-reads which
// identities have a reservation row (one narrow scan of a table that holds only
// creates in flight or abandoned) and the verdicts journaled since its last
// read: sequences grow by one per committed verdict, in commit order, so
// everything new has a sequence above the last one read. The version is asked
// before the data is read, so data is never older than the version it is filed
// under: a read that starts after a commit returned always sees that commit.
//
// Verdicts: the first read loads the journal's newest verdicts (all of them up
// to ReadCacheBulk, within half the byte bound), grouped by identity, so that a
// lookup of any identity — the benchmark looks up a different session each
// time — finds them in memory; an identity with older verdicts beyond that
// window is read on its own. They are held encoded exactly as json.Marshal
// encodes a verdict.Record (decoded from the journal and re-encoded once), so a
// lookup copies bytes.

// Bounds of the read cache: its verdicts' encoded bytes (beyond it the cache
// starts over) and the backlog of new verdicts one refresh reads
// (ReadCacheTail; a longer one starts over instead).
const (
	readCacheBytes = 16 << 20
	ReadCacheTail  = 1024
)

// ReadCacheBulk bounds the verdicts the cache's first read loads. It is a
// variable so that tests can make the journal outgrow it.
var ReadCacheBulk = 16384

// ReadSource is what the read cache asks of an engine. The cache calls it with
// its own lock held, one call at a time, so a source may keep one connection
// (and must, where the version is per connection).
type ReadSource interface {
	// Version returns a number that differs from the one it returned before
	// whenever anything committed to the fence in between.
	Version(ctx context.Context) (int64, error)
	// Reserved lists the identities that have a reservation row.
	Reserved(ctx context.Context) ([]Identity, error)
	// Reservation returns the identity's reservation row, if any.
	Reservation(ctx context.Context, id Identity) (Reservation, bool, error)
	// JournalSince returns up to n verdicts with a sequence above after,
	// oldest first.
	JournalSince(ctx context.Context, after int64, n int) ([]JournalRow, error)
	// JournalNewest returns up to n of the journal's newest verdicts, newest
	// first, stopping after the row whose records pass maxBytes in total.
	JournalNewest(ctx context.Context, n, maxBytes int) ([]JournalRow, error)
	// JournalFor returns the identity's newest n verdicts, oldest first.
	JournalFor(ctx context.Context, id Identity, n int) ([]JournalRow, error)
	// Reset drops what the source holds (its connection): after an error its
	// state, and so its version, is unknown.
	Reset()
}

// JournalRow is one verdict as the journal holds it: the record's JSON, its
// sequence kept apart.
type JournalRow struct {
	Seq  int64
	ID   Identity
	Text string
}

// ReadCache is one fence handle's cache of `show`'s reads over its engine's
// ReadSource. It is safe for concurrent use; mu serialises everything, the
// source included.
type ReadCache struct {
	src ReadSource

	mu       sync.Mutex
	valid    bool                   // version describes what is held
	version  int64                  // the source's version when the cache was last brought up to date
	reserved map[Identity]*resEntry // identities with a reservation row; row read on first use
	verdicts verdictCache
}

// NewReadCache returns an empty cache over src.
func NewReadCache(src ReadSource) *ReadCache { return &ReadCache{src: src} }

// resEntry is a reservation row, read and encoded on first use.
type resEntry struct {
	row  *Reservation // nil until read
	json []byte
}

// Reads returns the identity's reservation row and its most recent verdicts (up
// to limit, at least 1), as a fresh read would. id is used as the fence stored
// it (Published.Identity), not canonicalised again. After an error the cache
// starts over; the engine maps the error to its code.
func (c *ReadCache) Reads(ctx context.Context, id Identity, limit int) (IdentityReads, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out, err := c.reads(ctx, id, max(limit, 1))
	for try := 0; errors.Is(err, errRowVanished) && try < 3; try++ {
		c.reset() // a commit between the version's look and the row's read
		out, err = c.reads(ctx, id, max(limit, 1))
	}
	if err != nil {
		c.reset()
	}
	return out, err
}

// errRowVanished: a reservation row the cache listed was gone at its read.
// The version's look and the row's read are two statements, not one
// snapshot, so a commit between them (a create's release racing a kill's
// show; found outside-in as a fence_unavailable answer) removes it: the
// cache is stale, not the fence unavailable, and Reads starts over.
var errRowVanished = errors.New("reservation row vanished")

// Drop empties the cache and resets its source, keeping the cache itself: a
// reader that already holds it finds it empty and starts over (a handle's
// Close; an engine that reopens its connections).
func (c *ReadCache) Drop() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.reset()
	c.mu.Unlock()
}

// reset forgets everything and resets the source. c.mu is held.
func (c *ReadCache) reset() {
	c.src.Reset()
	c.valid, c.reserved = false, nil
	c.verdicts = verdictCache{}
}

// reads brings the cache up to date and answers for id. c.mu is held.
func (c *ReadCache) reads(ctx context.Context, id Identity, limit int) (IdentityReads, error) {
	if c.verdicts.limit != limit || c.verdicts.bytes > readCacheBytes {
		c.reset() // one limit at a time (Show always asks the same); bounded memory
	}
	if err := c.refresh(ctx, limit); err != nil {
		return IdentityReads{}, err
	}
	out := IdentityReads{ReservationJSON: []byte("null")}
	if r := c.reserved[id]; r != nil {
		if r.row == nil {
			row, found, err := c.src.Reservation(ctx, id)
			if err != nil || !found {
				return IdentityReads{}, cmp.Or(err, fmt.Errorf("%w: %v", errRowVanished, id))
			}
			b, err := json.Marshal(&row)
			if err != nil {
				return IdentityReads{}, err
			}
			r.row, r.json = &row, slices.Clip(b)
		}
		row := *r.row
		out.Reservation, out.ReservationJSON = &row, r.json
	}
	v, err := c.verdicts.array(ctx, c.src, id)
	if err != nil {
		return IdentityReads{}, err
	}
	out.VerdictsJSON = v
	return out, nil
}

// refresh asks the source's version and, when it moved since the last refresh,
// re-reads which identities have reservation rows and the verdicts journaled
// since.
func (c *ReadCache) refresh(ctx context.Context, limit int) error {
	v, err := c.src.Version(ctx)
	if err != nil {
		return err
	}
	if c.valid && v == c.version {
		return nil
	}
	c.valid = false
	ids, err := c.src.Reserved(ctx)
	if err != nil {
		return err
	}
	c.reserved = make(map[Identity]*resEntry, len(ids))
	for _, id := range ids {
		c.reserved[id] = &resEntry{}
	}
	if err := c.verdicts.update(ctx, c.src, limit); err != nil {
		return err
	}
	c.version, c.valid = v, true
	return nil
}
