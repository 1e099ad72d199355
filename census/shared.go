package census

import (
	"slices"
	"strconv"
	"sync"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// SnapshotShared is Snapshot without the deep copy, for readers that only read:
// each session's Tags map and PaneDeadStatus are the census's own and must not
// be modified. The census never modifies them either — a changed session is a
// new entry with new maps (entries share an unchanged session's maps) — so
// reading them needs no lock. Sessions are appended to buf[:0] (pass the last
// snapshot's slice to reuse it) and sorted by tmux id number, like Snapshot.
//
// It exists for List: cloning every session's tag map and sorting with an id
// parse per comparison cost more than the rest of a 1,000-session list.
func (c *Census) SnapshotShared(buf []Session) Snapshot {
	c.mu.RLock()
	snap := Snapshot{Synced: c.synced, Info: c.info, Seq: c.seq, Sessions: buf[:0]}
	for _, e := range c.sessions {
		if !e.control {
			snap.Sessions = append(snap.Sessions, e.s)
		}
	}
	c.mu.RUnlock()
	sortByID(snap.Sessions)
	return snap
}

// idKey is a session's position in idLess order, parsed once.
type idKey struct {
	n   uint64
	num bool // the id parsed as "$N"
	i   int  // index in the unsorted slice
}

// keyBufs are sortByID's key slices, reused: a list sorts every session.
var keyBufs = sync.Pool{New: func() any { return new([]idKey) }}

// sortByID sorts s in idLess order, parsing each id once rather than per
// comparison.
func sortByID(s []Session) {
	kp := keyBufs.Get().(*[]idKey)
	defer keyBufs.Put(kp)
	keys := slices.Grow((*kp)[:0], len(s))[:len(s)]
	*kp = keys
	sorted := true
	for i := range s {
		n, err := strconv.ParseUint(trimDollar(s[i].ID), 10, 64)
		keys[i] = idKey{n: n, num: err == nil, i: i}
		if i > 0 && sorted && keyLess(s, keys[i], keys[i-1]) {
			sorted = false
		}
	}
	if sorted {
		return
	}
	slices.SortFunc(keys, func(a, b idKey) int {
		switch {
		case keyLess(s, a, b):
			return -1
		case keyLess(s, b, a):
			return 1
		}
		return 0
	})
	permute(s, keys)
}

// permute moves s[keys[j].i] to s[j] for every j, in place, one cycle of the
// permutation at a time (a copy of 1,000 sessions per list was the sort's
// largest cost). keys[j].i is set to j as position j is filled.
func permute(s []Session, keys []idKey) {
	for i := range keys {
		if keys[i].i == i {
			continue
		}
		tmp := s[i]
		for j := i; ; {
			k := keys[j].i
			keys[j].i = j
			if k == i {
				s[j] = tmp
				break
			}
			s[j] = s[k]
			j = k
		}
	}
}

// keyLess is idLess on parsed keys.
func keyLess(s []Session, a, b idKey) bool {
	if a.num && b.num {
		return a.n < b.n
	}
	return s[a.i].ID < s[b.i].ID
}

// Version returns what SnapshotShared's Seq, Synced and Info would be now, without
// copying anything. Every change to the sessions a snapshot lists is emitted on
// the change feed with the next Seq, so an equal version lists equal sessions.
func (c *Census) Version() (seq uint64, synced bool, info tmuxctl.ServerInfo) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.seq, c.synced, c.info
}
