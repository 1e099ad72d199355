package census

import (
	"time"
)

// Stats is what an operator needs to see of the census, as counts only (no
// per-session labels, so a metrics scrape stays small at any scale).
type Stats struct {
	Managed   int  // sessions carrying @skc-identity (control session excluded)
	Unmanaged int  // every other session (control session excluded)
	Synced    bool // a full sync completed in the current connection

	Relists int64 // full re-lists run (connects, bursts, reconcile, Refresh)
	IDLists int64 // id-only lists run for bursts that can only be session ends
	// Confirms counts exact per-session tag reads (show-options); steady
	// state adds none, so a climbing rate means shadowing or churn.
	Confirms int64
	// Resyncs counts Resync marks queued to subscribers whose buffer was
	// full: each one is a consumer that fell behind and must re-read.
	Resyncs int64
	// SubscriptionLines counts the census subscription's lines (one per
	// second at most, only when a session's tags or panes changed).
	SubscriptionLines int64
	// Polls counts the census's own reads of every session's segment, made
	// in the subscription's place above a thousand sessions (poll.go).
	Polls int64
	// LastSyncDuration is how long the last successful full sync took,
	// from sending the list to applying it (0 before the first).
	LastSyncDuration time.Duration
}

// Stats returns the current counts. It is O(1), takes the read lock only
// briefly, and never touches tmux, so a metrics scrape cannot stall.
func (c *Census) Stats() Stats {
	c.mu.RLock()
	st := Stats{Managed: c.managed, Unmanaged: c.unmanaged, Synced: c.synced}
	c.mu.RUnlock()
	st.Relists = c.relists.Load()
	st.IDLists = c.idLists.Load()
	st.Confirms = c.confirms.Load()
	st.Resyncs = c.resyncs.Load()
	st.SubscriptionLines = c.subLines.Load()
	st.Polls = c.polls.Load()
	st.LastSyncDuration = time.Duration(c.lastSync.Load())
	return st
}

// countLocked adds delta to the managed or unmanaged count for e. c.mu is
// held; the control session is never counted.
func (c *Census) countLocked(e *entry, delta int) {
	switch {
	case e.control:
	case e.s.Managed:
		c.managed += delta
	default:
		c.unmanaged += delta
	}
}
