package lifecycle

import (
	"context"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// The restart policy (contract "Restart policy"). A restart is a new
// generation of the identity, reserved, journaled and published through the
// fence like a create (so at most one agent per identity holds also for
// restarts), and started only after the previous generation's processes are
// proven gone: the decision is made in finishEnd and recorded with the ended
// verdict in one transaction (fence.MarkEndedNext), with the time the next
// start is due, so a delay outlives the daemon. The restarter (restartLoop)
// waits for that time and starts the next generation in the session kept
// from the last one (its dead pane respawned), or in a new session when that
// one is gone (the tmux server died, the host rebooted).

// Defaults and bounds of the policy (api fills the defaults into the spec;
// these cover specs that predate a field).
const (
	DefaultRestartDelay    = time.Second
	MaxRestartDelay        = 60 * time.Second
	DefaultRestartBurst    = 5
	DefaultRestartInterval = 300 * time.Second
	// restartResetRun: a run at least this long resets the backoff.
	restartResetRun = 60 * time.Second
	// restartRetry is the pause before the restarter looks again after a
	// start it could not make (tmux or the fence unavailable, a create in
	// flight for the identity).
	restartRetry = 200 * time.Millisecond
)

// restartDelay is the delay before the next start after failures
// consecutive failed runs: the first delay, doubled per failure after the
// first, at most MaxRestartDelay.
func restartDelay(first time.Duration, failures int) time.Duration {
	d := first
	for i := 1; i < failures && d < MaxRestartDelay; i++ {
		d *= 2
	}
	return min(d, MaxRestartDelay)
}

func specDelay(s fence.Spec) time.Duration {
	if s.RestartDelayMS < 0 {
		return DefaultRestartDelay
	}
	return time.Duration(s.RestartDelayMS) * time.Millisecond
}

func specBurst(s fence.Spec) (int, time.Duration) {
	b, iv := s.RestartBurst, time.Duration(s.RestartIntervalS)*time.Second
	if b <= 0 {
		b = DefaultRestartBurst
	}
	if iv <= 0 {
		iv = DefaultRestartInterval
	}
	return b, iv
}

// failedRun says whether an ended verdict is a failure for on-failure: a
// non-zero status, a signal, or an exit that is not known.
func failedRun(rec verdict.Record) bool {
	x := rec.Exit
	return x == nil || x.Signal != "" || x.Status == nil || *x.Status != 0
}

// planNext decides what follows the end of p's generation (rec is its ended
// verdict): nothing (policy never), stopped (a kill, a session or the
// agent's pane killed by hand, a clean exit under on-failure), the next start with its delay, or
// gave_up with its verdict when that start would exceed the start limit.
func planNext(p fence.Published, rec verdict.Record, cause endCause, now time.Time) (fence.RestartNext, *verdict.Record) {
	if cause.killed {
		return killedNext(p, rec, cause, now)
	}
	if cause.manual {
		return fence.RestartNext{State: fence.RestartExited, Reason: verdict.ReasonManualRestart}, nil
	}
	if !p.Spec.Restarts() {
		return fence.RestartNext{}, nil
	}
	stopped := fence.RestartNext{State: fence.RestartStopped, Failures: p.Restart.Failures}
	switch {
	case cause.cleanup || cause.actionKill, cause.reason == verdict.ReasonTmuxSessionMissing,
		cause.reason == verdict.ReasonAgentPaneMissing:
		return stopped, nil
	case cause.reason == verdict.ReasonServerExited:
		next := fence.RestartNext{State: fence.RestartExited, Reason: verdict.ReasonServerRestart,
			Failures: p.Restart.Failures}
		return limit(p, next, now)
	}
	failed := failedRun(rec)
	if !failed && p.Spec.Restart == fence.RestartOnFailure {
		return stopped, nil
	}
	failures := p.Restart.Failures
	if now.Sub(p.PublishedAt) >= restartResetRun {
		failures = 0
	}
	if failed {
		failures++
	} else {
		failures = 0
	}
	delay := restartDelay(specDelay(p.Spec), max(failures, 1))
	next := fence.RestartNext{State: fence.RestartExited, Delay: delay, Reason: verdict.ReasonRestart,
		Failures: failures}
	return limit(p, next, now)
}

// killedNext is planNext for an end a kill waits for (askKill): whatever
// would have followed, nothing starts — the identity is stopped, with a
// stopped verdict (action kill) saying which start the kill cancelled.
func killedNext(p fence.Published, rec verdict.Record, cause endCause, now time.Time) (fence.RestartNext, *verdict.Record) {
	cause.killed = false
	would, also := planNext(p, rec, cause, now)
	if would.State != fence.RestartExited {
		return would, also // nothing would have started (none, stopped, gave up)
	}
	st := stoppedRecord(p, verdict.ActionKill, verdict.ReasonKilledByRequest)
	st.Evidence["cancelled_start"] = would.Reason
	return fence.RestartNext{State: fence.RestartStopped, Failures: would.Failures}, &st
}

// limit turns a next start into gave_up when it would be more than
// restart_burst starts within restart_interval_s.
func limit(p fence.Published, next fence.RestartNext, now time.Time) (fence.RestartNext, *verdict.Record) {
	due := now.Add(next.Delay)
	burst, interval := specBurst(p.Spec)
	n := 0
	for _, s := range p.Restart.Starts {
		if s.After(due.Add(-interval)) {
			n++
		}
	}
	if n < burst {
		return next, nil
	}
	rec := gaveUpRecord(p, burst, interval, n)
	return fence.RestartNext{State: fence.RestartGaveUp, Failures: next.Failures}, &rec
}

func gaveUpRecord(p fence.Published, burst int, interval time.Duration, n int) verdict.Record {
	return verdict.Record{
		Action: verdict.ActionEnd, Outcome: verdict.OutcomeFailure, Verdict: verdict.VerdictGaveUp,
		Reason:   verdict.ReasonStartLimit,
		Identity: identityRef(p.Identity),
		Session:  &verdict.SessionRef{Name: p.SessionName, ID: p.TmuxID, Generation: p.Generation},
		Restart:  &verdict.RestartRef{Count: p.Restart.Restarts},
		Evidence: map[string]any{"restart_burst": burst, "restart_interval_s": int64(interval / time.Second),
			"starts_in_interval": n, "restart": p.Spec.Restart},
	}
}

// stoppedRecord is the stopped verdict of an identity whose pending restart
// was cancelled, or that had given up (action, reason: by whom): its feed's
// readers learn that nothing starts it again. Only a cancelled start has a
// next_start_due.
func stoppedRecord(p fence.Published, action, reason string) verdict.Record {
	rec := verdict.Record{
		Action: action, Outcome: verdict.OutcomeSuccess, Verdict: verdict.VerdictStopped, Reason: reason,
		Identity: identityRef(p.Identity),
		Session:  &verdict.SessionRef{Name: p.SessionName, ID: p.TmuxID, Generation: p.Generation},
		Restart:  &verdict.RestartRef{Count: p.Restart.Restarts},
		Evidence: map[string]any{"previous_state": p.Restart.State},
	}
	if p.Restart.State == fence.RestartExited {
		rec.Evidence["next_start_due"] = p.Restart.Due.UTC().Format(time.RFC3339Nano)
	}
	return rec
}

// keptSession is the session of an ended generation that a restart reuses:
// its dead pane is respawned with the next generation's helper.
type keptSession struct {
	tmuxID, paneID, name string
	shown                string // its name in tmux now: name, or the name a person renamed it to
	since                string // its @skc-since ("" when it has none)
	life                 tmuxctl.ServerLife
}

// restartOf is what an attempt that restarts an identity knows of it.
type restartOf struct {
	prev fence.Published // the ended generation
	kept *keptSession    // nil: start in a new session
}

// scheduleRestart makes sure the identity's restarter runs: it starts one,
// or wakes the one waiting (a restart request moved the due time).
func (m *Manager) scheduleRestart(id fence.Identity) {
	d := id.Digest()
	m.mu.Lock()
	defer m.mu.Unlock()
	if wake, ok := m.restarters[d]; ok {
		select {
		case wake <- struct{}{}:
		default:
		}
		return
	}
	if m.stopCtx.Err() != nil {
		return // shutting down: the next daemon's start schedules it (the fence has it)
	}
	wake := make(chan struct{}, 1)
	m.restarters[d] = wake
	m.stopWG.Add(1)
	go func() {
		defer m.stopWG.Done()
		m.restartLoop(m.stopCtx, id, wake)
	}()
}

// scheduleWaiting starts the restarter of every identity whose next start
// the fence holds (a daemon's start: delays outlive the daemon).
func (m *Manager) scheduleWaiting(ctx context.Context) {
	pubs, err := m.fence.RestartsDue(ctx, time.Time{})
	if err != nil {
		m.log.Warn().Err(err).Msg("restarts not scheduled: fence unreadable")
		return
	}
	for _, p := range pubs {
		if m.keptGoneByHand(p) {
			m.stopKeptGone(ctx, p)
			continue
		}
		m.scheduleRestart(p.Identity)
	}
}

// restartLoop is one identity's restarter: while the fence says its ended
// generation waits for the next start, it waits until that is due (or a
// wake), then starts it. It ends when the identity no longer waits: started
// (by it, or by a create that got there first), stopped, or gave up.
func (m *Manager) restartLoop(ctx context.Context, id fence.Identity, wake chan struct{}) {
	d := id.Digest()
	var last fence.Published // the ended generation last seen waiting here
	for {
		if m.restartStep(ctx, id, wake, &last) {
			m.mu.Lock()
			select {
			case <-wake: // a schedule arrived meanwhile: look again
				m.mu.Unlock()
				continue
			default:
			}
			delete(m.restarters, d)
			m.mu.Unlock()
			return
		}
		if ctx.Err() != nil {
			m.mu.Lock()
			delete(m.restarters, d)
			m.mu.Unlock()
			return
		}
	}
}

// restartStep makes one step of the restarter and reports whether it is
// done. last is the ended generation it saw waiting at its previous step:
// when another host's create has taken the identity since (its generation
// in the fence in place of ours), the kept session here is that one's.
func (m *Manager) restartStep(ctx context.Context, id fence.Identity, wake chan struct{}, last *fence.Published) bool {
	p, ok, err := m.fence.PublishedFor(ctx, id)
	switch {
	case err != nil:
		m.log.Warn().Err(err).Msg("restart: fence unreadable")
		return !sleepCtx(ctx, restartRetry)
	case ok && !p.Ended && m.remote(&p) && last.Generation != 0:
		m.yieldKept(ctx, *last, p)
		return true
	case !ok || !p.Ended || p.Restart.State != fence.RestartExited:
		return true
	}
	*last = p
	if wait := time.Until(p.Restart.Due); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-wake:
		case <-ctx.Done():
			return true
		}
		return false // look again: the due time may have moved
	}
	if p.Restart.Reason != verdict.ReasonManualRestart && m.keptGoneByHand(p) {
		// The kept session left its running server while the generation
		// was ending — killed by hand, or closed by tmux with its agent
		// because remain-on-exit was turned off by hand — so its removal
		// was told as that end, not as the kept session's: a stop all the
		// same (keptRemoved), not a start in a new session.
		m.stopKeptGone(ctx, p)
		return true
	}
	return m.startNext(ctx, p)
}
