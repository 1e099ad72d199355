package lifecycle

import (
	"context"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Ends that could not be acted on are looked at again.
//
// End detection acts on what it is told once: a pidfd firing, a census change.
// When the fence cannot be read or written at that moment (PostgreSQL
// restarting or failing over, SQLite's disk full), the lookup of the session's
// generation or the stop's first write fails, and nothing would tell that end
// again: the agent is gone, its pane dead or its session removed, but its
// generation would stay published — `ls` showing it stopping, its identity
// held, its restart policy never run — until something else touched the
// identity. So every such miss arms a retry: reconcile, which re-reads every
// published generation against live tmux and starts the stops it finds due,
// runs after a short delay and again, backing off, until one pass completes
// with no new miss. A stop whose processes could not be proven gone is not a
// miss: its unresolved verdict is written and a later look tries again
// (stop.go).

// endRetryFirst and endRetryMax bound the delay between two passes: the first
// comes soon (a fence that failed over answers within a second or two), later
// ones no more often than endRetryMax while the fence stays away.
var (
	endRetryFirst = 500 * time.Millisecond
	endRetryMax   = 5 * time.Second
)

// endRetry is the retry's state (m.mu).
type endRetry struct {
	running bool   // retryEnds runs
	misses  uint64 // misses so far: a pass ends the retry only when none came during it
}

// missedEnd records that end detection could not act on an end it was told
// of, and starts the retry unless it runs (or end detection does not: Run
// reconciles when it starts again).
func (m *Manager) missedEnd() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retry.misses++
	if m.retry.running || m.stopCtx.Err() != nil || !m.detecting.Load() {
		return
	}
	m.retry.running = true
	m.stopWG.Add(1)
	go func() {
		defer m.stopWG.Done()
		m.retryEnds(m.stopCtx)
	}()
}

// retryEnds reconciles, with backoff, until a pass sees no new miss, end
// detection stops, or ctx ends (Shutdown).
func (m *Manager) retryEnds(ctx context.Context) {
	delay := endRetryFirst
	for {
		if !sleepCtx(ctx, delay) || !m.detecting.Load() {
			break
		}
		m.mu.Lock()
		seen := m.retry.misses
		m.mu.Unlock()
		ok := m.reconcile(ctx)
		m.mu.Lock()
		done := ok && m.retry.misses == seen
		if done {
			m.retry.running = false
		}
		m.mu.Unlock()
		if done {
			m.log.Info().Msg("ends missed while the fence or tmux was unavailable: looked at again")
			return
		}
		delay = min(2*delay, endRetryMax)
	}
	m.mu.Lock()
	m.retry.running = false
	m.mu.Unlock()
}

// stopMissed reports whether a stop's error leaves an end not acted on: not a
// shutdown's interruption (the next start continues it) and not a stop that
// could not prove its processes gone (its own verdict says so).
func stopMissed(err error) bool {
	return err != nil && err != errInterrupted && verdict.CodeOf(err) != verdict.CodeIdentityReservedUnknown
}
