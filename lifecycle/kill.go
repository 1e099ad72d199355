package lifecycle

import (
	"context"
	"time"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Ref names a session: by its exact tmux name, or by identity. Exactly one is set.
type Ref struct {
	Name     string
	Identity *fence.Identity
}

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
	tail := m.OutputTail(kctx, life, sess.ID) // the last the agent showed, before it goes
	m.DetachFollowers(life, sess.ID)
	if err := m.killConfirm(kctx, life, sess.ID); err != nil {
		return KillResult{}, verdict.Errorf(verdict.CodeTmuxUnavailable, nil, "kill %s: %w", sess.ID, err)
	}
	m.waitCensusGone(kctx, sess.ID)
	cause := endCause{reason: verdict.ReasonKilledByRequest, cleanup: true, actionKill: true, tail: tail}
	rec, err := m.endPublished(kctx, pub, cause)
	if err != nil {
		return KillResult{}, verdict.Errorf(verdict.CodeFenceUnavailable, nil, "mark ended: %w", err)
	}
	return KillResult{Status: "killed", Verdict: rec}, nil
}

// resolve finds the published, not-ended generation a Ref names and its live
// session. The fence names it (a name is matched exactly against published session
// names, never by tmux's prefix matching); the census must list it in the life it
// was published in — refreshed once, since a session published a moment ago may
// not have been listed yet.
func (m *Manager) resolve(ctx context.Context, ref Ref) (fence.Published, census.Session, error) {
	notFound := verdict.Errorf(verdict.CodeNotFound, map[string]any{"name": ref.Name}, "no such session")
	if !m.census.Synced() {
		return fence.Published{}, census.Session{}, unavailable(errNotSynced)
	}
	pub, ok, err := m.publishedFor(ctx, ref)
	if err != nil {
		return pub, census.Session{}, verdict.Errorf(verdict.CodeFenceUnavailable, nil, "%w", err)
	}
	if !ok || pub.Ended {
		return pub, census.Session{}, notFound
	}
	info, _ := m.census.Info()
	if info.PID != pub.ServerPID || info.StartTime != pub.ServerStart {
		return pub, census.Session{}, notFound
	}
	for i := 0; i < 2; i++ {
		// A session listed before its tags were set (staleTags) is ours too:
		// the fence records this tmux id in this server life, and ids are
		// never reused within a life.
		if s, found := m.census.ByID(pub.TmuxID); found && (s.Identity() == pub.Identity.Digest() || staleTags(&s)) {
			return pub, s, nil
		}
		if i == 0 {
			if err := m.census.Refresh(ctx); err != nil {
				return pub, census.Session{}, unavailable(err)
			}
		}
	}
	return pub, census.Session{}, notFound
}

func (m *Manager) publishedFor(ctx context.Context, ref Ref) (fence.Published, bool, error) {
	if ref.Identity != nil {
		return m.fence.PublishedFor(ctx, *ref.Identity)
	}
	// The fence's in-memory name index: one map read, not every identity row.
	return m.fence.CachedPublishedByName(ctx, ref.Name)
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
