package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/proctree"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Compensation outcomes, recorded in the failed verdict's evidence.
const (
	compReleased  = "released"  // the attempt's session (if any) is confirmed gone and the row released
	compAbandoned = "abandoned" // the outcome is unknown: the row is kept for recovery
	compNone      = "none"      // the fence was lost: nothing of ours to undo
)

// undo compensates a failed attempt in reverse order on a context detached from the
// caller's, with its own deadline: kill the attempt's session by id (in the life it
// was created in) and confirm it gone, then release the row. When anything is
// uncertain the row is abandoned instead, as evidence for recovery. It writes the
// attempt's one failed verdict and returns the error to answer with.
//
// The tmux part (kill and confirm) may use up the whole compensateTimeout when
// tmux is stuck; the fence writes after it (release, abandon) and the verdict
// each run on a fresh detached context of their own (fenceCtx), so they happen
// even then. Before, an abandon ran under the kill's expired deadline and
// failed, leaving the row owned by the live daemon (identity_reserved_live for
// every later create) until a restart.
func (m *Manager) undo(ctx context.Context, a *attempt, cause error) error {
	d := m.compTimeout
	if d <= 0 {
		d = compensateTimeout
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	comp := m.compensate(cctx, a)
	code := verdict.CodeOf(cause)
	if code != verdict.CodeAgentNotRunning && m.restartCancelled(cctx, a) {
		// A kill stopped the identity while its restart was under way, and
		// took the kept session from under the start's tmux steps: their
		// failure (tag_failed, tmux_unavailable) is not tmux's nor the
		// agent's, and must not page anyone; the publication would have
		// been refused all the same (fence.NewPublished).
		cause = verdict.Errorf(verdict.CodeAgentNotRunning, map[string]any{"cancelled": true},
			"the restart was cancelled while it was under way (a kill stopped the identity): %v", cause)
		code = verdict.CodeAgentNotRunning
	}
	if code == verdict.CodeInternal || code == verdict.CodeTimeout {
		cause = verdict.Errorf(verdict.CodeSpawnFailed, nil, "%w", cause)
		code = verdict.CodeSpawnFailed
	}
	rec := m.failedRecord(a, cause, comp)
	m.emit(cctx, rec)
	m.met.failed(code)
	return cause
}

// restartCancelled reports whether attempt a is a restart's start whose
// identity no longer waits for it: its ended generation's restart state is
// no longer exited (a kill stopped it, or another start published).
func (m *Manager) restartCancelled(ctx context.Context, a *attempt) bool {
	if a.restart == nil {
		return false
	}
	fctx, cancel := fenceCtx(ctx)
	defer cancel()
	p, ok, err := m.fence.PublishedFor(fctx, a.res.Identity)
	return err == nil && ok && p.Generation == a.restart.prev.Generation && p.Restart.State != fence.RestartExited
}

func (m *Manager) compensate(ctx context.Context, a *attempt) string {
	switch {
	case a.fenceLost:
		return compNone
	case a.uncertain:
		return m.abandon(ctx, a)
	}
	if a.tmuxID != "" {
		if err := m.killConfirm(ctx, a.life, a.tmuxID); err != nil {
			m.log.Warn().Err(err).Str("tmux_id", a.tmuxID).Msg("compensation kill unconfirmed")
			return m.abandon(ctx, a)
		}
		m.reapAttempt(ctx, a)
	} else if a.sent {
		return m.abandon(ctx, a)
	}
	fctx, cancel := fenceCtx(ctx)
	defer cancel()
	if err := m.fence.Release(fctx, a.res.ID); err != nil {
		m.log.Warn().Err(err).Str("reservation", a.res.ID).Msg("compensation release failed")
		return m.abandon(ctx, a)
	}
	return compReleased
}

// reapAttempt waits (briefly) for the failed attempt's pane helper, hung up
// with its session, and removes the cgroup it may have made. The helper never
// ran an agent (the gate opens only after publication), so nothing is blocked
// on this: a helper still there after the wait only leaves its empty cgroup
// for the next start's sweep.
func (m *Manager) reapAttempt(ctx context.Context, a *attempt) {
	cg := proctree.GenerationCgroup(m.cgroupBase, a.res.ID)
	if a.sbCgroup != "" {
		cg = a.sbCgroup // a claimed standby's (pool.place)
	}
	h := proctree.Hold{PanePID: a.panePID, PaneStart: a.paneStart, Cgroup: cg}
	if proctree.WaitGone(ctx, h, time.Now().Add(unpublishedProofWait)).State == proctree.Gone {
		_ = proctree.RemoveCgroup(cg)
	}
}

// fenceCtx is the context of one undo or release write in the fence: detached
// from ctx (which may have expired: the caller's, the saga's or the kill's) with
// its own deadline.
func fenceCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), fenceUndoTimeout)
}

func (m *Manager) abandon(ctx context.Context, a *attempt) string {
	fctx, cancel := fenceCtx(ctx)
	defer cancel()
	if err := m.fence.Abandon(fctx, a.res.ID); err != nil {
		m.log.Error().Err(err).Str("reservation", a.res.ID).Msg("abandon failed; the row stays owned by this process")
		return compAbandoned
	}
	m.resolveAbandonedLater(a.res.ID)
	return compAbandoned
}

// killConfirm kills a session by id in the given server life and confirms it gone
// with a fresh live read. A changed server life proves the session gone: ids belong
// to one life and the old server is dead.
func (m *Manager) killConfirm(ctx context.Context, life tmuxctl.ServerLife, id string) error {
	_, _, err := m.killConfirmAfter(ctx, life, id, nil)
	return err
}

// killConfirmAfter is killConfirm with the commands before sent first, in the
// same pipeline as the kill (their replies and errors are returned, one each):
// what must be read while the session still exists — an ended pane's output
// tail — costs no round trip of its own.
//
// kill-session and the has-session that confirms it are sent together, one
// round trip instead of two: tmux runs a control client's lines in the order
// they came, so the has-session is a fresh read made after the kill ran, and
// only its "no such session" (or a changed server life) proves the session
// removed — exactly the proof the two waits gave. A has-session that still
// finds it (the kill failed) or got no answer falls back to polling.
func (m *Manager) killConfirmAfter(ctx context.Context, life tmuxctl.ServerLife, id string, before [][]string) ([]tmuxctl.Reply, []error, error) {
	// The census answers this end's notifications with a read of id, not a
	// list of every session: we confirm it gone ourselves (census.Removing).
	m.census.Removing(life, id)
	n := len(before)
	cmds := append(append(make([][]string, 0, n+2), before...),
		[]string{"kill-session", "-t", id}, []string{"has-session", "-t", id})
	replies, errs := m.pipelineIn(ctx, life, cmds)
	killErr, hasErr := errs[n], errs[n+1]
	switch {
	case isCommandError(hasErr):
		m.censusGone(life, id) // proven gone: the census need not read it
		return replies[:n], errs[:n], nil
	case errors.Is(hasErr, tmuxctl.ErrLifeChanged), errors.Is(killErr, tmuxctl.ErrLifeChanged):
		return replies[:n], errs[:n], nil
	case killErr != nil && !isCommandError(killErr):
		return replies[:n], errs[:n], fmt.Errorf("kill-session %s: %w", id, killErr)
	}
	if !sleepCtx(ctx, pollInterval) {
		return replies[:n], errs[:n], fmt.Errorf("session %s still present after kill: %w", id, ctx.Err())
	}
	return replies[:n], errs[:n], m.confirmGone(ctx, life, id)
}

// censusGone tells the census that session id is proven gone: at once when
// it can (TryGone), so that the census no longer lists it when the caller
// goes on to write the end it removed it for; else on a goroutine, behind the
// list in flight.
func (m *Manager) censusGone(life tmuxctl.ServerLife, id string) {
	if !m.census.TryGone(life, id) {
		go m.census.Gone(life, id)
	}
}

// confirmGone polls has-session by id until tmux says the session does not exist.
func (m *Manager) confirmGone(ctx context.Context, life tmuxctl.ServerLife, id string) error {
	deadline := time.Now().Add(killConfirmWait)
	for {
		_, err := m.commandIn(ctx, life, "has-session", "-t", id)
		switch {
		case isCommandError(err):
			m.censusGone(life, id)
			return nil
		case errors.Is(err, tmuxctl.ErrLifeChanged):
			return nil
		case err != nil:
			return fmt.Errorf("has-session %s: %w", id, err)
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, pollInterval) {
			return fmt.Errorf("session %s still present after kill", id)
		}
	}
}

func isCommandError(err error) bool {
	var ce *tmuxctl.CommandError
	return errors.As(err, &ce)
}

func (m *Manager) failedRecord(a *attempt, cause error, comp string) verdict.Record {
	code := verdict.CodeOf(cause)
	rec := verdict.Record{
		Action: verdict.ActionCreate, Outcome: verdict.OutcomeFailure,
		Reason: verdict.Classify(code).Reason, Verdict: verdict.VerdictFailed, Code: code,
		Duration:    timeSince(a.start),
		Identity:    identityRef(a.req.Identity),
		Reservation: &verdict.ReservationRef{ID: a.res.ID, Phase: a.res.Phase.String()},
		Evidence:    map[string]any{"cause": errString(cause), "compensation": comp},
	}
	for k, v := range verdict.AsError(cause).Details { // e.g. spawn_failed's reason
		if _, taken := rec.Evidence[k]; !taken {
			rec.Evidence[k] = v
		}
	}
	if a.name != "" {
		rec.Session = &verdict.SessionRef{Name: a.name, ID: a.tmuxID, Generation: a.res.Generation}
	}
	if r := a.restart; r != nil {
		// A start after the first: tied to the sequence it belongs to, as
		// its published verdict would have been (restartRecord).
		if r.prev.Restart.Reason == verdict.ReasonManualRestart {
			rec.Action = verdict.ActionRestart
		}
		rec.Restart = &verdict.RestartRef{Count: r.prev.Restart.Restarts + 1}
		rec.Evidence["previous_generation"] = r.prev.Generation
		rec.Evidence["start_reason"] = r.prev.Restart.Reason
		if rec.Session == nil {
			rec.Session = &verdict.SessionRef{Name: r.prev.SessionName, ID: r.prev.TmuxID, Generation: a.res.Generation}
		}
	}
	return rec
}

func timeSince(t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return time.Since(t)
}
