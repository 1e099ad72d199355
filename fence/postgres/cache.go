package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// pubCache is fence.PubCache over this host's identities, kept exact in a
// fleet: every Cached read first asks for this host's identity_versions
// version (the watcher's copy, or one indexed read while it cannot be
// trusted: watch.go). When it moved only by this Store's own writes
// — whose cache updates are applied before they return — the cache stands;
// when anyone else changed this host's identities (an operator's release
// from another host, another handle of this process), the cache is dropped
// and the next read loads the table again. The version is read before the
// load, so the data is never older than the version it is filed under.
type pubCache struct {
	s  *Store
	pc *fence.PubCache

	mu    sync.Mutex
	seen  int64          // the host version the cache is exact at; -1: not loaded
	owned map[int64]bool // versions of this Store's own writes above seen
}

// maxOwnGap bounds how many versions a check walks: beyond it the cache is
// simply reloaded.
const maxOwnGap = 4096

func newPubCache(s *Store) *pubCache {
	c := &pubCache{s: s, seen: -1, owned: map[int64]bool{}}
	c.pc = fence.NewPubCache(c.load)
	return c
}

// hostVersion is this host's identity version: the watcher's copy while it
// can be trusted (no round trip), else the row.
func (c *pubCache) hostVersion(ctx context.Context) (int64, error) {
	if v, ok := c.s.watch.hostVersion(c.s.host.Name); ok {
		return v, nil
	}
	var v int64
	err := c.s.pool.QueryRow(ctx, `SELECT COALESCE((SELECT version FROM identity_versions WHERE host = $1), 0)`,
		c.s.host.Name).Scan(&v)
	if err != nil {
		return 0, c.s.dbErr("identities_version", err)
	}
	return v, nil
}

// load is the PubCache's loader: the version first, then the rows.
func (c *pubCache) load(ctx context.Context) ([]fence.Published, error) {
	v, err := c.hostVersion(ctx)
	if err != nil {
		return nil, err
	}
	pubs, err := c.s.Identities(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.seen = v
	for o := range c.owned {
		if o <= v {
			delete(c.owned, o)
		}
	}
	c.mu.Unlock()
	return pubs, nil
}

// own records that this Store's write moved the host version to v (after
// its commit; its cache update follows before the write returns).
func (c *pubCache) own(v int64) {
	c.mu.Lock()
	if v > c.seen {
		c.owned[v] = true
	}
	c.mu.Unlock()
}

// check makes the cache exact for a read that starts now. While the
// database cannot be reached, a loaded cache answers as it stands: nobody
// who can reach this host's rows can change them meanwhile but an operator
// elsewhere, and the daemon's lookups of its own sessions (ls, show) go on
// from the census with what it last read (creates fail closed).
func (c *pubCache) check(ctx context.Context) error {
	v, err := c.hostVersion(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if c.seen >= 0 && verdict.CodeOf(err) == verdict.CodeFenceUnavailable {
			return nil
		}
		return err
	}
	if c.seen < 0 || v <= c.seen {
		return nil
	}
	ours := v-c.seen <= maxOwnGap
	for x := c.seen + 1; ours && x <= v; x++ {
		ours = c.owned[x]
	}
	if ours {
		for x := c.seen + 1; x <= v; x++ {
			delete(c.owned, x)
		}
		c.seen = v
		return nil
	}
	c.seen = -1
	c.pc.Reset()
	return nil
}

func (c *pubCache) put(p fence.Published) {
	p.PublishedAt = storedTime(p.PublishedAt)
	c.pc.Put(p)
}

func (c *pubCache) ended(id fence.Identity, gen uint64, at time.Time, next fence.RestartNext) {
	c.pc.Ended(id, gen, at)
	if next.State != "" {
		c.pc.Restart(id, gen, next, storedTime(fence.RestartDue(next, at)))
	}
}

func (c *pubCache) restart(id fence.Identity, gen uint64, next fence.RestartNext, due time.Time) {
	c.pc.Restart(id, gen, next, due)
}

// CachedPublished returns the published record of this host's identity whose
// digest is digest, ended or not, from memory (exact: see pubCache).
func (s *Store) CachedPublished(ctx context.Context, digest string) (fence.Published, bool, error) {
	if err := s.cache.check(ctx); err != nil {
		return fence.Published{}, false, err
	}
	return s.cache.pc.Published(ctx, digest)
}

// CachedPublishedByName returns this host's published, not-ended generation
// living in the session named name, from memory.
func (s *Store) CachedPublishedByName(ctx context.Context, name string) (fence.Published, bool, error) {
	if err := s.cache.check(ctx); err != nil {
		return fence.Published{}, false, err
	}
	return s.cache.pc.PublishedByName(ctx, name)
}

// CachedLive calls fn for every published, not-ended generation of this
// host, from memory, under the cache's read lock: fn must not call the Store.
func (s *Store) CachedLive(ctx context.Context, fn func(p *fence.Published)) error {
	if err := s.cache.check(ctx); err != nil {
		return err
	}
	return s.cache.pc.Live(ctx, fn)
}

// CachedLiveEach is CachedLive with one variable overwritten row after row:
// fn must copy what it keeps.
func (s *Store) CachedLiveEach(ctx context.Context, fn func(p *fence.Published)) error {
	if err := s.cache.check(ctx); err != nil {
		return err
	}
	return s.cache.pc.LiveEach(ctx, fn)
}
