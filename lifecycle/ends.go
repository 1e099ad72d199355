package lifecycle

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// endCause says how a published generation's end was observed; it selects the
// ended verdict's exit kind and reason.
type endCause struct {
	reason     string // verdict.Reason…
	cleanup    bool   // we removed it: exit kind cleanup
	restart    bool   // found at start: a postmortem means process_postmortem
	waitForPM  bool   // give the helper a moment to record its postmortem
	actionKill bool   // a kill request, not end detection
	tail       string // skc.output.tail, captured while the pane still existed (OutputTail)
}

// Run consumes the census change feed until ctx is done and writes one ended
// verdict for every published generation whose session disappears. Ends are
// handled concurrently (each may wait briefly for a postmortem), and Run returns
// only once every handler has returned.
func (m *Manager) Run(ctx context.Context) error {
	sub := m.census.Subscribe(1024)
	defer sub.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ch, ok := <-sub.C():
			if !ok {
				return nil
			}
			switch ch.Kind {
			case census.Removed:
				wg.Add(1)
				go func() { defer wg.Done(); m.onRemoved(ctx, ch) }()
			case census.Added, census.Changed:
				if ch.Session.PaneDead {
					wg.Add(1)
					go func() { defer wg.Done(); m.onPaneDead(ctx, ch) }()
				}
			case census.Resync:
				m.reconcile(ctx)
			}
		}
	}
}

// onRemoved ends the published generation whose session was removed: the fence's
// record names the same tmux id in the same server life and is not yet ended. The
// removed session's tags are not trusted for this — the census may not have seen
// them yet (an agent that exits at once) and a human may have changed them.
func (m *Manager) onRemoved(ctx context.Context, ch census.Change) {
	s := ch.Session
	pub, ok := m.publishedByTmuxID(ctx, s.ID, ch.Life)
	if !ok {
		return
	}
	cause := endCause{reason: verdict.ReasonTmuxSessionMissing, waitForPM: true}
	if ch.Reason == census.ReasonServerExited || ch.Reason == census.ReasonLifeChanged {
		cause.reason = verdict.ReasonServerExited
	}
	if k, ok := m.killingReason(s.ID); ok {
		if k.byKill {
			return // Kill writes this end itself, with the verdict it returns
		}
		cause = endCause{reason: k.reason, cleanup: true}
	}
	if _, err := m.endPublished(ctx, pub, cause); err != nil {
		m.log.Warn().Err(err).Str("tmux_id", s.ID).Msg("ended verdict not written")
	}
}

// onPaneDead ends a published generation whose agent's pane is dead but kept by
// tmux (remain-on-exit set in the server's configuration): "session exists but
// the agent is dead" must not pass for a live session.
func (m *Manager) onPaneDead(ctx context.Context, ch census.Change) {
	pub, ok := m.publishedByTmuxID(ctx, ch.Session.ID, ch.Life)
	if !ok {
		return
	}
	if err := m.endDeadPane(ctx, pub, ch.Life, false); err != nil {
		m.log.Warn().Err(err).Str("tmux_id", ch.Session.ID).Msg("dead pane not ended")
	}
}

// endDeadPane writes the ended verdict (reason agent_exited, from the postmortem)
// of a session whose pane is dead, then removes the session, which can never run
// the agent again.
func (m *Manager) endDeadPane(ctx context.Context, pub fence.Published, life tmuxctl.ServerLife, restart bool) error {
	cause := endCause{reason: verdict.ReasonAgentExited, waitForPM: true, restart: restart,
		tail: m.OutputTail(ctx, life, pub.TmuxID)}
	if _, err := m.endPublished(ctx, pub, cause); err != nil {
		return err
	}
	m.markKilling(pub.TmuxID, killReason{reason: verdict.ReasonAgentExited})
	defer m.unmarkKilling(pub.TmuxID)
	m.DetachFollowers(life, pub.TmuxID)
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), compensateTimeout)
	defer cancel()
	return m.killConfirm(kctx, life, pub.TmuxID)
}

// publishedByTmuxID finds the published, not-ended generation living in session id
// of server life life: one indexed fence read (fence.PublishedByTmux), since it
// runs for every session the census sees removed — thousands in a mass end.
func (m *Manager) publishedByTmuxID(ctx context.Context, id string, life tmuxctl.ServerLife) (fence.Published, bool) {
	p, ok, err := m.fence.PublishedByTmux(ctx, life.PID, life.StartTime, id)
	if err != nil {
		m.log.Warn().Err(err).Str("tmux_id", id).Msg("fence lookup by tmux session failed")
		return fence.Published{}, false
	}
	return p, ok
}

// reconcile re-checks every published, not-ended generation against live tmux
// (Inspect re-reads it: the cache alone may not have seen a session published a
// moment ago) after the feed lost changes.
func (m *Manager) reconcile(ctx context.Context) {
	pubs, err := m.fence.Identities(ctx)
	if err != nil {
		m.log.Warn().Err(err).Msg("reconcile: fence identities unreadable")
		return
	}
	for _, p := range pubs {
		if p.Ended {
			continue
		}
		auth, _, err := m.inspectPublished(ctx, p)
		if err != nil || auth != census.Absent {
			continue
		}
		cause := endCause{reason: m.goneReason(p), waitForPM: true}
		if _, err := m.endPublished(ctx, p, cause); err != nil {
			m.log.Warn().Err(err).Msg("reconcile: ended verdict not written")
		}
	}
}

// goneReason says why a published session found absent is gone: its whole server
// when the census now sees another server life, else the session alone.
func (m *Manager) goneReason(p fence.Published) string {
	if m.evidenceLife(p.ServerPID, p.ServerStart) == (tmuxctl.ServerLife{}) {
		return verdict.ReasonServerExited
	}
	return verdict.ReasonTmuxSessionMissing
}

// errInterrupted: the wait for a postmortem was cut short by shutdown; nothing is
// written, and the next start's recovery writes the end instead.
var errInterrupted = errors.New("lifecycle: end detection interrupted")

// endPublished marks a published generation ended with its one ended verdict. The
// mark is a compare-and-set on the generation, so racing observers (end detection,
// a create that found it gone, recovery, a kill) write one verdict between them;
// the record returned is the one this call wrote (zero when another won).
func (m *Manager) endPublished(ctx context.Context, pub fence.Published, cause endCause) (verdict.Record, error) {
	pm, havePM, err := m.postmortem(ctx, pub, cause.waitForPM && !cause.cleanup)
	if err != nil {
		return verdict.Record{}, err
	}
	rec := endedRecord(pub, cause, pm, havePM)
	ok, filed, err := m.fence.MarkEnded(context.WithoutCancel(ctx), pub.Identity, pub.Generation, rec)
	if err != nil {
		return verdict.Record{}, err
	}
	if ok {
		m.verdicts.Filed(filed)
		m.met.ended(filed.ExitKind)
	}
	return filed, nil
}

// postmortem reads the helper's record of its agent's end. A helper writes it just
// before it exits, which may be a moment after tmux saw the pane go, so when asked
// it waits briefly — but not for a helper proven dead without one (SIGKILLed: the
// answer is owner_lost at once).
func (m *Manager) postmortem(ctx context.Context, pub fence.Published, wait bool) (fence.Postmortem, bool, error) {
	deadline := time.Now().Add(postmortemGrace)
	for last := false; ; {
		pm, ok, err := m.fence.Postmortem(ctx, pub.Identity, pub.Generation)
		switch {
		case err == nil && ok && !pm.EndedAt.IsZero():
			return pm, true, nil
		case !wait || last || time.Now().After(deadline):
			return fence.Postmortem{}, false, nil
		case err == nil && ok && pm.HelperPID != 0 &&
			fence.Liveness(pm.HelperPID, pm.HelperIncarnation) == fence.Dead:
			last = true // read once more: it may have written just before exiting
			continue
		}
		if !sleepCtx(ctx, pollInterval) {
			return fence.Postmortem{}, false, errInterrupted
		}
	}
}

func endedRecord(pub fence.Published, cause endCause, pm fence.Postmortem, havePM bool) verdict.Record {
	rec := verdict.Record{
		Action: verdict.ActionEnd, Outcome: verdict.OutcomeSuccess, Reason: cause.reason,
		Verdict:    verdict.VerdictEnded,
		Identity:   identityRef(pub.Identity),
		Session:    &verdict.SessionRef{Name: pub.SessionName, ID: pub.TmuxID, Generation: pub.Generation},
		Evidence:   map[string]any{"reservation_id": pub.ReservationID},
		OutputTail: cause.tail,
	}
	if cause.actionKill {
		rec.Action = verdict.ActionKill
	}
	switch {
	case cause.cleanup:
		rec.ExitKind = verdict.ExitKindCleanup
	case havePM:
		rec.ExitKind = verdict.ExitKindExit
		if cause.restart {
			rec.ExitKind = verdict.ExitKindProcessPostmortem
		}
		rec.Exit = &verdict.Exit{Status: pm.ExitStatus, Signal: pm.Signal}
		rec.Evidence["agent_pid"] = pm.AgentPID
		rec.Evidence["started_at"] = pm.StartedAt.UTC().Format(time.RFC3339Nano)
		rec.Evidence["ended_at"] = pm.EndedAt.UTC().Format(time.RFC3339Nano)
		rec.Evidence["utime_ns"] = int64(pm.UserTime)
		rec.Evidence["stime_ns"] = int64(pm.SystemTime)
		rec.Evidence["maxrss_kb"] = pm.MaxRSS
	default:
		rec.ExitKind = verdict.ExitKindOwnerLost
		rec.Outcome = verdict.OutcomeUnknown
		rec.Exit = &verdict.Exit{}
	}
	return rec
}
