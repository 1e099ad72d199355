package lifecycle

import (
	"context"
	"errors"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// KillResult is a completed kill: the session is gone and its ended verdict written.
type KillResult struct {
	Status  string         `json:"status"` // "killed"
	Verdict verdict.Record `json:"verdict"`
}

// Kill stops a supervised generation: SIGTERM to its processes, SIGKILL to
// what is left after its stop_timeout_ms, and it returns only once they are
// proven gone, with the one ended verdict (exit kind cleanup, reason
// killed_by_request, skc.exit as the agent ended). The session is removed
// after the verdict is written. A generation already stopping (its session
// gone by hand, say) is waited for the same way. An unknown session is
// not_found; processes that cannot be proven gone are
// identity_reserved_unknown with details.stopping.
func (m *Manager) Kill(ctx context.Context, ref Ref) (KillResult, error) {
	pub, ok, err := m.publishedFor(ctx, ref)
	if err != nil {
		return KillResult{}, fenceError(err)
	}
	if ok && !pub.Ended && m.remote(&pub) && !m.inThisLife(&pub) {
		// Only its host can see its session and prove its processes gone.
		return KillResult{}, remoteSession(pub)
	}
	cause := killByRequest
	if ok && pub.Ended || !ok {
		// Between two generations (waiting out a restart delay): stop for good.
		if w, waiting := m.waitingTarget(ctx, ref); waiting {
			if res, done, err := m.killWaiting(ctx, w); done {
				return res, err
			}
		}
	}
	if !ok || pub.Ended || pub.Stopping == nil {
		if pub, _, err = m.resolve(ctx, ref); err != nil {
			return KillResult{}, err
		}
	} else {
		cause = causeOf(pub.Stopping.Reason)
	}
	return m.awaitKill(ctx, pub, cause, 0)
}

// awaitKill runs p's stop with cause, or joins the one in flight, and waits
// until its processes are proven gone. When the stop it waited for was not a
// kill's (the agent's exit, a restart request), the kill goes on after it:
// killAfterStop.
func (m *Manager) awaitKill(ctx context.Context, p fence.Published, cause endCause, depth int) (KillResult, error) {
	defer m.askKill(p)() // the stop may be another's: its end is told to stop the identity
	run := m.stopGeneration(p, cause)
	select {
	case <-run.done:
	case <-ctx.Done():
		return KillResult{}, stoppingError(p, verdict.CodeTimeout,
			"generation %d is stopping; the request ended before its processes were proven gone (%v)", ctx.Err())
	}
	if run.err != nil {
		return KillResult{}, stopRunError(p, run.err)
	}
	rec := run.rec
	if rec.Verdict == "" {
		// Another observer wrote the end (the agent exited as we killed it):
		// that record is this generation's one ended verdict.
		var err error
		if rec, err = m.endedVerdictOf(ctx, p); err != nil {
			return KillResult{}, fenceError(err)
		}
	}
	if rec.Verdict == "" {
		// The fence has no end of this generation to show, and the stop did
		// not write one: never answer "killed" for an agent nobody proved
		// gone (seen when a state_dir's missing directory became a symlink
		// after the create: the fence keys the identity differently now).
		return KillResult{}, stoppingError(p, verdict.CodeIdentityReservedUnknown,
			"generation %d: its stop ended without an ended verdict in the fence; its processes are not proven gone")
	}
	if rec.Reason != verdict.ReasonKilledByRequest {
		return m.killAfterStop(ctx, p, rec, depth)
	}
	m.waitCensusGone(ctx, p.TmuxID)
	return KillResult{Status: "killed", Verdict: rec}, nil
}

// killAfterStopDepth bounds how many generations one kill follows, and how
// often it looks again at one: each step needs a restart that began before
// the kill could cancel it.
const killAfterStopDepth = 3

// killAfterStop finishes a kill that waited for a stop it did not begin —
// the agent's own exit under a restart policy, a restart request — whose end
// (rec) may have handed the identity to its next start. A kill stops the
// identity for good (docs/contract.md, "Restart policy"), so after that stop
// the kill looks again: a next start still waiting is cancelled
// (killWaiting: the identity becomes stopped, and a start already on its way
// has its publication refused), and a next generation that published in
// the meantime is killed in turn.
func (m *Manager) killAfterStop(ctx context.Context, pub fence.Published, rec verdict.Record, depth int) (KillResult, error) {
	for try := 0; try < killAfterStopDepth; try++ {
		p, ok, err := m.fence.PublishedFor(ctx, pub.Identity)
		if err != nil {
			return KillResult{}, fenceError(err)
		}
		switch {
		case ok && !p.Ended && p.Generation > pub.Generation && depth < killAfterStopDepth:
			return m.awaitKill(ctx, p, killCause(p), depth+1)
		case ok && p.Ended && p.Generation == pub.Generation && p.Restart.State == fence.RestartExited:
			if res, done, err := m.killWaiting(ctx, p); done {
				return res, err
			}
			continue // the state moved under the kill (a start began): look again
		}
		break
	}
	m.waitCensusGone(ctx, pub.TmuxID)
	return KillResult{Status: "killed", Verdict: rec}, nil
}

// askKill records, until the returned func runs, that a kill waits for p's
// stop: an end planned meanwhile (finishEnd) stops the identity instead of
// handing it to a next start, whatever the stop's own cause — so the common
// case needs no cancellation afterwards (killAfterStop covers an end planned
// before the kill came).
func (m *Manager) askKill(p fence.Published) func() {
	key := stopKey(p)
	m.mu.Lock()
	m.killAsked[key]++
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		if m.killAsked[key]--; m.killAsked[key] <= 0 {
			delete(m.killAsked, key)
		}
		m.mu.Unlock()
	}
}

// killWaits reports whether a kill waits for p's stop (askKill).
func (m *Manager) killWaits(p fence.Published) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.killAsked[stopKey(p)] > 0
}

// killByRequest is a kill's own cause: SIGTERM first, exit kind cleanup.
var killByRequest = endCause{reason: verdict.ReasonKilledByRequest, cleanup: true, actionKill: true, term: true}

// killCause is a kill's cause for p: its own, or that of the stop p is
// already in.
func killCause(p fence.Published) endCause {
	if p.Stopping != nil {
		return causeOf(p.Stopping.Reason)
	}
	return killByRequest
}

// endedVerdictOf finds the ended verdict of p's generation in its identity's
// history (zero when none is there; an error when the fence cannot be read).
func (m *Manager) endedVerdictOf(ctx context.Context, p fence.Published) (verdict.Record, error) {
	recs, err := m.fence.VerdictsFor(ctx, p.Identity, showVerdicts)
	if err != nil {
		return verdict.Record{}, err
	}
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		if r.Verdict == verdict.VerdictEnded && r.Session != nil && r.Session.Generation == p.Generation {
			return r, nil
		}
	}
	return verdict.Record{}, nil
}

// waitCensusGone waits (bounded) until the census no longer lists id, so a List
// right after Kill does not show the killed session.
func (m *Manager) waitCensusGone(ctx context.Context, id string) {
	deadline := time.Now().Add(killConfirmWait)
	for {
		if _, ok := m.census.ByID(id); !ok {
			return
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 10*time.Millisecond) {
			return
		}
	}
}

// publishedFor reads the published record a Ref names straight from the fence
// (a name matched exactly against published session names), whether or not its
// session is still listed: Kill needs it to find a generation that is stopping
// after its session went.
func (m *Manager) publishedFor(ctx context.Context, ref Ref) (fence.Published, bool, error) {
	if ref.Identity != nil {
		return m.fence.PublishedFor(ctx, *ref.Identity)
	}
	// The fence's in-memory name index: one map read, not every identity row.
	p, ok, err := m.fence.CachedPublishedByName(ctx, ref.Name)
	if err == nil && !ok {
		// Or the tmux id `ls` lists a stopping generation with, its
		// session gone.
		if g, one := m.goneNamed(ctx, ref.Name); one && !g.Ended {
			return g, true, nil
		}
	}
	return p, ok, err
}

// stopRunError is the refusal of a kill or restart whose stop run ended with
// err: a stop cut short by the daemon's shutdown is busy (retry later: the next
// daemon continues it with the same deadline), an unknown owner stays what it
// is, anything else is the fence's.
func stopRunError(p fence.Published, err error) error {
	switch {
	case errors.Is(err, errInterrupted):
		return stoppingError(p, verdict.CodeBusy,
			"generation %d is stopping; the supervisor is shutting down and the next one continues the stop with the same deadline: retry then (%v)", err)
	case verdict.CodeOf(err) == verdict.CodeIdentityReservedUnknown:
		return err
	}
	return verdict.Errorf(verdict.CodeFenceUnavailable, nil, "stop: %w", err)
}
