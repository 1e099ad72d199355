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
		return KillResult{}, verdict.Errorf(verdict.CodeFenceUnavailable, nil, "%w", err)
	}
	if ok && !pub.Ended && m.remote(&pub) && !m.inThisLife(&pub) {
		// Only its host can see its session and prove its processes gone.
		return KillResult{}, remoteSession(pub)
	}
	cause := endCause{reason: verdict.ReasonKilledByRequest, cleanup: true, actionKill: true, term: true}
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
	run := m.stopGeneration(pub, cause)
	select {
	case <-run.done:
	case <-ctx.Done():
		return KillResult{}, stoppingError(pub, verdict.CodeTimeout,
			"generation %d is stopping; the request ended before its processes were proven gone (%v)", ctx.Err())
	}
	if run.err != nil {
		return KillResult{}, stopRunError(pub, run.err)
	}
	rec := run.rec
	if rec.Verdict == "" {
		// Another observer wrote the end (the agent exited as we killed it):
		// that record is this generation's one ended verdict.
		rec = m.endedVerdictOf(ctx, pub)
	}
	m.waitCensusGone(ctx, pub.TmuxID)
	return KillResult{Status: "killed", Verdict: rec}, nil
}

// endedVerdictOf finds the ended verdict of p's generation in its identity's
// history (zero when none is there).
func (m *Manager) endedVerdictOf(ctx context.Context, p fence.Published) verdict.Record {
	recs, err := m.fence.VerdictsFor(ctx, p.Identity, showVerdicts)
	if err != nil {
		return verdict.Record{}
	}
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		if r.Verdict == verdict.VerdictEnded && r.Session != nil && r.Session.Generation == p.Generation {
			return r
		}
	}
	return verdict.Record{}
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
	return m.fence.CachedPublishedByName(ctx, ref.Name)
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
