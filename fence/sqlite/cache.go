package sqlite

import (
	"context"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
)

// The identities cache is the engine-neutral PubCache, loaded from this
// Store's Identities and updated by its own writes after they commit.

// storedTime is t as the tables return it: whole nanoseconds, UTC, no
// monotonic reading, zero kept zero.
func storedTime(t time.Time) time.Time { return fence.FromNanos(fence.Nanos(t)) }

// storedPub is p with its publication time as the table returns it.
func storedPub(p fence.Published) fence.Published {
	p.PublishedAt = storedTime(p.PublishedAt)
	return p
}

// CachedPublished returns the published record of the identity whose digest
// (Identity.Digest, the @skc-identity tag) is digest, ended or not, from memory.
// See fence.PubCache for when the cache is exact.
func (s *Store) CachedPublished(ctx context.Context, digest string) (fence.Published, bool, error) {
	return s.cache.Published(ctx, digest)
}

// CachedPublishedByName returns the published, not-ended generation living in
// the session named name, from memory (attempt names are unique per reservation).
func (s *Store) CachedPublishedByName(ctx context.Context, name string) (fence.Published, bool, error) {
	return s.cache.PublishedByName(ctx, name)
}

// CachedLive calls fn for every published, not-ended generation, from memory,
// under the cache's read lock: fn must not call the Store.
func (s *Store) CachedLive(ctx context.Context, fn func(p *fence.Published)) error {
	return s.cache.Live(ctx, fn)
}

// CachedLiveEach is CachedLive without a copy of each row on the heap: fn gets
// a pointer to one variable, overwritten row after row, so it must copy what it
// keeps. Like CachedLive, it runs under the cache's read lock: fn must not call
// the Store.
func (s *Store) CachedLiveEach(ctx context.Context, fn func(p *fence.Published)) error {
	return s.cache.LiveEach(ctx, fn)
}
