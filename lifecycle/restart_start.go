package lifecycle

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Fault points of a restart (SKC_FAULT=after:<point>), in order; the saga's
// own points follow them as for a create.
const (
	// FaultRestartDecided: the end and what follows it are in the fence (the
	// ended verdict, the next start due), the session is kept.
	FaultRestartDecided = "restart-decided"
	// FaultRespawned: respawn-pane answered (the next generation's helper runs
	// in the kept session, gated on a publication that has not happened).
	FaultRespawned = "respawned"
)

// startNext starts the next generation of p's identity, whose ended
// generation p waits for it; it reports whether the restarter is done (the
// generation started, someone else's did, or the daemon stops).
func (m *Manager) startNext(ctx context.Context, p fence.Published) bool {
	if err := m.begin(); err != nil {
		return errors.Is(err, ErrShuttingDown) || !sleepCtx(ctx, restartRetry)
	}
	defer m.end()
	if err := m.waitCensus(ctx); err != nil {
		return !sleepCtx(ctx, restartRetry)
	}
	spec := p.Spec
	if len(spec.ResumeArgv) > 0 {
		spec.Argv = append([]string(nil), spec.ResumeArgv...)
	}
	rr, err := m.fence.Reserve(ctx, p.Identity, spec)
	if err != nil {
		// A create of the identity in flight (it publishes or releases), or
		// the fence is busy: look again.
		m.log.Debug().Err(err).Str("session", p.SessionName).Msg("restart: not reserved")
		return !sleepCtx(ctx, restartRetry)
	}
	var res fence.Reservation
	switch rr.Outcome {
	case fence.Reserved:
		m.reclaimedInPlace(ctx, rr)
		res = rr.Reservation
	case fence.NeedsRecovery:
		r, err := m.recoverRow(ctx, rr.Abandoned, spec, time.Now())
		if r == nil {
			m.log.Debug().Err(err).Str("session", p.SessionName).Msg("restart: recovery first")
			return !sleepCtx(ctx, restartRetry)
		}
		res = *r
	case fence.PublishedElsewhere: // published since the restarter's look
		m.yieldKept(ctx, p, rr.Published)
		return true
	default:
		return true // a generation was published meanwhile (a create got there first)
	}
	m.fault.hitIn(true, FaultReserved)
	res.StartReason = p.Restart.Reason
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sagaTimeout)
	defer cancel()
	a := &attempt{resID: res.ID, req: CreateRequest{Identity: res.Identity, Spec: res.Spec}, res: res,
		digest: res.Identity.Digest(), start: time.Now(), stop: cancel,
		restart: &restartOf{prev: p, kept: m.keptOf(sctx, p)}}
	m.track(a)
	defer m.untrack(a)
	_, err = m.saga(sctx, a)
	return m.startDone(ctx, p, err)
}

// startDone files the outcome err of a start of the generation after p's
// and reports whether the restarter is done.
func (m *Manager) startDone(ctx context.Context, p fence.Published, err error) bool {
	switch verdict.CodeOf(err) {
	case "":
		m.noteStart(p, nil, false)
		return true
	case verdict.CodeTmuxUnavailable, verdict.CodeFenceUnavailable, verdict.CodeIdentityFenceContended:
		// No server yet (it died, or tmux is stuck), or a busy fence:
		// not the agent's failure; look again.
		m.noteStart(p, err, true)
		return !sleepCtx(ctx, restartRetry)
	case verdict.CodeAgentNotRunning:
		// A kill stopped the identity while this start was under way
		// (its failed verdict says so): nothing to count or retry.
		m.noteStart(p, err, false)
		return true
	}
	m.noteStart(p, err, false)
	m.failedStart(ctx, p, err)
	return false
}

// startFailure is a restarter's start of the generation after gen that did
// not publish: what a restart request waiting for that start answers with.
type startFailure struct {
	gen       uint64 // the ended generation it was to follow
	at        time.Time
	err       error
	transient bool // tmux or the fence unavailable: the restarter looks again soon, no failure counted
}

// noteStart records the outcome of a restarter's start of the generation
// after p's: a failure for the restart requests that wait for it, nil (it
// published) to forget the last one.
func (m *Manager) noteStart(p fence.Published, err error, transient bool) {
	d := p.Identity.Digest()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		delete(m.startFails, d)
		return
	}
	m.startFails[d] = startFailure{gen: p.Generation, at: time.Now(), err: err, transient: transient}
}

// lastStart is the restarter's last failed start after generation gen
// since t, if any.
func (m *Manager) lastStart(id fence.Identity, gen uint64, t time.Time) (startFailure, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.startFails[id.Digest()]
	return f, ok && f.gen == gen && !f.at.Before(t)
}

// keptOf is the session of ended generation p that the next start reuses
// (respawning p's own pane in it):
// listed by the census in the server life p was published in, with a name a
// tmux target cannot misread. nil after a server's death (or a session
// removed meanwhile): the next generation gets a new session.
func (m *Manager) keptOf(ctx context.Context, p fence.Published) *keptSession {
	if p.Restart.Reason == verdict.ReasonServerRestart {
		return nil
	}
	s, ok := m.sessionOf(p)
	if !ok || s.PaneID == "" {
		return nil
	}
	// The ended generation's own (dead) pane, not the active one: a person
	// may have opened another pane since (agentpane.go).
	k := &keptSession{tmuxID: s.ID, paneID: m.agentPaneTarget(ctx, s, p), name: s.Name, shown: s.Name, since: s.Tags[TagSince],
		life: m.lifeOf(p.ServerPID, p.ServerStart)}
	if !safeName(s.Name) {
		// Renamed by hand: the session is kept all the same (an attached
		// person stays attached, the rename stays), and the fence goes on
		// recording the name the saga gave it, a token it accepts.
		k.name = p.SessionName
	}
	return k
}

// leftoverOf is the session the identity's ended generation left standing:
// kept for a restart not started yet (the identity waits out its delay), or
// not removed yet (a kill or a superseding create between its steps). A
// create reuses it as a restart does — respawn-pane -k in its dead pane —
// so that a create racing a restart never puts a second session beside the
// kept one (model/saga.pml, -DBUILT_SESSIONS). nil when there is none.
//
// A reservation of generation 1 has no predecessor (the fence hands out one
// more than the highest generation ever reserved or published, and never
// reuses one), so an identity's first create skips the read: ~0.3 ms of a
// pooled create's ~2.7 ms on an idle machine.
func (m *Manager) leftoverOf(ctx context.Context, res fence.Reservation) *keptSession {
	if res.Generation == 1 {
		return nil
	}
	fctx, cancel := fenceCtx(ctx)
	defer cancel()
	p, ok, err := m.fence.PublishedFor(fctx, res.Identity)
	if err != nil || !ok || !p.Ended {
		return nil
	}
	return m.keptOf(ctx, p)
}

// safeName: the names our saga gives ([a-z0-9-]); a session renamed by hand
// to anything else keeps it, but the fence records the saga's name (it holds
// names as tokens).
func safeName(n string) bool {
	if !strings.HasPrefix(n, "skc-") || len(n) > 200 {
		return false
	}
	return strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789-") == ""
}

// failedStart counts a start that did not publish (its attempt was undone)
// as a failed run: the next try waits the doubled delay, and past the start
// limit (or at once, under policy never) the identity gives up. A start cancelled by a kill or a create
// (the fence no longer waits for it) changes nothing.
func (m *Manager) failedStart(ctx context.Context, p fence.Published, cause error) {
	m.log.Warn().Err(cause).Str("session", p.SessionName).Msg("restart: next generation not started")
	failures := p.Restart.Failures + 1
	next := fence.RestartNext{State: fence.RestartExited, Reason: p.Restart.Reason, Failures: failures,
		Delay: restartDelay(specDelay(p.Spec), failures)}
	var also *verdict.Record
	// A start a restart request asked for, of an identity whose policy is
	// never, is not tried again: the policy promised no restarts, and the
	// request got its answer (spawn_failed). It gives up at once.
	if burst, interval := specBurst(p.Spec); failures >= burst || !p.Spec.Restarts() {
		rec := gaveUpRecord(p, burst, interval, failures)
		rec.Evidence["failed_starts"] = failures
		next, also = fence.RestartNext{State: fence.RestartGaveUp, Failures: failures}, &rec
	}
	fctx, cancel := fenceCtx(ctx)
	defer cancel()
	ok, err := m.fence.SetRestart(fctx, p.Identity, p.Generation, fence.RestartExited, next, also)
	if err == nil && ok && also != nil {
		m.verdicts.Filed(*also)
		// Nothing will run in the kept session again (an agent's end that
		// gives up removes its session the same way).
		if err := m.removeKept(ctx, p, killReason{reason: verdict.ReasonOrphanCleanup}); err != nil {
			m.log.Warn().Err(err).Str("tmux_id", p.TmuxID).Msg("kept session of a gave-up identity not removed")
		}
	}
}

// removeKept removes the session ended generation p kept, if it is still
// there, marked as ours (kr) so its disappearance is not taken for a kill
// by hand, and confirms it gone.
func (m *Manager) removeKept(ctx context.Context, p fence.Published, kr killReason) error {
	if _, present := m.sessionOf(p); !present {
		return nil
	}
	life := m.lifeOf(p.ServerPID, p.ServerStart)
	m.markKilling(life, p.TmuxID, kr)
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), compensateTimeout)
	defer cancel()
	err := m.killConfirm(kctx, life, p.TmuxID)
	m.doneKilling(life, p.TmuxID, err == nil)
	return err
}

// respawn starts the attempt's helper in the kept session: respawn-pane -k
// on its dead pane (same session, same $id and name; a human attached stays
// attached), then the new pane process's pid. A server life that changed
// since means the kept session is gone with its server: new-session then,
// under the name already recorded.
func (m *Manager) respawn(ctx context.Context, a *attempt, k *keptSession) error {
	life, ok := m.serverLife()
	if !ok || life != k.life {
		return m.spawn(ctx, a)
	}
	a.life, a.sent = life, true
	args := append([]string{"respawn-pane", "-k", "-t", k.paneID, "--"}, m.helperArgv(a)...)
	if _, err := m.commandIn(ctx, life, args...); err != nil {
		var ce *tmuxctl.CommandError
		if errors.As(err, &ce) {
			// tmux refused it (the kept session was removed meanwhile):
			// nothing was started, so start in a new session of that name.
			return m.spawn(ctx, a)
		}
		return m.spawnError(a, err)
	}
	// The previous generation's lines (its tail is in its ended verdict)
	// and tmux's dead-pane notice leave the pane's history: respawn keeps
	// the history, and tmux 3.3a's clear of the screen at the respawn can
	// push the lines still on it into the history (one cleared before the
	// respawn kept them). The next generation's output tail and activity
	// must be its own; its helper writes nothing before its gate opens,
	// which is after publish. A refusal (the pane went) shows below.
	_, _ = m.commandIn(ctx, life, "clear-history", "-t", k.paneID)
	m.fault.hit(FaultRespawned)
	a.tmuxID, a.paneID = k.tmuxID, k.paneID // from here undo removes the session
	// A pane that cannot be read now, or reads without its session, went
	// with its session a moment after the respawn (a kill, or one by hand,
	// racing this start): not the command's failure (spawn_failed) but
	// tmux's state moving under it — the attempt is left to recovery, and a
	// retry (the restarter's, or the caller's) decides from what is there.
	reply, err := m.commandIn(ctx, life, "display-message", "-p", "-t", k.paneID, "#{pane_pid}\t#{session_created}")
	if err != nil || len(reply.Lines) != 1 {
		a.uncertain = true
		return verdict.Errorf(verdict.CodeTmuxUnavailable, map[string]any{"pane": k.paneID},
			"respawned pane %s: no pid (%v); its session may have gone meanwhile", k.paneID, err)
	}
	f := strings.Split(reply.Lines[0], "\t")
	pid, err1 := strconv.Atoi(f[0])
	sec, err2 := strconv.ParseInt(f[len(f)-1], 10, 64)
	if err1 != nil || err2 != nil || len(f) != 2 {
		a.uncertain = true
		return verdict.Errorf(verdict.CodeTmuxUnavailable, map[string]any{"pane": k.paneID},
			"respawned pane %s: read %q, without its session: it went meanwhile", k.paneID, reply.Lines[0])
	}
	a.panePID, a.created, a.respawned = pid, time.Unix(sec, 0), true
	return nil
}

// dropSuperseded removes the session a waiting generation kept when the
// identity was started elsewhere (a create got there first, or the kept
// session was not reused): nothing will run in it again.
func (m *Manager) dropSuperseded(ctx context.Context, pub fence.Published) {
	old := pub.Superseded
	if old == nil || !old.Ended || (old.TmuxID == pub.TmuxID && old.ServerPID == pub.ServerPID &&
		old.ServerStart == pub.ServerStart) {
		return
	}
	if err := m.removeKept(ctx, *old, killReason{reason: verdict.ReasonOrphanCleanup}); err != nil {
		m.log.Warn().Err(err).Str("tmux_id", old.TmuxID).Msg("kept session of an earlier generation not removed")
	}
}

// restartRecord completes a restart's published verdict: its reason, the
// restart count and what it started from.
func restartRecord(rec *verdict.Record, r *restartOf) {
	rec.Reason = r.prev.Restart.Reason
	if rec.Reason == verdict.ReasonManualRestart {
		rec.Action = verdict.ActionRestart
	}
	rec.Restart = &verdict.RestartRef{Count: r.prev.Restart.Restarts + 1}
	rec.Evidence["previous_generation"] = r.prev.Generation
	rec.Evidence["previous_tmux_id"] = r.prev.TmuxID
	rec.Evidence["same_session"] = r.kept != nil
	if !r.prev.EndedAt.IsZero() {
		// Both times are the fence's own, of one transaction (MarkEndedNext).
		rec.Evidence["delay_ms"] = max(r.prev.Restart.Due.Sub(r.prev.EndedAt).Milliseconds(), 0)
	}
}

// yieldKept: another host's create won the identity while this host waited
// out its delay (the fence holds that host's generation, won, in place of
// p): the start p's ended verdict announced will not come here, and its kept
// session would stay forever with its dead pane (found outside-in). It is
// removed, and a stopped verdict (reason published_elsewhere, naming the
// host) tells the feed's readers.
func (m *Manager) yieldKept(ctx context.Context, p, won fence.Published) {
	rec := stoppedRecord(p, verdict.ActionEnd, verdict.ReasonPublishedElsewhere)
	rec.Evidence["host"] = won.Host
	rec.Evidence["published_generation"] = won.Generation
	if err := m.removeKept(ctx, p, killReason{reason: verdict.ReasonPublishedElsewhere, byKill: true}); err != nil {
		m.log.Warn().Err(err).Str("tmux_id", p.TmuxID).Msg("kept session of an identity another host runs not removed")
	}
	m.emit(ctx, rec)
}

// killWaiting is a kill of an identity whose generation has ended and waits
// for its next start: it stops for good (no restart) and the kept session
// is removed. ok is false when the identity was not waiting any more (its
// next generation started meanwhile: kill that one).
func (m *Manager) killWaiting(ctx context.Context, p fence.Published) (KillResult, bool, error) {
	next := fence.RestartNext{State: fence.RestartStopped, Failures: p.Restart.Failures}
	rec := stoppedRecord(p, verdict.ActionKill, verdict.ReasonKilledByRequest)
	ok, err := m.fence.SetRestart(ctx, p.Identity, p.Generation, p.Restart.State, next, &rec)
	if err != nil {
		return KillResult{}, true, verdict.Errorf(verdict.CodeFenceUnavailable, nil, "%w", err)
	}
	if !ok {
		return KillResult{}, false, nil
	}
	m.verdicts.Filed(rec)
	if err := m.removeKept(ctx, p, killReason{reason: verdict.ReasonKilledByRequest, byKill: true}); err != nil {
		return KillResult{}, true, verdict.Errorf(verdict.CodeTmuxUnavailable, nil, "kept session: %w", err)
	}
	m.waitCensusGone(ctx, p.TmuxID) // so that an ls right after the kill does not show it
	// The answer is the verdict this kill wrote: the ended one was written
	// when the generation ended, and announced a start that now never comes.
	return KillResult{Status: "killed", Verdict: rec}, true, nil
}

// waitingTarget returns the ended generation ref names when its identity
// has a restart state (waiting, stopped, gave up) and a kept session or a
// next start due: what kill and ls act on between two generations.
func (m *Manager) waitingTarget(ctx context.Context, ref Ref) (fence.Published, bool) {
	t, err := m.Resolve(ctx, ref)
	if err != nil || t.Published == nil || !t.Published.Ended || m.remote(t.Published) {
		return fence.Published{}, false
	}
	switch t.Published.Restart.State {
	case fence.RestartExited:
		return *t.Published, true
	case fence.RestartGaveUp:
		// Given up with its session still there (a daemon before the
		// give-up removed it, or one that died first): kill stops it.
		_, present := m.sessionOf(*t.Published)
		return *t.Published, present
	}
	return fence.Published{}, false
}

// keptRemoved handles the removal of a session that holds no running
// generation: when it was kept for an identity waiting out its delay, it
// was killed by hand (onRemoved passes no removal of ours: killmarks.go),
// and a session killed by hand is a stop: the identity is not started again.
func (m *Manager) keptRemoved(ctx context.Context, id string, life tmuxctl.ServerLife) {
	waiting, err := m.fence.RestartsDue(ctx, time.Time{})
	if err != nil {
		return
	}
	for _, p := range waiting {
		if p.TmuxID != id || p.ServerPID != life.PID || p.ServerStart != life.StartTime {
			continue
		}
		m.stopKeptGone(ctx, p)
	}
}

// stopKeptGone stops identity p, waiting for its next start, whose kept
// session was killed by hand: verdict stopped (action end, reason
// tmux_session_missing), no next start.
func (m *Manager) stopKeptGone(ctx context.Context, p fence.Published) {
	next := fence.RestartNext{State: fence.RestartStopped, Failures: p.Restart.Failures}
	rec := stoppedRecord(p, verdict.ActionEnd, verdict.ReasonTmuxSessionMissing)
	ok, err := m.fence.SetRestart(ctx, p.Identity, p.Generation, fence.RestartExited, next, &rec)
	if err != nil {
		m.log.Warn().Err(err).Str("tmux_id", p.TmuxID).Msg("kept session killed by hand: restart not cancelled")
	} else if ok {
		m.verdicts.Filed(rec)
	}
}

// keptGoneByHand reports whether waiting identity p's kept session is gone
// from its own server, which still runs (the census synced on it): removed
// by hand while no daemon watched — a stop, as when one does. A next start
// after the server's death has no kept session (a new one is made).
func (m *Manager) keptGoneByHand(p fence.Published) bool {
	if p.Restart.Reason == verdict.ReasonServerRestart || p.TmuxID == "" {
		return false
	}
	info, ok := m.census.Info()
	if !ok || !m.census.Synced() || info.PID != p.ServerPID || info.StartTime != p.ServerStart {
		return false
	}
	_, listed := m.census.ByID(p.TmuxID)
	return !listed
}

// clearArg makes the pane helper exit at once: the command recovery puts in a
// kept session's pane in place of an abandoned restart's helper.
const clearArg = "--clear-kept-pane"

// keptAttempt reports whether the abandoned attempt ab is a restart in the
// kept session s (its attempt name is the session's, not its own), and s is
// still the session of the identity's ended generation waiting for its next
// start, in server life life.
func (m *Manager) keptAttempt(ctx context.Context, ab fence.Reservation, s *census.Session, life tmuxctl.ServerLife) bool {
	if ab.AttemptName == "" || strings.Contains(ab.AttemptName, ab.ID) {
		return false
	}
	p, ok, err := m.fence.PublishedFor(ctx, ab.Identity)
	// The attempt wears the kept session's name, or, when it was renamed by
	// hand, the name its generation was published under (keptOf).
	named := s.Name == ab.AttemptName || ok && ab.AttemptName == p.SessionName
	return err == nil && ok && named && p.Ended && p.Restart.State == fence.RestartExited && p.TmuxID == s.ID &&
		p.ServerPID == life.PID && p.ServerStart == life.StartTime
}

// clearKeptPane ends the abandoned attempt's helper in the kept session's
// pane with respawn-pane -k and a command that exits at once, so the pane is
// dead again and the session kept; ProcessesGone then proves the helper gone
// from the attempt's hold.
func (m *Manager) clearKeptPane(ctx context.Context, life tmuxctl.ServerLife, s *census.Session) error {
	if s.PaneID == "" {
		return errors.New("kept session has no pane id")
	}
	_, err := m.commandIn(ctx, life, "respawn-pane", "-k", "-t", s.PaneID, "--", m.cfg.HelperPath, "helper", clearArg)
	return err
}

// staleDeath reports a pane-death change that is not about generation p: the
// census saw the dead pane of an earlier generation kept for a restart (its
// generation tag is not p's: the restart's saga sets p's tags before it
// publishes, so a death read after them is p's own). The pane pid is not
// compared: a pane respawned by hand must still end its generation.
func staleDeath(s census.Session, p fence.Published) bool {
	g := s.Tags[TagGeneration]
	return g != "" && g != strconv.FormatUint(p.Generation, 10)
}
