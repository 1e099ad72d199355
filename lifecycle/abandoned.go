package lifecycle

import (
	"context"
	"time"
)

// An attempt whose outcome is unknown (tmux did not answer its new-session or
// its tags in time, a compensation kill could not be confirmed) is abandoned:
// its row stays as evidence, and recovery decides it from live tmux. Left to
// the identity's next create, or to the next daemon's start, a tmux that
// answered late kept the attempt's session — its helper waiting at a gate that
// never opens — as an unmanaged `skc-…` session for as long as nobody asked
// again. So the daemon decides its own abandoned rows itself, once tmux
// answers again: the same authority-first recovery (orphan: killed and proven
// gone; absent: released), never a timeout.
var (
	abandonedRetryFirst = 500 * time.Millisecond
	abandonedRetryMax   = 10 * time.Second
)

// resolveAbandonedLater decides our abandoned row resID in the background:
// tried after abandonedRetryFirst, then backing off to abandonedRetryMax, until
// it is decided — here, by a create of its identity, or by an operator's
// `fence release` — or the daemon stops (the next start decides it then).
func (m *Manager) resolveAbandonedLater(resID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopCtx.Err() != nil {
		return
	}
	delay, most := abandonedRetryFirst, abandonedRetryMax
	m.stopWG.Add(1)
	go func() {
		defer m.stopWG.Done()
		for sleepCtx(m.stopCtx, delay) && !m.resolveAbandoned(m.stopCtx, resID) {
			delay = min(2*delay, most)
		}
	}()
}

// resolveAbandoned is one try of resolveAbandonedLater: true when the row is
// decided (or gone, or no longer abandoned: decided elsewhere). It asks live
// tmux only once tmux answers a trivial command: while tmux is stuck every
// inspection is unknown, and each would write an unresolved verdict.
func (m *Manager) resolveAbandoned(ctx context.Context, resID string) bool {
	row, ok, err := m.fence.Reservation(ctx, resID)
	if err != nil {
		return false
	}
	if !ok || !row.Abandoned {
		return true
	}
	life, ok := m.serverLife()
	if !ok || !m.census.Synced() {
		return false
	}
	if _, err := m.commandIn(ctx, life, "display-message", "-p", "ok"); err != nil {
		return false
	}
	if err := m.decideRow(ctx, row); err != nil {
		m.log.Warn().Err(err).Str("reservation", resID).Msg("abandoned attempt not resolved yet")
		return false
	}
	return true
}
