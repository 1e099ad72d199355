package fence

import (
	"context"
	"sync"
	"time"
)

// pubCache mirrors the identities table in memory for the daemon's hot reads
// (List joins every census session with its identity; Show resolves a session
// name), so those never re-read the table. It is loaded on first use and then
// updated by this Store's own Publish and MarkEnded after they commit.
//
// It is exact only while this Store is the only writer of the identities table:
// the daemon, which holds the instance lock of its home. Pane helpers open their
// own Store but write postmortems and helper starts only, and never read the
// cache. Updates are ordered by generation (a publish replaces only a lower
// generation; an end marks only its own generation), so two writes whose
// cache updates land in the other order than their commits still agree.
type pubCache struct {
	mu       sync.RWMutex
	loaded   bool
	byDigest map[string]Published // every identity row, ended ones included
	byName   map[string]string    // session name → digest, not-ended rows only
}

func (c *pubCache) put(p Published) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded {
		return // the load reads the committed row
	}
	p.PublishedAt = fromNanos(nanos(p.PublishedAt)) // as the table returns it
	c.putLocked(p)
}

func (c *pubCache) putLocked(p Published) {
	d := p.Identity.Digest()
	if old, ok := c.byDigest[d]; ok {
		if old.Generation > p.Generation || (old.Generation == p.Generation && old.Ended) {
			return
		}
		if c.byName[old.SessionName] == d {
			delete(c.byName, old.SessionName)
		}
	}
	c.byDigest[d] = p
	if !p.Ended {
		c.byName[p.SessionName] = d
	}
	cacheChanged() // lifecycle reuses a whole ls answer until this moves
}

func (c *pubCache) ended(id Identity, gen uint64, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded {
		return
	}
	d := id.Digest()
	p, ok := c.byDigest[d]
	if !ok || p.Generation != gen || p.Ended {
		return
	}
	p.Ended, p.EndedAt = true, fromNanos(nanos(at)) // as the table returns it
	c.byDigest[d] = p
	if c.byName[p.SessionName] == d {
		delete(c.byName, p.SessionName)
	}
	cacheChanged()
}

// restart records an ended generation's restart decision (MarkEndedNext,
// SetRestart) in the cached row.
func (c *pubCache) restart(id Identity, gen uint64, next RestartNext, due time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded {
		return
	}
	d := id.Digest()
	p, ok := c.byDigest[d]
	if !ok || p.Generation != gen {
		return
	}
	p.Restart.State, p.Restart.Due, p.Restart.Reason = next.State, fromNanos(nanos(due)), next.Reason
	p.Restart.Failures = next.Failures
	c.byDigest[d] = p
	cacheChanged()
}

// ensure loads the cache from the table once. The write lock is held across the
// read, so a write committed after the read applies its update after the load.
func (s *Store) ensureCache(ctx context.Context) error {
	c := &s.cache
	c.mu.RLock()
	ok := c.loaded
	c.mu.RUnlock()
	if ok {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loaded {
		return nil
	}
	pubs, err := s.Identities(ctx)
	if err != nil {
		return err
	}
	c.byDigest = make(map[string]Published, len(pubs))
	c.byName = make(map[string]string, len(pubs))
	for _, p := range pubs {
		c.putLocked(p)
	}
	c.loaded = true
	return nil
}

// CachedPublished returns the published record of the identity whose digest
// (Identity.Digest, the @skc-identity tag) is digest, ended or not, from memory.
// See pubCache for when the cache is exact.
func (s *Store) CachedPublished(ctx context.Context, digest string) (Published, bool, error) {
	if err := s.ensureCache(ctx); err != nil {
		return Published{}, false, err
	}
	s.cache.mu.RLock()
	p, ok := s.cache.byDigest[digest]
	s.cache.mu.RUnlock()
	return p, ok, nil
}

// CachedPublishedByName returns the published, not-ended generation living in
// the session named name, from memory (attempt names are unique per reservation).
func (s *Store) CachedPublishedByName(ctx context.Context, name string) (Published, bool, error) {
	if err := s.ensureCache(ctx); err != nil {
		return Published{}, false, err
	}
	s.cache.mu.RLock()
	defer s.cache.mu.RUnlock()
	d, ok := s.cache.byName[name]
	if !ok {
		return Published{}, false, nil
	}
	p, ok := s.cache.byDigest[d]
	return p, ok && !p.Ended, nil
}

// CachedLive calls fn for every published, not-ended generation, from memory,
// under the cache's read lock: fn must not call the Store.
func (s *Store) CachedLive(ctx context.Context, fn func(p *Published)) error {
	if err := s.ensureCache(ctx); err != nil {
		return err
	}
	s.cache.mu.RLock()
	defer s.cache.mu.RUnlock()
	for _, d := range s.cache.byName {
		p := s.cache.byDigest[d]
		fn(&p)
	}
	return nil
}
