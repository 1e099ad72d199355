package lifecycle

import (
	"context"
	"strconv"
	"strings"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// The agent's pane among a person's panes.
//
// The census lists each session with its *active* pane (list-sessions'
// pane_* formats). That is the agent's own until a person attached opens
// another — split-window, new-window — which then becomes the active one.
// Every managed window has remain-on-exit, so that pane dying (the person's
// shell exiting) showed as a dead pane in the agent's session: the healthy
// agent was stopped as if it had exited, with the person's status, and a
// restart respawned the person's pane. The generation's pane is the one
// whose process is the generation's pane pid (the helper execs the agent in
// place, so the pid is the agent's): a dead pane with another pid is found
// again among the session's panes (one list-panes) before anything is
// decided from it.

// agentPaneFormat reads each pane of a session: id, pid, dead.
const agentPaneFormat = "#{pane_id}\t#{pane_pid}\t#{pane_dead}"

// agentPaneIn finds generation p's pane in its session: its id and whether
// it is dead. found is false when no pane of the session has p's pane pid (a
// pane respawned or killed by hand), or when tmux cannot be asked; listed
// says whether tmux listed the session's panes at all (false: the session
// is gone, or tmux did not answer).
func (m *Manager) agentPaneIn(ctx context.Context, p fence.Published) (paneID string, dead, found, listed bool) {
	if p.PanePID <= 0 || p.TmuxID == "" {
		return "", false, false, false
	}
	rep, err := m.commandIn(ctx, m.lifeOf(p.ServerPID, p.ServerStart), "list-panes", "-s", "-t", p.TmuxID, "-F", agentPaneFormat)
	if err != nil {
		return "", false, false, false
	}
	for _, l := range rep.Lines {
		f := strings.Split(l, "\t")
		if len(f) == 3 && f[1] == strconv.Itoa(p.PanePID) {
			return f[0], f[2] == "1", true, true
		}
	}
	return "", false, false, len(rep.Lines) > 0
}

// notAgentsDeath reports a dead pane the census shows in p's session that is
// not p's agent's end: the dead pane of the generation before, kept for this
// one (staleDeath), or another pane than p's — one a person opened, now the
// active one — while p's own pane still lives. A dead pane with another pid
// whose session has no pane of p's pid is p's end all the same (its pane was
// respawned or killed by hand).
func (m *Manager) notAgentsDeath(ctx context.Context, s census.Session, p fence.Published) bool {
	if staleDeath(s, p) {
		return true
	}
	if p.PanePID <= 0 || s.PanePID == p.PanePID {
		return false
	}
	_, dead, found, _ := m.agentPaneIn(ctx, p)
	return found && !dead
}

// agentPaneTarget is the tmux target of p's pane in session s for reading its
// end: s's listed pane when it is p's, else p's pane found among the
// session's, else the session (its active pane, as before).
func (m *Manager) agentPaneTarget(ctx context.Context, s census.Session, p fence.Published) string {
	if s.PaneID != "" && (p.PanePID <= 0 || s.PanePID == p.PanePID) {
		return s.PaneID
	}
	if id, _, found, _ := m.agentPaneIn(ctx, p); found {
		return id
	}
	if s.PaneID != "" {
		return s.PaneID
	}
	return p.TmuxID
}

// agentTarget is the tmux target of p's pane for a read at its end (the
// output tail): agentPaneTarget of the session the census lists, with no
// round trip when that lists p's pane (the common case, on every end); p's
// session when the census does not list it.
func (m *Manager) agentTarget(ctx context.Context, p fence.Published) string {
	s, ok := m.sessionOf(p)
	if !ok {
		return p.TmuxID
	}
	return m.agentPaneTarget(ctx, s, p)
}

// endIfPaneMissing starts the stop of generation p (agent_pane_missing) when
// tmux lists its session without p's pane: the pane was killed or respawned
// by hand while its agent lives on (it ignored the hangup, or takes its time
// to exit), so nothing would tell its end — the exit watch fires only when
// the agent exits — and input meant for it would go to a person's program in
// its place. It reports whether it did; a session tmux did not list (gone:
// its removal is the census's to tell) or that holds p's pane is left alone.
func (m *Manager) endIfPaneMissing(ctx context.Context, p fence.Published) bool {
	if p.PanePID <= 0 || p.Ended {
		return false
	}
	_, _, found, listed := m.agentPaneIn(ctx, p)
	return m.paneGone(p, found, listed)
}

// paneGone starts the stop of p when agentPaneIn listed its session without
// its pane (found, listed are its answers), and reports whether it did. The
// session's output streams end now (session_ended), not when the stop
// removes the session: until then they would carry a person's program.
func (m *Manager) paneGone(p fence.Published, found, listed bool) bool {
	if found || !listed || p.Ended || p.PanePID <= 0 {
		return false
	}
	m.stopGeneration(p, endCause{reason: verdict.ReasonAgentPaneMissing})
	life := m.lifeOf(p.ServerPID, p.ServerStart)
	m.talk.spawn(func() { m.DetachFollowers(life, p.TmuxID) })
	return true
}

// onPaneChanged looks at a session whose listed (active) pane now runs
// another process than the agent of the generation published there: a
// person's pane made the active one (the agent's is still there), or the
// agent's pane killed or respawned by hand (endIfPaneMissing).
func (m *Manager) onPaneChanged(ctx context.Context, ch census.Change) {
	p, ok := m.publishedByTmuxID(ctx, ch.Session.ID, ch.Life)
	if !ok || p.Stopping != nil || ch.Session.PanePID == p.PanePID {
		return
	}
	m.endIfPaneMissing(ctx, p)
}

// paneMissing is the refusal of a talk to generation p whose pane is gone
// from its session (endIfPaneMissing started its stop).
func paneMissing(name string) error {
	return verdict.Errorf(verdict.CodeAgentNotRunning, map[string]any{"name": name, "reason": verdict.ReasonAgentPaneMissing},
		"the agent of session %s is no longer in its pane (the pane was killed or respawned by hand); its generation is being stopped", name)
}
