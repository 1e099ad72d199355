package census

import (
	"context"
	"strings"
)

// onSessionRenamed answers `%session-renamed $id name` (docs/tmux-facts.md
// §1.8: tmux 3.3a and 3.7c write the id and the new name) by reading that one
// session by id — two small commands whatever the server's size — instead of
// a full list. Every create a warm pool serves renames its standby, and a
// full list costs tmux ~0.65 s at 4,000 sessions, which every end queued
// behind it waits for.
//
// Nothing is read when the census already holds the session under that name
// (a create's AdmitCreated gave it the name it renamed the standby to) and no
// list or read is in flight that could still apply an older picture: every
// later rename sends its own notification, which compares again. A session
// the census does not hold yet is read by the id-only list, and also by id,
// in case its creator admits it before that list applies: the list would
// then take it as held and not read it. A notification not in the form tmux
// writes takes the full list, as any other change.
func (c *Census) onSessionRenamed(ctx context.Context, b *burst, text string) {
	id, name, ok := strings.Cut(text, " ")
	if !ok || !validID(id) {
		c.trigger(ctx, b, true)
		return
	}
	c.mu.RLock()
	e := c.sessions[id]
	held := e != nil && e.s.Name == name
	c.mu.RUnlock()
	if held && !b.inflight && !b.reading && len(b.reads) == 0 {
		return
	}
	if e == nil {
		c.trigger(ctx, b, false)
	}
	if b.reads == nil {
		b.reads = map[string]struct{}{}
	}
	b.reads[id] = struct{}{}
	c.startReads(ctx, b)
}
