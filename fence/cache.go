package fence

import (
	"context"
	"sync"
	"time"
)

// PubCache mirrors an engine's published identities in memory for the
// daemon's hot reads (List joins every census session with its identity; Show
// resolves a session name), so those never re-read the table. It is loaded on
// first use (NewPubCache's load) and then updated by its handle's own Publish,
// MarkEnded, BeginStop and SetRestart after they commit; Reset makes the next
// read load again (an engine that learns another writer changed the table).
//
// It is exact only while its handle is the only writer of the identities: the
// daemon, which holds the instance lock of its home. Pane helpers open their
// own handle but write postmortems and helper starts only, and never read the
// cache. Updates are ordered by generation (a publish replaces only a lower
// generation; an end marks only its own generation), so two writes whose
// cache updates land in the other order than their commits still agree.
//
// Times handed to it must be as the engine's reads return them (the engine's
// precision, UTC), so that a cached record equals a read one.
type PubCache struct {
	load func(ctx context.Context) ([]Published, error)

	mu       sync.RWMutex
	loaded   bool
	byDigest map[string]Published // every identity row, ended ones included
	byName   map[string]string    // session name → digest, not-ended rows only
}

// NewPubCache returns an empty cache that load fills on first use (every
// published identity, ended ones included: the engine's Identities).
func NewPubCache(load func(ctx context.Context) ([]Published, error)) *PubCache {
	return &PubCache{load: load}
}

// Put records p, a generation just published or changed by a committed write.
func (c *PubCache) Put(p Published) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded {
		return // the load reads the committed row
	}
	c.putLocked(p)
}

func (c *PubCache) putLocked(p Published) {
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

// Ended records that generation gen of id ended at at (a committed MarkEnded).
func (c *PubCache) Ended(id Identity, gen uint64, at time.Time) {
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
	p.Ended, p.EndedAt = true, at
	c.byDigest[d] = p
	if c.byName[p.SessionName] == d {
		delete(c.byName, p.SessionName)
	}
	cacheChanged()
}

// Restart records an ended generation's restart decision (MarkEndedNext,
// SetRestart), its next start due at due.
func (c *PubCache) Restart(id Identity, gen uint64, next RestartNext, due time.Time) {
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
	p.Restart.State, p.Restart.Due, p.Restart.Reason = next.State, due, next.Reason
	p.Restart.Failures = next.Failures
	c.byDigest[d] = p
	cacheChanged()
}

// Reset forgets what is held: the next read loads the table again.
func (c *PubCache) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loaded, c.byDigest, c.byName = false, nil, nil
	cacheChanged()
}

// ensure loads the cache from the table once. The write lock is held across the
// read, so a write committed after the read applies its update after the load.
func (c *PubCache) ensure(ctx context.Context) error {
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
	pubs, err := c.load(ctx)
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

// Published returns the published record of the identity whose digest
// (Identity.Digest, the @skc-identity tag) is digest, ended or not.
func (c *PubCache) Published(ctx context.Context, digest string) (Published, bool, error) {
	if err := c.ensure(ctx); err != nil {
		return Published{}, false, err
	}
	c.mu.RLock()
	p, ok := c.byDigest[digest]
	c.mu.RUnlock()
	return p, ok, nil
}

// PublishedByName returns the published, not-ended generation living in the
// session named name (attempt names are unique per reservation).
func (c *PubCache) PublishedByName(ctx context.Context, name string) (Published, bool, error) {
	if err := c.ensure(ctx); err != nil {
		return Published{}, false, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	d, ok := c.byName[name]
	if !ok {
		return Published{}, false, nil
	}
	p, ok := c.byDigest[d]
	return p, ok && !p.Ended, nil
}

// Live calls fn for every published, not-ended generation, under the cache's
// read lock: fn must not call the cache's handle.
func (c *PubCache) Live(ctx context.Context, fn func(p *Published)) error {
	if err := c.ensure(ctx); err != nil {
		return err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, d := range c.byName {
		p := c.byDigest[d]
		fn(&p)
	}
	return nil
}

// LiveEach is Live without a copy of each row on the heap: fn gets a pointer
// to one variable, overwritten row after row, so it must copy what it keeps. A
// list of 1,000 sessions walks every live row, and Live's copy per row was
// most of that walk's allocations.
func (c *PubCache) LiveEach(ctx context.Context, fn func(p *Published)) error {
	if err := c.ensure(ctx); err != nil {
		return err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	var p Published
	for _, d := range c.byName {
		p = c.byDigest[d]
		fn(&p)
	}
	return nil
}
