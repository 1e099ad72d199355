package census

import (
	"context"
	"strings"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// Renames in place (issue 18). `%session-renamed $id name` carries the id and
// the session's name at the moment tmux wrote the line, so a held session is
// renamed from the line alone, without a list: a warm pool's claim renames
// a standby on every create, and a list of every session per burst of
// claims was what such a rename cost.
//
// What must not happen is a rename lost or undone by a list, read or
// admission that saw the session before it. Each source of a name therefore
// has a position in the connection's stream (namePos): a reply block's
// command number, or, for a notification, just after the last block read
// before it (tmuxctl Notification.After). tmux writes blocks and
// notifications in the order it produces them, so a list numbered at or
// below a line's After ran before the line was written and says nothing
// newer about the name; one numbered above it ran after. An entry keeps the
// position of its name (entry.nameAt), and a name replaces another only from
// a later position (withName). Notifications are applied in stream order on
// Run's goroutine, so a line that is older than what the census holds is
// followed by the line of the rename that made it old.

// blockPos is the stream position of the reply block numbered num (0: unknown,
// before everything).
func blockPos(num uint64) uint64 { return num << 1 }

// notePos is the position of a notification read after the block numbered
// after: above that block, below the next.
func notePos(after uint64) uint64 { return after<<1 | 1 }

// posBefore reports whether position a is before b. 0 (unknown) is before
// every known position; command numbers compare as tmux's u_int (numBefore).
func posBefore(a, b uint64) bool {
	switch {
	case b == 0:
		return false
	case a == 0:
		return true
	case a>>1 != b>>1:
		return numBefore(a>>1, b>>1)
	}
	return a&1 < b&1
}

// withName returns e, a replacement of old read at position pos, with the
// newer of the two names: old's when a rename applied in place (or an
// admission) is newer than what e was read from. e itself is never changed.
func withName(old, e *entry, pos uint64) *entry {
	name, at := e.s.Name, pos
	if posBefore(pos, old.nameAt) {
		name, at = old.s.Name, old.nameAt
	}
	if e.s.Name == name && e.nameAt == at {
		return e
	}
	cp := *e
	cp.s.Name, cp.nameAt = name, at
	cp.line = renamedLine(e.line, e.s.Name, name) // a list showing e's line again must not keep the name
	return &cp
}

// onSessionRenamed applies `%session-renamed` to the session it names, in
// place; a line it cannot apply (an id the census does not hold: a session
// created since the last list, whose own read may have seen the old name)
// costs a full list, as every rename did before.
func (c *Census) onSessionRenamed(ctx context.Context, b *burst, n tmuxctl.Notification) {
	n.Name = tmuxctl.NoteSessionRenamed // as handle matched it, with or without its '%'
	id, name, err := n.Session()
	if err == nil && validID(id) && c.renameInPlace(id, name, notePos(n.After)) {
		return
	}
	c.trigger(ctx, b, true)
}

// renameInPlace gives held session id the name a notification at position
// pos says, unless the census already holds a name from later (a list or read
// run after the line was written), and reports whether it held the session.
func (c *Census) renameInPlace(id, name string, pos uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.sessions[id]
	if old == nil || !c.online {
		return false
	}
	c.renames.Add(1)
	if posBefore(pos, old.nameAt) || posBefore(pos, c.namesAt) {
		return true // what the census holds is newer than the line
	}
	e := *old
	e.s.Name, e.nameAt = name, pos
	e.line = renamedLine(old.line, old.s.Name, name)
	c.sessions[id] = &e
	if old.s.Name != name {
		c.changeLocked(old, &e, c.info.ServerLife)
	}
	return true
}

// laterPos is the later of two positions.
func laterPos(a, b uint64) uint64 {
	if posBefore(a, b) {
		return b
	}
	return a
}

// renamedLine is the list line a session's next list shows if nothing but its
// name changed (the name is the line's last field), so that such a list takes
// the fast path; "" (parse it) when line does not end in the old name.
func renamedLine(line, oldName, name string) string {
	prefix, ok := strings.CutSuffix(line, "\t"+oldName)
	if !ok || line == "" {
		return ""
	}
	return prefix + "\t" + name
}
