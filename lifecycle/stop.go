package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/proctree"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// killProofWait bounds the wait for the proof after SIGKILL. SIGKILL cannot be
// caught, so only a process stuck in the kernel (uninterruptible sleep, e.g. a
// dead NFS server) outlives it; past this the stop is unresolved and the
// identity stays blocked (a later look may still prove it gone).
var killProofWait = 30 * time.Second // a var only so a test can reach "unproven" sooner

// stopRun is one stop of one generation in flight. Every observer of the
// generation's end (end detection, a create, a kill, recovery) joins the same
// run, so there is one sequence of signals and one verdict.
type stopRun struct {
	done  chan struct{}
	cause endCause       // what the run began as (talk reads it: stopInFlight)
	rec   verdict.Record // the ended verdict this run wrote (zero when another writer won)
	err   error
}

func stopKey(p fence.Published) string {
	return p.Identity.Digest() + "/" + strconv.FormatUint(p.Generation, 10)
}

// stopInFlight is the cause of the stop of p's generation running in this
// daemon, if one does.
func (m *Manager) stopInFlight(p fence.Published) (endCause, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.stops[stopKey(p)]; ok {
		return r.cause, true
	}
	return endCause{}, false
}

// stopGeneration starts the stop of p's generation (the model's monitor,
// saga.pml: a generation whose session is gone ends only once its agent is
// proven gone, killing it if need be), or joins the one in flight. The run
// belongs to the Manager, not to the caller: a create that stops waiting, or
// a kill whose client hangs up, leaves it running, and its progress is in the
// fence (BeginStop), so a daemon that dies mid-stop leaves it to the next.
func (m *Manager) stopGeneration(p fence.Published, cause endCause) *stopRun {
	key := stopKey(p)
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.stops[key]; ok {
		return r
	}
	r := &stopRun{done: make(chan struct{}), cause: cause}
	if m.stopCtx.Err() != nil {
		r.err = errInterrupted
		close(r.done)
		return r
	}
	m.stops[key] = r
	m.stopWG.Add(1)
	go func() {
		defer m.stopWG.Done()
		r.rec, r.err = m.runStop(m.stopCtx, p, cause)
		if r.err != nil || r.rec.Verdict != "" {
			// Counted once per generation: a run that found the generation
			// ended by another (end detection seeing the removal of a session
			// this Manager had just ended) wrote nothing and stopped nothing.
			m.met.stopped(stopOutcome(r.rec, r.err))
		}
		if r.err != nil && r.err != errInterrupted {
			m.log.Warn().Err(r.err).Str("session", p.SessionName).Msg("generation not proven gone")
		}
		if stopMissed(r.err) {
			defer m.missedEnd() // after the run is forgotten: the retry's stop is a new one
		}
		if r.err == nil {
			m.unwatchExit(p) // ended (by this run or another writer): its watch has nothing left to tell
		}
		m.mu.Lock()
		delete(m.stops, key)
		m.mu.Unlock()
		close(r.done)
	}()
	return r
}

// runStop is the stop sequence: record the stop (durable: its deadline
// survives a daemon restart), SIGTERM the tree when the stop is a kill request
// (otherwise tmux's hangup is the first signal), wait for the proof until the
// deadline, SIGKILL what is left, wait for the proof again; then write the one
// ended verdict. Without a proof it writes an unresolved verdict and the
// generation stays stopping: its identity is blocked.
func (m *Manager) runStop(ctx context.Context, p fence.Published, cause endCause) (verdict.Record, error) {
	timeout := time.Duration(p.StopTimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = fence.DefaultStopTimeout
	}
	fctx, cancel := fenceCtx(ctx)
	began := time.Now()
	p, ok, err := m.fence.BeginStop(fctx, p.Identity, p.Generation, cause.reason, began.Add(timeout))
	cancel()
	if err != nil || !ok {
		return verdict.Record{}, err // !ok: ended already, by another writer
	}
	// first: this call recorded the stop (not a predecessor or another observer).
	first := !p.Stopping.Since.Before(began.Add(-time.Millisecond))
	if p.Stopping.Reason != cause.reason {
		restart := cause.restart
		cause = causeOf(p.Stopping.Reason) // the stop began as something else: it stays that
		cause.restart = restart
	}
	hold := m.holdOf(ctx, p)
	if first && cause.term {
		if _, err := proctree.Signal(hold, unix.SIGTERM); err != nil {
			m.log.Debug().Err(err).Str("session", p.SessionName).Msg("SIGTERM to the generation")
		}
	}
	res := proctree.WaitGone(ctx, hold, p.Stopping.Deadline)
	killed := p.Stopping.Killed
	if res.State != proctree.Gone {
		if ctx.Err() != nil {
			return verdict.Record{}, errInterrupted
		}
		// The agent itself may be gone already, its processes left behind
		// (a setsid child): the SIGKILL is then not its end (endEvidence).
		cause.agentGone = p.PanePID > 0 && !proctree.LifeRunning(p.PanePID, p.PaneStart)
		_, kerr := proctree.Signal(hold, unix.SIGKILL)
		killed = true
		fctx, cancel := fenceCtx(ctx)
		_ = m.fence.StopKilled(fctx, p.Identity, p.Generation)
		cancel()
		res = proctree.WaitGone(ctx, hold, time.Now().Add(killProofWait))
		if res.State != proctree.Gone {
			if ctx.Err() != nil {
				return verdict.Record{}, errInterrupted
			}
			return verdict.Record{}, m.unproven(ctx, p, res, kerr)
		}
	}
	return m.finishEnd(ctx, p, cause, killed, res)
}

// stopOutcome names a finished run for skc_stops_total.
func stopOutcome(rec verdict.Record, err error) string {
	switch {
	case err == errInterrupted:
		return stopInterrupted
	case err != nil:
		return stopUnproven
	case rec.Evidence["sigkill_sent"] == true:
		return stopSigkill
	}
	return stopGone
}

// causeOf rebuilds the cause of a stop recorded in the fence (by this daemon's
// predecessor, or by another observer first).
func causeOf(reason string) endCause {
	switch reason {
	case verdict.ReasonKilledByRequest:
		return endCause{reason: reason, cleanup: true, actionKill: true, term: true}
	case verdict.ReasonOrphanCleanup:
		return endCause{reason: reason, cleanup: true}
	case verdict.ReasonManualRestart:
		return endCause{reason: reason, cleanup: true, term: true, manual: true}
	}
	return endCause{reason: reason}
}

// holdOf is what holds p's processes: the record made at spawn, told by the
// helper's start record whether it entered its cgroup. A generation published
// before the fence recorded holds (schema 4) is held by its helper's recorded
// pid and start time, the pane's process too.
func (m *Manager) holdOf(ctx context.Context, p fence.Published) proctree.Hold {
	h := proctree.Hold{Boot: p.BootID, PanePID: p.PanePID, PaneStart: p.PaneStart, Cgroup: p.Cgroup}
	pm, ok, err := m.fence.Postmortem(ctx, p.Identity, p.Generation)
	if err != nil || !ok {
		return h
	}
	h.InCgroup = pm.Cgroup != "" && pm.Cgroup == p.Cgroup
	if h.PanePID == 0 && pm.HelperPID > 0 {
		// boot/pidns/start/pidfs (fence's incarnation format)
		if f := strings.Split(pm.HelperIncarnation, "/"); len(f) == 4 {
			if st, err := strconv.ParseUint(f[2], 10, 64); err == nil {
				h.PanePID, h.PaneStart, h.Boot = pm.HelperPID, st, f[0]
			}
		}
	}
	return h
}

// unproven writes the verdict of a stop that could not prove its generation
// gone and returns the refusal that blocks the identity.
func (m *Manager) unproven(ctx context.Context, p fence.Published, res proctree.Result, killErr error) error {
	ev := map[string]any{"reservation_id": p.ReservationID, "processes": res.State.String(),
		"why": res.Why, "pids": res.PIDs, "sigkill_sent": true}
	if killErr != nil {
		ev["sigkill_error"] = killErr.Error()
	}
	err := stoppingError(p, verdict.CodeIdentityReservedUnknown, "processes of generation %d could not be proven gone (%s); "+
		"`skc-supervisor fence release --reservation %s` clears it once you have checked", res.Why, p.ReservationID)
	m.mu.Lock()
	_, seen := m.unprovenSaid[stopKey(p)]
	m.unprovenSaid[stopKey(p)] = err
	m.mu.Unlock()
	if !seen { // a later look (a create, the reconcile) tries again, but says it once
		m.emitUnproven(ctx, p, ev)
	}
	return err
}

// unprovenBefore is the refusal for a create whose wait ran out while p's
// stop tries again after an earlier stop already failed to prove its
// processes gone: identity_reserved_unknown, as the unresolved verdict said,
// not "not proven gone yet" (the retry waits up to killProofWait after its
// SIGKILL, longer than most waits). Known from this daemon's own unresolved
// verdict, or, after a restart, from the fence: SIGKILL sent longer ago than
// the proof waits for. Nil when neither holds.
func (m *Manager) unprovenBefore(p fence.Published) error {
	m.mu.Lock()
	err := m.unprovenSaid[stopKey(p)]
	m.mu.Unlock()
	if err != nil {
		return err
	}
	if s := p.Stopping; s != nil && s.Killed && time.Since(s.Deadline) > killProofWait {
		return stoppingError(p, verdict.CodeIdentityReservedUnknown, "processes of generation %d were not proven gone "+
			"%v after SIGKILL; `skc-supervisor fence release --reservation %s` clears it once you have checked",
			killProofWait, p.ReservationID)
	}
	return nil
}

func (m *Manager) emitUnproven(ctx context.Context, p fence.Published, ev map[string]any) {
	m.emit(ctx, verdict.Record{
		Action: verdict.ActionEnd, Outcome: verdict.OutcomeUnknown, Verdict: verdict.VerdictUnresolved,
		Reason: verdict.ReasonProcessesNotProvenGone, Code: verdict.CodeIdentityReservedUnknown,
		Identity: identityRef(p.Identity),
		Session:  &verdict.SessionRef{Name: p.SessionName, ID: p.TmuxID, Generation: p.Generation},
		Evidence: ev,
	})
}

// stoppingError is the refusal of a create (or the error of a kill) while the
// identity's generation is stopping.
func stoppingError(p fence.Published, code, format string, args ...any) error {
	return verdict.Errorf(code, map[string]any{
		"stopping": true, "reservation_id": p.ReservationID, "generation": p.Generation,
		"session_name": p.SessionName,
	}, format, append([]any{p.Generation}, args...)...)
}

// finishEnd ends a generation whose processes are proven gone: its evidence is
// assembled while a dead pane may still show (endEvidence), what is left of
// its session is removed and confirmed gone, and only then is the ended
// verdict written with the compare-and-set MarkEnded, which frees the
// identity. In that order a create that reserves the moment the identity is
// free finds no session of it (the model's n <= 1; marking first let it make
// a second session beside the dead one, the shape spin finds with
// -DRESTART_TWO_STEPS). The removal, seen by the census, joins this run
// (onRemoved finds it in m.stops) and writes nothing; a daemon that dies
// between the kill and MarkEnded leaves the stop recorded (BeginStop), and the
// next one finds the session absent, the processes gone, and writes the one
// verdict. A session that cannot be removed leaves the generation stopping:
// the next look (a create, a kill, the reconcile) tries again.
func (m *Manager) finishEnd(ctx context.Context, p fence.Published, cause endCause, killed bool, res proctree.Result) (verdict.Record, error) {
	if rec, ok, err := m.fileUnfiled(ctx, p); ok {
		return rec, err // assembled before, when the fence could not take it (unfiled.go)
	}
	sess, present := m.sessionOf(p)
	if cause.exit != nil && !present {
		// Read from the exited process, but its session is gone already: the
		// exit was the hangup of its removal, which the end is (onRemoved's).
		cause = endCause{reason: m.goneReason(p)}
	}
	if m.killWaits(p) {
		cause.killed = true // a kill waits for this stop: nothing starts after it
	}
	rec, next, gaveUp := m.planEnd(ctx, p, cause, sess, present, killed, res)
	// A restart keeps the session (its dead pane is respawned with the next
	// generation): only a next start due after the agent's own end or a
	// restart request, in the server life it ran in. Any other end removes
	// what is left of the session before the identity is freed, and the
	// output tail (read from the pane while it still shows) rides in the
	// same pipeline as the kill: one round trip for both.
	keep := next.State == fence.RestartExited && next.Reason != verdict.ReasonServerRestart
	wantTail := present && rec.OutputTail == "" && cause.reason != verdict.ReasonAgentPaneMissing
	switch {
	case present && !keep:
		tail, gone, err := m.removeEndedSessionRetry(ctx, p, killReason{reason: cause.reason}, wantTail)
		if err != nil {
			return verdict.Record{}, err
		}
		if gone != "" && cause.exit != nil {
			// The pipeline found no session to read or kill: it went before
			// the agent's exit was acted on, as above.
			rec, next, gaveUp = m.planEnd(ctx, p, endCause{reason: gone}, census.Session{}, false, killed, res)
		} else if wantTail {
			rec.OutputTail = tail
		}
	case wantTail:
		rec.OutputTail = m.OutputTail(ctx, m.lifeOf(p.ServerPID, p.ServerStart), p.TmuxID)
	}
	return m.fileEnd(ctx, p, rec, next, gaveUp, keep)
}

// planEnd is an end's verdict (endEvidence, with the proof) and what comes
// after it (planNext: a restart, or none).
func (m *Manager) planEnd(ctx context.Context, p fence.Published, cause endCause, sess census.Session, present, killed bool, res proctree.Result) (verdict.Record, fence.RestartNext, *verdict.Record) {
	rec := m.endEvidence(ctx, p, cause, sess, present, killed)
	rec.Evidence["proof"] = res.Why
	next, gaveUp := planNext(p, rec, cause, time.Now())
	return rec, next, gaveUp
}

// fileEnd writes the ended verdict with the compare-and-set MarkEnded, which
// frees the identity (or hands it to its restart), and tidies after it.
func (m *Manager) fileEnd(ctx context.Context, p fence.Published, rec verdict.Record, next fence.RestartNext, gaveUp *verdict.Record, keep bool) (verdict.Record, error) {
	start := time.Now()
	ok, filed, err := m.fence.MarkEndedNext(context.WithoutCancel(ctx), p.Identity, p.Generation, rec, next, gaveUp)
	m.met.fenceOp(fenceOpEnd, start)
	if err != nil {
		m.keepUnfiled(p, unfiledEnd{rec: rec, next: next, gaveUp: gaveUp, keep: keep})
		return verdict.Record{}, err
	}
	if ok {
		m.verdicts.Filed(filed)
		m.met.ended(filed.ExitKind)
		if gaveUp != nil {
			m.verdicts.Filed(*gaveUp)
		}
		if endedHook != nil {
			endedHook(p)
		}
		if keep {
			m.fault.hit(FaultRestartDecided)
		}
	}
	if err := proctree.RemoveCgroup(p.Cgroup); err != nil {
		m.log.Debug().Err(err).Str("cgroup", p.Cgroup).Msg("cgroup not removed")
	}
	if ok && next.State == fence.RestartExited {
		m.scheduleRestart(p.Identity)
	}
	return filed, nil
}

// endedHook, when a test sets it, runs right after MarkEnded freed p's
// identity: the first moment a create can reserve it again.
var endedHook func(p fence.Published)

// removeEndedSessionRetry is removeEndedSession, tried again a few times a
// second apart: a tmux command that timed out on a busy server should not leave
// the generation stopping until the next reconcile. With wantTail, the pane's
// output tail is captured in the kill's pipeline (until one try got it) and
// returned.
func (m *Manager) removeEndedSessionRetry(ctx context.Context, p fence.Published, kr killReason, wantTail bool) (tail, gone string, err error) {
	for try := 0; try < 3; try++ {
		var t, g string
		t, g, err = m.removeEndedSessionTail(ctx, p, kr, wantTail && tail == "")
		if tail == "" {
			tail = t
		}
		if gone == "" {
			gone = g
		}
		if err == nil || !sleepCtx(ctx, time.Second) {
			return tail, gone, err
		}
	}
	return tail, gone, err
}

// removeEndedSession kills the session of a generation being ended (its pane
// dead, kept by remain-on-exit) and confirms it gone, its followers detached
// first. kr tells end detection, which sees the removal, who removed it.
func (m *Manager) removeEndedSession(ctx context.Context, p fence.Published, kr killReason) error {
	_, _, err := m.removeEndedSessionTail(ctx, p, kr, false)
	return err
}

// removeEndedSessionTail is removeEndedSession that, with wantTail, first
// captures the pane's output tail in the same pipeline as the kill (tmux runs
// the capture before the kill) and returns it ("" when not read); gone is
// then the reason of a session the capture found gone already (before the
// kill): tmux_session_missing, or server_exited for another server life.
func (m *Manager) removeEndedSessionTail(ctx context.Context, p fence.Published, kr killReason, wantTail bool) (tail, gone string, err error) {
	life := m.lifeOf(p.ServerPID, p.ServerStart)
	m.markKilling(life, p.TmuxID, kr)
	m.DetachFollowers(life, p.TmuxID)
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), compensateTimeout)
	defer cancel()
	var before [][]string
	if wantTail {
		before = [][]string{tailCapture(m.agentTarget(kctx, p))}
	}
	replies, errs, err := m.killConfirmAfter(kctx, life, p.TmuxID, before)
	m.doneKilling(life, p.TmuxID, err == nil)
	if wantTail {
		switch e := errs[0]; {
		case e == nil:
			tail = tailOf(replies[0].Lines)
		case errors.Is(e, tmuxctl.ErrLifeChanged):
			gone = verdict.ReasonServerExited
		case isCommandError(e):
			gone = verdict.ReasonTmuxSessionMissing
		default:
			m.log.Debug().Err(e).Str("target", p.TmuxID).Msg("output tail not captured")
		}
	}
	if err != nil {
		return tail, gone, fmt.Errorf("session %s of generation %d not removed (its processes are proven gone; it stays stopping): %w", p.TmuxID, p.Generation, err)
	}
	return tail, gone, nil
}

// sessionOf returns the generation's session when the census still lists it
// in the server life it was published in.
func (m *Manager) sessionOf(p fence.Published) (census.Session, bool) {
	info, ok := m.census.Info()
	if !ok || info.PID != p.ServerPID || info.StartTime != p.ServerStart {
		return census.Session{}, false
	}
	return m.census.ByID(p.TmuxID)
}

// endEvidence assembles an ended verdict once the generation's processes are
// proven gone and before its session (a dead pane, when present is true) is
// removed: this is the one place where the pane's exit is read into the
// verdict (its output tail finishEnd captures in the kill's pipeline, after
// this: a dead pane shows no more output). The pane's process was the agent itself (the helper execs
// it), so the exit is what tmux kept of the dead pane: pane_dead_status or
// pane_dead_signal (agentEndOf); or, when the helper could not exec the agent,
// the postmortem it recorded (127 or 126); else our own SIGKILL, when it
// found the agent itself still running (not only processes it left). A session
// that is gone (killed by hand, the server's death) took its pane's exit
// with it: the kind is then owner_lost.
func (m *Manager) endEvidence(ctx context.Context, p fence.Published, cause endCause, sess census.Session, present, killed bool) verdict.Record {
	// The agent's pane is gone (agent_pane_missing): what its session's
	// panes show is a person's, not the agent's end.
	end := m.agentEndOf(ctx, p, sess, present && cause.reason != verdict.ReasonAgentPaneMissing, cause.exit)
	rec := endedRecord(p, cause, end)
	if p.Stopping != nil {
		rec.Evidence["stop_since"] = p.Stopping.Since.UTC().Format(time.RFC3339Nano)
	}
	rec.Evidence["sigkill_sent"] = killed
	if rec.Exit != nil {
		return rec
	}
	if killed && !cause.agentGone {
		rec.Exit = &verdict.Exit{Signal: "SIGKILL"}
		rec.Evidence["exit_source"] = "stop_sigkill"
	} else {
		rec.Exit = &verdict.Exit{} // status null: unknown
	}
	return rec
}
