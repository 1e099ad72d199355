package lifecycle

import (
	"cmp"
	"context"
	"encoding/json"
	"runtime"
	"sync"
	"weak"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// AppendListJSON appends `ls --json` — json.Marshal of List's result, byte for
// byte — to dst, without building the result: each session's JSON is kept from
// the last list and reused while its View is unchanged, so a list of 1,000
// sessions copies bytes instead of encoding 300 KB. The View is the whole input
// of its encoding, so reuse needs no invalidation and is never stale: a session
// whose census row or published record changed has a different View.
//
// The whole answer is reused, without looking at any session, while the census
// and the fence's identities are at the versions it was built from: every
// input of a list is one or the other. A list that found the census behind
// the fence (and refreshed it) is not reused.
func (m *Manager) AppendListJSON(ctx context.Context, dst []byte) ([]byte, error) {
	vc := m.viewCache()
	vc.mu.Lock()
	defer vc.mu.Unlock()
	// The versions are read before the list is built, so a change that
	// races the build moves them and the next list builds again.
	gen, hooked := fence.CachedGeneration()
	seq, synced, server := m.census.Version()
	if hooked && vc.memo != nil && vc.memoKey == (listKey{seq, synced, server, gen}) {
		return append(dst, vc.memo...), nil
	}
	vc.gen++
	start := len(dst)
	n := 0
	var encErr error
	var head listHead
	begin := func(h listHead) {
		b, err := json.Marshal(h.info)
		head, encErr = h, err
		dst = append(dst, `{"census":`...)
		dst = append(dst, b...)
		dst = append(dst, `,"sessions":[`...)
	}
	_, err := m.listViews(ctx, &vc.scratch, begin, func(v *View) {
		b, err := vc.encoded(v)
		if err != nil || encErr != nil {
			encErr = cmp.Or(encErr, err)
			return
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, b...)
		n++
	})
	if err == nil && encErr != nil {
		err = verdict.Errorf(verdict.CodeInternal, nil, "encode list: %w", encErr)
	}
	if err != nil {
		return dst[:start], err
	}
	dst = append(dst, "]}"...)
	vc.sweep(n)
	memo := vc.memo[:0] // its buffer is reused
	vc.memo = nil
	if hooked && !head.behind {
		vc.memo = append(memo, dst[start:]...)
		vc.memoKey = listKey{head.seq, head.synced, head.server, gen}
	}
	return dst, nil
}

// listKey is what a list's JSON is a function of: the census's version
// (census.Version) and the fence's in-memory identities' (fence.CachedGeneration).
type listKey struct {
	seq    uint64
	synced bool
	server tmuxctl.ServerInfo
	gen    uint64
}

// AppendShowJSON appends `show --json` — json.Marshal of Show's result, byte
// for byte — to dst. The reservation row and verdicts come encoded from the
// fence's read cache, which PRAGMA data_version keeps exact (a read after any
// committed write sees it); only the session object is encoded here.
func (m *Manager) AppendShowJSON(ctx context.Context, dst []byte, ref Ref) ([]byte, error) {
	v, reads, unread, err := m.showParts(ctx, ref)
	if err != nil {
		return dst, err
	}
	sess, err := json.Marshal(v) // null when nil
	if err != nil {
		return dst, verdict.Errorf(verdict.CodeInternal, nil, "encode session: %w", err)
	}
	dst = append(dst, `{"session":`...)
	dst = append(dst, sess...)
	dst = append(dst, `,"reservation":`...)
	dst = append(dst, reads.ReservationJSON...)
	dst = append(dst, `,"verdicts":`...)
	dst = append(dst, reads.VerdictsJSON...)
	if unread {
		dst = append(dst, `,"fence_unavailable":true`...)
	}
	return append(dst, '}'), nil
}

// viewCache is a Manager's list state: each session's last View with its
// encoding, by tmux id, the list's reusable buffers, and the last list's JSON
// with its versions (reused whole while both are unchanged; only once the
// fence reports its cache changes, see fence.CachedGeneration). mu serialises
// lists.
type viewCache struct {
	mu      sync.Mutex
	gen     uint64 // the list in progress
	byID    map[string]*encodedView
	scratch listScratch
	memo    []byte // nil: none to reuse
	memoKey listKey
}

type encodedView struct {
	v    View
	json []byte
	seen uint64 // the last list that used it
}

// encoded returns v's JSON, from the cache when v is unchanged.
func (vc *viewCache) encoded(v *View) ([]byte, error) {
	e := vc.byID[v.ID]
	if e != nil && sameView(&e.v, v) {
		e.seen = vc.gen
		return e.json, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if e == nil {
		e = &encodedView{}
		vc.byID[v.ID] = e
	}
	e.v, e.json, e.seen = *v, b, vc.gen
	return b, nil
}

// sweep forgets sessions the last list did not show, once they are a good
// part of the cache (so a list of n sessions holds at most about 2n entries).
func (vc *viewCache) sweep(listed int) {
	if len(vc.byID) <= 2*listed+64 {
		return
	}
	for id, e := range vc.byID {
		if e.seen != vc.gen {
			delete(vc.byID, id)
		}
	}
}

// viewCaches holds each Manager's viewCache without keeping the Manager alive
// (its struct is not this file's to extend); a collected Manager drops its own.
var viewCaches sync.Map // weak.Pointer[Manager] → *viewCache

func (m *Manager) viewCache() *viewCache {
	key := weak.Make(m)
	if vc, ok := viewCaches.Load(key); ok {
		return vc.(*viewCache)
	}
	vc, loaded := viewCaches.LoadOrStore(key, &viewCache{byID: map[string]*encodedView{}})
	if !loaded {
		runtime.AddCleanup(m, func(k weak.Pointer[Manager]) { viewCaches.Delete(k) }, key)
	}
	return vc.(*viewCache)
}
