package fence

import "context"

// CachedLiveEach is CachedLive without a copy of each row on the heap: fn gets
// a pointer to one variable, overwritten row after row, so it must copy what it
// keeps. A list of 1,000 sessions walks every live row, and CachedLive's copy
// per row was most of that walk's allocations. Like CachedLive, it runs under
// the cache's read lock: fn must not call the Store.
func (s *Store) CachedLiveEach(ctx context.Context, fn func(p *Published)) error {
	if err := s.ensureCache(ctx); err != nil {
		return err
	}
	s.cache.mu.RLock()
	defer s.cache.mu.RUnlock()
	var p Published
	for _, d := range s.cache.byName {
		p = s.cache.byDigest[d]
		fn(&p)
	}
	return nil
}
