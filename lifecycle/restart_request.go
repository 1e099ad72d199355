package lifecycle

import (
	"context"
	"strconv"
	"time"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// restartTransientBound is how long a restart request waits on a restarter
// that cannot reach tmux or the fence before it answers with that error (the
// restarter goes on trying: the start is due, the fence has it).
const restartTransientBound = 30 * time.Second

// makeDueTries bounds makeDue's compare-and-set: each lost race is another
// writer's step (a restarter, a kill), a handful at most.
const makeDueTries = 20

// Restart ends the running generation that ref names (the proven stop, as a
// kill) and starts the next one now, in the same session; for an identity
// whose generation has ended (waiting out a delay, stopped, gave up) it
// starts the next one now. It returns once the next generation is published,
// or with the reason it was not: its start failed (spawn_failed, with the
// next try's time unless the identity gave up), a kill stopped the identity
// meanwhile, the daemon shuts down, or tmux or the fence stayed unavailable.
func (m *Manager) Restart(ctx context.Context, ref Ref) (View, error) {
	t, err := m.Resolve(ctx, ref)
	if err != nil {
		return View{}, err
	}
	if t.Published == nil {
		return View{}, verdict.Errorf(verdict.CodeNotFound, map[string]any{"managed": false},
			"%s is not a session supervised by this daemon", refString(ref))
	}
	if s := t.Session; s != nil && (s.ID != t.Published.TmuxID || !m.inThisLife(t.Published)) {
		// A session carrying an identity's tags that is not the session that
		// identity's generation was published in (tags set by hand): not the
		// identity's to restart, as kill, send and the others answer.
		return View{}, verdict.Errorf(verdict.CodeNotFound, map[string]any{"name": s.Name, "id": s.ID, "managed": false},
			"session %q (%s) is not a session supervised by this daemon", s.Name, s.ID)
	}
	if t.Remote || m.remote(t.Published) {
		// Ended or not, another host's identity: its restarts are that
		// host's (its restarter reads only its own generations).
		return View{}, remoteSession(*t.Published)
	}
	p := *t.Published
	since := time.Now()
	afterStop := false
	if !p.Ended {
		reason, err := m.stopForRestart(ctx, p)
		if err != nil {
			return View{}, err
		}
		// A restart that met a kill's stop comes after the kill: it starts
		// the identity again, as a restart of a stopped identity does.
		afterStop = reason != verdict.ReasonKilledByRequest
	}
	failures, err := m.makeDue(ctx, p, afterStop)
	if err != nil {
		return View{}, err
	}
	m.scheduleRestart(p.Identity)
	return m.awaitGeneration(ctx, p.Identity, p.Generation, failures, since)
}

// makeDue makes the next start of ended generation p due now, as a manual
// restart, unless it already is (a stop for this restart, or a policy start
// under way), and returns the identity's count of failed starts from which a
// failure of that start is told (0 after a manual restart: it resets them).
// afterStop: this request stopped the generation itself (or joined a stop
// that was not a kill's), so its end handed the identity to this restart;
// when the identity is stopped after all, a kill came during that stop and
// wins (the kill stops the identity for good,
// docs/contract.md "Restart policy") — agent_not_running, as for a kill that
// stops it before the next start.
func (m *Manager) makeDue(ctx context.Context, p fence.Published, afterStop bool) (int, error) {
	for try := 0; ; try++ {
		if try == makeDueTries {
			return 0, verdict.Errorf(verdict.CodeIdentityFenceContended, map[string]any{"generation": p.Generation},
				"the identity's restart state changed %d times while this request set it; retry", try)
		}
		cur, ok, err := m.fence.PublishedFor(ctx, p.Identity)
		if err != nil {
			return 0, verdict.Errorf(verdict.CodeFenceUnavailable, nil, "%w", err)
		}
		if !ok || cur.Generation != p.Generation || !cur.Ended {
			return 0, nil // started meanwhile (a create, a policy start): awaitGeneration sees it
		}
		if afterStop && cur.Restart.State == fence.RestartStopped {
			return 0, verdict.Errorf(verdict.CodeAgentNotRunning,
				map[string]any{"generation": cur.Generation, "state": cur.Restart.State},
				"the identity was stopped (a kill) before its next generation started")
		}
		if cur.Restart.State == fence.RestartExited && !cur.Restart.Due.After(time.Now()) {
			if cur.Restart.Reason == verdict.ReasonManualRestart {
				return 0, nil
			}
			return cur.Restart.Failures, nil
		}
		now := fence.RestartNext{State: fence.RestartExited, Reason: verdict.ReasonManualRestart}
		set, err := m.fence.SetRestart(ctx, cur.Identity, cur.Generation, cur.Restart.State, now, nil)
		if err != nil {
			return 0, verdict.Errorf(verdict.CodeFenceUnavailable, nil, "%w", err)
		}
		if set {
			return 0, nil
		}
		// Its state moved between the read and the write (its restarter, a
		// kill): decide again from what the fence says now.
	}
}

func refString(ref Ref) string {
	if ref.Identity != nil {
		return "identity " + ref.Identity.StateDir + " " + ref.Identity.SessionID
	}
	return "session " + strconv.Quote(ref.Name)
}

// stopForRestart ends p's generation through the proven stop with reason
// manual_restart (or joins the stop in flight), and returns the reason the
// stop it waited for ended with.
func (m *Manager) stopForRestart(ctx context.Context, p fence.Published) (string, error) {
	cause := endCause{reason: verdict.ReasonManualRestart, cleanup: true, term: true, manual: true}
	if p.Stopping != nil {
		cause = causeOf(p.Stopping.Reason)
	}
	run := m.stopGeneration(p, cause)
	select {
	case <-run.done:
	case <-ctx.Done():
		return "", stoppingError(p, verdict.CodeTimeout,
			"generation %d is stopping; the request ended before its processes were proven gone (%v)", ctx.Err())
	}
	if run.err != nil {
		return "", stopRunError(p, run.err)
	}
	if run.rec.Verdict != "" {
		return run.rec.Reason, nil
	}
	return cause.reason, nil
}

// awaitGeneration waits until a generation after gen is published (it may
// have ended since) and returns its session's View. It answers sooner when
// none will be soon (noNextStart): failures is the identity's count of
// failed starts before this request's, since when the request began.
func (m *Manager) awaitGeneration(ctx context.Context, id fence.Identity, gen uint64, failures int, since time.Time) (View, error) {
	for {
		p, ok, err := m.fence.PublishedFor(ctx, id)
		if err == nil && ok && p.Generation > gen {
			// Published — also when it has ended since (an agent that
			// exits at once): the restart is answered by the generation it
			// started, not by one a later policy restart starts, nor by a
			// failure its give-up would claim.
			return m.generationView(ctx, p), nil
		}
		if err == nil && ok && p.Generation == gen && p.Ended {
			if err := m.noNextStart(p, failures, since); err != nil {
				return View{}, err
			}
		}
		if m.stopCtx.Err() != nil && !m.restarting(id) {
			// Shutting down, and no restarter is left to start it (one in
			// its saga finishes first): one last look, then busy.
			if p, ok, err := m.fence.PublishedFor(ctx, id); err == nil && ok && p.Generation > gen {
				return m.generationView(ctx, p), nil
			}
			return View{}, ErrShuttingDown
		}
		if !sleepCtx(ctx, pollInterval) {
			return View{}, verdict.Errorf(verdict.CodeTimeout, map[string]any{"generation": gen},
				"the next generation after %d was not published before the request ended", gen)
		}
	}
}

// noNextStart is the answer to a restart request that waits after ended
// generation p when the next generation will not be published soon; nil
// while it may be.
func (m *Manager) noNextStart(p fence.Published, failures int, since time.Time) error {
	details := map[string]any{"generation": p.Generation, "state": p.Restart.State}
	last, failed := m.lastStart(p.Identity, p.Generation, since)
	switch {
	case p.Restart.State == fence.RestartGaveUp:
		return startError(last, failed, details, "the next generation could not be started: the identity gave up (see its verdicts)")
	case p.Restart.State == fence.RestartStopped:
		return verdict.Errorf(verdict.CodeAgentNotRunning, details,
			"the identity was stopped (a kill) before its next generation started")
	case p.Restart.State != fence.RestartExited:
		return nil
	case p.Restart.Failures > failures:
		details["next_start_at"] = p.Restart.Due.UTC().Format(time.RFC3339Nano)
		return startError(last, failed, details,
			"the next generation could not be started; the restart policy tries again at next_start_at")
	case failed && last.transient && time.Since(since) >= restartTransientBound:
		details["restarting"] = true
		return verdict.Errorf(verdict.CodeOf(last.err), details,
			"the next generation is due but cannot be started yet (the daemon keeps trying): %v", last.err)
	}
	return nil
}

// startError is the spawn_failed of a start that did not publish: the
// start's own refusal (its code and details, e.g. executable_not_found) when
// the restarter recorded it, beside the identity's details.
func startError(last startFailure, failed bool, details map[string]any, msg string) error {
	if !failed || last.transient {
		return verdict.Errorf(verdict.CodeSpawnFailed, details, "%s", msg)
	}
	cause := verdict.AsError(last.err)
	for k, v := range cause.Details {
		if _, ok := details[k]; !ok {
			details[k] = v
		}
	}
	code := cause.Code
	if code == "" || code == verdict.CodeInternal {
		code = verdict.CodeSpawnFailed
	}
	return verdict.Errorf(code, details, "%s: %v", msg, last.err)
}

// restarting reports whether the identity's restarter runs.
func (m *Manager) restarting(id fence.Identity) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.restarters[id.Digest()]
	return ok
}

// generationView is the View of published generation p: from a fresh read
// of its session (the census may not have seen the respawned pane yet),
// else from the fence's record.
func (m *Manager) generationView(ctx context.Context, p fence.Published) View {
	if auth, s, err := m.inspectPublished(ctx, p); err == nil && auth == census.Authoritative && s != nil {
		v := publishedView(s, p)
		v.Host = m.host.Name
		return v
	}
	v := stoppingView(p) // an ended one's state and next start included
	if !p.Ended {
		v.PaneDead, v.State = false, stateOf(p, false)
	}
	v.Host = m.host.Name
	return v
}
