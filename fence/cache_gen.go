package fence

import "sync/atomic"

// cacheGen counts changes to the in-memory identities (PubCache) of every fence handle
// of this process, for readers that keep something derived from them — the
// encoded `ls` of lifecycle — and must know when to stop trusting it. It is
// process-wide: a change in any handle moves it, which is only ever too often.
//
// The count is kept by the write path: PubCache.putLocked, Ended and Restart
// (cache.go) call cacheChanged, under the cache's write lock, after changing
// it. Until the first call, hooked is false and CachedGeneration says so, so a
// reader built before that hook existed trusts nothing.
var cacheGen struct {
	n      atomic.Uint64
	hooked atomic.Bool
}

// cacheChanged records a change to a PubCache. Call it after the change, with
// the cache's write lock held.
func cacheChanged() {
	cacheGen.n.Add(1)
	cacheGen.hooked.Store(true)
}

// CachedGeneration returns a number that moves whenever the in-memory
// identities of any fence handle change: what CachedPublished, CachedPublishedByName
// and CachedLive(Each) answer can differ only after it moved. Read it before
// reading the identities; ok is false while no change has been reported (the
// write path may not report changes: then nothing may be concluded).
func CachedGeneration() (gen uint64, ok bool) {
	ok = cacheGen.hooked.Load()
	return cacheGen.n.Load(), ok
}
