package census

import (
	"slices"
	"strconv"
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

// sortByID sorts s in idLess order, parsing each id once rather than per
// comparison.
func sortByID(s []Session) {
	keys := make([]idKey, len(s))
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
	out := make([]Session, len(s))
	for i, k := range keys {
		out[i] = s[k.i]
	}
	copy(s, out)
}

// keyLess is idLess on parsed keys.
func keyLess(s []Session, a, b idKey) bool {
	if a.num && b.num {
		return a.n < b.n
	}
	return s[a.i].ID < s[b.i].ID
}
