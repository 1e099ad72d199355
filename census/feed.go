package census

import (
	"sort"
	"strconv"
	"sync"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// ChangeKind says what happened to a session.
type ChangeKind int

// Change kinds. Values are explicit because they are logged and compared.
const (
	Added   ChangeKind = 1
	Changed ChangeKind = 2
	Removed ChangeKind = 3
	// Resync means the subscriber missed changes (its buffer was full): it
	// must re-read Snapshot and ignore changes with Seq ≤ Snapshot.Seq.
	Resync ChangeKind = 4
)

var changeKindNames = map[ChangeKind]string{
	Added: "added", Changed: "changed", Removed: "removed", Resync: "resync",
}

// String returns the snake_case name of k.
func (k ChangeKind) String() string {
	if n, ok := changeKindNames[k]; ok {
		return n
	}
	return "change_kind_" + strconv.Itoa(int(k))
}

// Reasons a session is Removed.
const (
	ReasonGone         = "gone"          // a re-list in the same server life no longer has it
	ReasonServerExited = "server_exited" // the server process is gone (seen at disconnect)
	ReasonLifeChanged  = "life_changed"  // the connection now reaches another server life
)

// Change is one entry of the change feed.
type Change struct {
	Seq     uint64 // strictly increasing over the census's lifetime
	Kind    ChangeKind
	Session Session            // the new state; for Removed the last known state (tags included)
	Reason  string             // Removed only: ReasonGone, ReasonServerExited or ReasonLifeChanged
	Life    tmuxctl.ServerLife // the server life the session belonged to
	// PaneDied marks the Changed in which the session's pane was first
	// seen dead (remain-on-exit keeps the session): the agent's end.
	// Session carries PaneDeadStatus and PaneDeadSignal when tmux has them
	// (the status follows the death by up to a second: a later Changed
	// brings it, with PaneDied false).
	PaneDied bool
	// PaneChanged marks a Changed whose listed pane (the session's active
	// one) runs another process than before: a person's pane made the
	// active one, or a pane respawned or killed by hand — which of them
	// only a look at the session's panes tells.
	PaneChanged bool
}

// Subscription is one consumer of the change feed.
type Subscription struct {
	c      *Census
	ch     chan Change
	lost   bool // a Resync mark is queued and changes have been dropped since
	closed bool
	once   sync.Once
}

// Subscribe returns a subscription with room for buffer changes (minimum 1).
// The census never blocks on it: when the buffer is full, changes are dropped
// and one Resync mark is queued instead (a reserved slot guarantees room for
// it), so a slow subscriber learns it must re-read Snapshot.
func (c *Census) Subscribe(buffer int) *Subscription {
	if buffer < 1 {
		buffer = 1
	}
	s := &Subscription{c: c, ch: make(chan Change, buffer+1)}
	c.mu.Lock()
	c.subs[s] = struct{}{}
	c.mu.Unlock()
	return s
}

// C returns the channel of changes; it is closed by Close.
func (s *Subscription) C() <-chan Change { return s.ch }

// Close ends the subscription and closes C.
func (s *Subscription) Close() {
	s.once.Do(func() {
		s.c.mu.Lock()
		delete(s.c.subs, s)
		s.closed = true
		close(s.ch)
		s.c.mu.Unlock()
	})
}

// deliver queues ch without blocking. Only the census sends (under c.mu), so
// len(ch) cannot grow between the check and the send.
func (s *Subscription) deliver(ch Change) {
	if s.closed {
		return
	}
	if len(s.ch) < cap(s.ch)-1 {
		s.lost = false
		s.ch <- ch
		return
	}
	if !s.lost {
		s.lost = true
		s.c.resyncs.Add(1)
		s.ch <- Change{Seq: ch.Seq, Kind: Resync, Life: ch.Life}
	}
}

// emitLocked assigns the next sequence number and fans ch out. c.mu is held.
func (c *Census) emitLocked(ch Change) {
	c.seq++
	ch.Seq = c.seq
	ch.Session = ch.Session.clone()
	if ch.Kind == Removed {
		c.recordGoneLocked(&ch.Session, ch.Life)
	}
	for s := range c.subs {
		s.deliver(ch)
	}
}

// indexLocked adds e to the name and identity indexes. c.mu is held.
func (c *Census) indexLocked(e *entry) {
	c.countLocked(e, 1)
	if e.control {
		return
	}
	c.byName[e.s.Name] = e.s.ID
	if d := e.s.Tags[TagIdentity]; d != "" {
		m := c.byIdent[d]
		if m == nil {
			m = map[string]struct{}{}
			c.byIdent[d] = m
		}
		m[e.s.ID] = struct{}{}
	}
}

// unindexLocked removes e from the name and identity indexes. c.mu is held.
func (c *Census) unindexLocked(e *entry) {
	c.countLocked(e, -1)
	if e.control {
		return
	}
	if c.byName[e.s.Name] == e.s.ID {
		delete(c.byName, e.s.Name)
	}
	if d := e.s.Tags[TagIdentity]; d != "" {
		if m := c.byIdent[d]; m != nil {
			delete(m, e.s.ID)
			if len(m) == 0 {
				delete(c.byIdent, d)
			}
		}
	}
}

// dropAllLocked removes every session, emitting Removed with reason, and
// marks the census unsynced. c.mu is held.
func (c *Census) dropAllLocked(reason string) {
	list := make([]*entry, 0, len(c.sessions))
	for _, e := range c.sessions {
		list = append(list, e)
	}
	sort.Slice(list, func(i, j int) bool { return idLess(list[i].s.ID, list[j].s.ID) })
	for _, e := range list {
		c.unindexLocked(e)
		delete(c.sessions, e.s.ID)
		if !e.control {
			c.emitLocked(Change{Kind: Removed, Session: e.s, Reason: reason, Life: c.info.ServerLife})
		}
	}
}

// setUnsyncedLocked marks the census unsynced. c.mu is held.
func (c *Census) setUnsyncedLocked() {
	if c.synced {
		c.synced = false
		c.syncedCh = make(chan struct{})
	}
}

// setSyncedLocked marks the census synced and wakes WaitSynced. c.mu is held.
func (c *Census) setSyncedLocked() {
	if !c.synced {
		c.synced = true
		close(c.syncedCh)
	}
}

func sortSessions(s []Session) {
	sort.Slice(s, func(i, j int) bool { return idLess(s[i].ID, s[j].ID) })
}

// idLess orders "$N" ids numerically (then by string for anything odd).
func idLess(a, b string) bool {
	na, ea := strconv.ParseUint(trimDollar(a), 10, 64)
	nb, eb := strconv.ParseUint(trimDollar(b), 10, 64)
	if ea == nil && eb == nil {
		return na < nb
	}
	return a < b
}

func trimDollar(s string) string {
	if len(s) > 0 && s[0] == '$' {
		return s[1:]
	}
	return s
}
