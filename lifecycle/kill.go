package lifecycle

import (
	"context"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// KillResult is a completed kill: the session is gone and its ended verdict written.
type KillResult struct {
	Status  string         `json:"status"` // "killed"
	Verdict verdict.Record `json:"verdict"`
}

// Kill ends a supervised session by id (in the server life it was published in),
// waits until the census has seen it go, and writes its one ended verdict (exit kind
// cleanup, reason killed_by_request). An unknown session is not_found.
func (m *Manager) Kill(ctx context.Context, ref Ref) (KillResult, error) {
	pub, sess, err := m.resolve(ctx, ref)
	if err != nil {
		return KillResult{}, err
	}
	life := m.lifeOf(pub.ServerPID, pub.ServerStart)
	m.markKilling(sess.ID, killReason{reason: verdict.ReasonKilledByRequest, byKill: true})
	defer m.unmarkKilling(sess.ID)
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), compensateTimeout)
	defer cancel()
	if err := m.killConfirm(kctx, life, sess.ID); err != nil {
		return KillResult{}, verdict.Errorf(verdict.CodeTmuxUnavailable, nil, "kill %s: %w", sess.ID, err)
	}
	m.waitCensusGone(kctx, sess.ID)
	cause := endCause{reason: verdict.ReasonKilledByRequest, cleanup: true, actionKill: true}
	rec, err := m.endPublished(kctx, pub, cause)
	if err != nil {
		return KillResult{}, verdict.Errorf(verdict.CodeFenceUnavailable, nil, "mark ended: %w", err)
	}
	return KillResult{Status: "killed", Verdict: rec}, nil
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
