package census

import (
	"context"
	"time"
)

// Output within a session's creation second leaves tmux's window_activity at
// the creation time, where it starts: only wroteFlag (the pane's cursor or
// history) tells it from no output, and the subscription does not carry it
// (subscription.go). So a session the subscription shows for the first time
// is read by id once, wroteCheckDelay later — after its creation second —
// if it still has no activity then: an agent that prints its banner and waits
// gets its activity_at, at the cost of two small commands per quiet new
// session, none per tick.

// wroteCheckDelay is how long after its first segment a session is checked:
// the subscription shows a session within a second of its creation, so by
// then its creation second is over (output after it moves window_activity).
const wroteCheckDelay = 1500 * time.Millisecond

// wroteCheckAge bounds the sessions worth a check: one first shown long after
// its creation (a server the census reconnected to) was read whole by the
// list that brought it, flag included.
const wroteCheckAge = time.Minute

// checkWroteLater schedules the check of sessions first shown by the
// subscription. Run's goroutine only.
func (c *Census) checkWroteLater(b *burst, ids []string) {
	due := time.Now().Add(wroteCheckDelay)
	if b.checks == nil {
		b.checks = map[string]time.Time{}
	}
	for _, id := range ids {
		if _, ok := b.checks[id]; !ok {
			b.checks[id] = due
		}
	}
	armChecks(b)
}

// armChecks sets the check timer to the earliest due check.
func armChecks(b *burst) {
	var next time.Time
	for _, due := range b.checks {
		if next.IsZero() || due.Before(next) {
			next = due
		}
	}
	if !next.IsZero() {
		b.checkTimer.Reset(max(time.Until(next), 0))
	}
}

// checksDue reads by id, in the next batch of reads, each due session that is
// held, recent and still without activity. Run's goroutine only.
func (c *Census) checksDue(ctx context.Context, b *burst) {
	now, cnow := time.Now(), c.now()
	c.mu.RLock()
	for id, due := range b.checks {
		if due.After(now) {
			continue
		}
		delete(b.checks, id)
		e := c.sessions[id]
		if e == nil || e.control || !e.s.Activity.IsZero() || cnow.Sub(e.s.Created) > wroteCheckAge {
			continue
		}
		if b.reads == nil {
			b.reads = map[string]struct{}{}
		}
		b.reads[id] = struct{}{}
	}
	c.mu.RUnlock()
	armChecks(b)
	c.startReads(ctx, b)
}
