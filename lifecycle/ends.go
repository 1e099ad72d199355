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
	restart    bool   // found at start: a known exit means process_postmortem
	actionKill bool   // a kill request, not end detection
	term       bool   // SIGTERM the generation's processes first (a kill request)
	tail       string // skc.output.tail, captured while the pane still existed (OutputTail)
	manual     bool   // a restart request: the next generation starts now, whatever the policy
	killed     bool   // a kill waits for this stop (askKill): it stops the identity, whatever the cause
	// exit: the agent's exit, read from the exited process itself (endAtExit);
	// nil when the end is to be read from tmux's dead pane.
	exit *agentEnd
	// agentGone: when the stop sent its SIGKILL, the agent itself (the
	// pane's process) had already exited; the SIGKILL reached only the
	// processes it left, and its own exit stays unknown.
	agentGone bool
}

// Run consumes the census change feed until ctx is done and writes one ended
// verdict for every published generation whose session disappears. Ends are
// handled concurrently (each may wait briefly for tmux to fill in its dead
// pane's exit status), and Run returns
// only once every handler has returned.
func (m *Manager) Run(ctx context.Context) error {
	sub := m.census.Subscribe(1024)
	defer sub.Close()
	m.detecting.Store(true)
	defer m.detecting.Store(false)
	var wg sync.WaitGroup
	defer wg.Wait()
	if m.pool != nil {
		wg.Add(1)
		go func() { defer wg.Done(); m.pool.run(ctx) }()
	} else {
		wg.Add(1)
		go func() { defer wg.Done(); m.sweepStandbys(ctx) }()
	}
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
				switch {
				case ch.Session.PaneDead:
					wg.Add(1)
					go func() { defer wg.Done(); m.onPaneDead(ctx, ch) }()
				case ch.PaneChanged:
					wg.Add(1)
					go func() { defer wg.Done(); m.onPaneChanged(ctx, ch) }()
				}
			case census.Resync:
				m.reconcile(ctx)
			}
		}
	}
}

// onRemoved starts the stop of the published generation whose session was
// removed: the fence's record names the same tmux id in the same server life
// and is not yet ended. The session is gone but its processes may not be (tmux
// sent them a hangup; an agent may take seconds to save its state, or ignore
// it): the generation is stopping until they are proven gone (stop.go). The
// removed session's tags are not trusted for this — the census may not have
// seen them yet (an agent that exits at once) and a human may have changed them.
func (m *Manager) onRemoved(ctx context.Context, ch census.Change) {
	s := ch.Session
	if removedHook != nil {
		removedHook(ch)
	}
	k, ours := m.killingReason(ch.Life, s.ID)
	defer m.seenRemoved(ch.Life, s.ID)
	if ours && k.byKill {
		return
	}
	pub, ok := m.publishedByTmuxID(ctx, s.ID, ch.Life)
	if !ok {
		if !ours && ch.Reason != census.ReasonServerExited && ch.Reason != census.ReasonLifeChanged {
			m.keptRemoved(ctx, s.ID, ch.Life)
		}
		return
	}
	cause := endCause{reason: verdict.ReasonTmuxSessionMissing}
	if ch.Reason == census.ReasonServerExited || ch.Reason == census.ReasonLifeChanged {
		cause.reason = verdict.ReasonServerExited
	}
	if k, ok := m.killingReason(ch.Life, s.ID); ok {
		// Read again: a removal of ours may have begun since (a kill
		// racing this change); its reason is the end's.
		cause = endCause{reason: k.reason, cleanup: true}
	}
	m.stopGeneration(pub, cause)
}

// removedHook, when a test sets it, runs as end detection begins to handle
// a session's removal: a test can hold the change back, as a busy daemon's
// scheduling may.
var removedHook func(ch census.Change)

// onPaneDead stops a published generation whose agent's pane is dead (kept by
// the remain-on-exit the saga sets on every managed window): "session exists
// but the agent is dead" must not pass for a live session. Its reason is
// agent_exited; the session is removed once the ended verdict is written.
func (m *Manager) onPaneDead(ctx context.Context, ch census.Change) {
	pub, ok := m.publishedByTmuxID(ctx, ch.Session.ID, ch.Life)
	if !ok || m.notAgentsDeath(ctx, ch.Session, pub) {
		return // the dead pane of the generation before (restart), or a person's pane (agentpane.go)
	}
	m.stopGeneration(pub, endCause{reason: verdict.ReasonAgentExited})
}

// endIfDeadAtPublish starts the stop of a generation whose pane the census
// already shows dead when it is published: a helper that could not start
// dies before the publication, and end detection, which saw that death while
// no generation was published in the session, ignored it — nothing else
// would end the generation before the next reconcile. A death the census sees
// later is onPaneDead's; both join the same stop.
func (m *Manager) endIfDeadAtPublish(p fence.Published) {
	if s, ok := m.sessionOf(p); ok && s.PaneDead && !m.notAgentsDeath(context.Background(), s, p) {
		m.stopGeneration(p, endCause{reason: verdict.ReasonAgentExited})
	}
}

// publishedByTmuxID finds the published, not-ended generation living in session id
// of server life life: one indexed fence read (fence.PublishedByTmux), since it
// runs for every session the census sees removed — thousands in a mass end.
func (m *Manager) publishedByTmuxID(ctx context.Context, id string, life tmuxctl.ServerLife) (fence.Published, bool) {
	p, ok, err := m.fence.PublishedByTmux(ctx, life.PID, life.StartTime, id)
	if err != nil {
		m.log.Warn().Err(err).Str("tmux_id", id).Msg("fence lookup by tmux session failed")
		m.missedEnd()
		return fence.Published{}, false
	}
	return p, ok
}

// reconcile re-checks every published, not-ended generation against live tmux
// (Inspect re-reads it: the cache alone may not have seen a session published a
// moment ago) after the feed lost changes, or after ends were missed
// (endretry.go). It reports whether it could look at every generation; when it
// could not, it arms the retry itself.
func (m *Manager) reconcile(ctx context.Context) bool {
	pubs, err := m.fence.Identities(ctx)
	if err != nil {
		m.log.Warn().Err(err).Msg("reconcile: fence identities unreadable")
		m.missedEnd()
		return false
	}
	ok := true
	for _, p := range pubs {
		if p.Ended {
			continue
		}
		if p.Stopping != nil {
			m.stopGeneration(p, causeOf(p.Stopping.Reason))
			continue
		}
		auth, sess, err := m.inspectPublished(ctx, p)
		switch {
		case err != nil:
			ok = false
		case auth == census.Absent:
			m.stopGeneration(p, endCause{reason: m.goneReason(p)})
		case auth == census.Authoritative && sess != nil && sess.PaneDead && !m.notAgentsDeath(ctx, *sess, p):
			m.stopGeneration(p, endCause{reason: verdict.ReasonAgentExited})
		case auth == census.Authoritative && sess != nil && !sess.PaneDead && sess.PanePID != p.PanePID:
			m.endIfPaneMissing(ctx, p)
		}
	}
	if !ok && ctx.Err() == nil {
		m.missedEnd()
	}
	return ok
}

// goneReason says why a published session found absent is gone: its whole server
// when the census now sees another server life, else the session alone.
func (m *Manager) goneReason(p fence.Published) string {
	if m.evidenceLife(p.ServerPID, p.ServerStart) == (tmuxctl.ServerLife{}) {
		return verdict.ReasonServerExited
	}
	return verdict.ReasonTmuxSessionMissing
}

// errInterrupted: a stop was cut short by shutdown; its progress is in the
// fence, and the next daemon's start continues it.
var errInterrupted = errors.New("lifecycle: stop interrupted by shutdown")

// endedRecord is the ended verdict of a generation proven gone, from its
// cause and its agent's exit (the zero agentEnd when none is known);
// endEvidence finds the exit and completes the record.
func endedRecord(pub fence.Published, cause endCause, end agentEnd) verdict.Record {
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
	if cause.manual {
		rec.Action = verdict.ActionRestart
	}
	switch {
	case end.source != "" && end.helperOnly:
		rec.ExitKind = verdict.ExitKindOwnerLost
		rec.Outcome = verdict.OutcomeUnknown
		rec.Exit = &verdict.Exit{Status: end.status, Signal: end.signal}
		rec.Evidence["exit_source"] = end.source
	case end.source != "":
		rec.ExitKind = verdict.ExitKindExit
		if cause.restart {
			rec.ExitKind = verdict.ExitKindProcessPostmortem
		}
		rec.Exit = &verdict.Exit{Status: end.status, Signal: end.signal}
		rec.Evidence["exit_source"] = end.source
		if end.read != "" {
			rec.Evidence["exit_read"] = end.read
		}
		if end.pid > 0 {
			rec.Evidence["agent_pid"] = end.pid
		}
		if !end.started.IsZero() {
			rec.Evidence["started_at"] = end.started.UTC().Format(time.RFC3339Nano)
		}
		if !end.ended.IsZero() {
			rec.Evidence["ended_at"] = end.ended.UTC().Format(time.RFC3339Nano)
		}
	default:
		rec.ExitKind = verdict.ExitKindOwnerLost
		rec.Outcome = verdict.OutcomeUnknown
	}
	if cause.cleanup {
		// We removed it; the agent's exit (how it answered our SIGTERM) is
		// still recorded when known.
		rec.ExitKind, rec.Outcome = verdict.ExitKindCleanup, verdict.OutcomeSuccess
	}
	return rec
}
