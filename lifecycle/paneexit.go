package lifecycle

import (
	"context"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// An agent's exit, without a process of ours in its session.
//
// The pane helper execs the agent in place, so the pane's process is the
// agent, a child of the tmux server; only tmux can wait for it. Every managed
// window has remain-on-exit on (set before publication, so before the gate
// opens), and tmux keeps a dead pane's pane_dead_status (the exit code) or
// pane_dead_signal (the signal's number, tmux 3.3a) until the pane is
// respawned or its session killed — also while no daemon runs, so the next
// daemon reads it before it removes or keeps the session. What tmux does not
// keep: the exit of an agent whose session was killed (by hand, or with the
// whole server), which ends as owner_lost.

// agentEnd is what is known of how the generation's agent ended; the zero
// value when nothing is.
type agentEnd struct {
	source  string // exit_source: "pane_dead_status" (the pane process's own), "exec_failed" or "helper_postmortem" (the fence)
	read    string // exit_read: where the pane process's exit was read, "tmux" (its dead pane) or "process" (endAtExit)
	status  *int
	signal  string // a name, e.g. "SIGKILL"
	pid     int
	started time.Time
	ended   time.Time
	// helperOnly: the pane's process never recorded its start (the helper
	// could not be run or died before), so the exit is the helper's, not an
	// agent's: the kind stays owner_lost.
	helperOnly bool
}

// paneExitWait bounds how long end detection waits for tmux to fill in the
// exit of a pane whose process is proven gone: tmux sets pane_dead a tick
// before the status, and 3.3a linked with utempter may not reap a pane
// process until another child of the server exits (the census's reapPoke;
// here a poke of our own every paneExitPoke).
var (
	paneExitWait = 5 * time.Second
	paneExitPoke = 500 * time.Millisecond
)

// agentEndOf finds how p's agent ended: the helper's postmortem when the exec
// failed, else the dead pane of its session (present: the census lists it in
// p's server life), from the census or, when the census has not seen the
// status yet, read from tmux until it is there. The helper's start record
// tells whether the pane's process got as far as its gate: without one, the
// dead pane's exit is the helper's own.
func (m *Manager) agentEndOf(ctx context.Context, p fence.Published, sess census.Session, present bool, known *agentEnd) agentEnd {
	pm, ok, err := m.fence.Postmortem(ctx, p.Identity, p.Generation)
	if err == nil && ok && !pm.EndedAt.IsZero() {
		e := agentEnd{source: "exec_failed", status: pm.ExitStatus, signal: pm.Signal,
			started: pm.StartedAt, ended: pm.EndedAt}
		if pm.AgentPID > 0 {
			// A resident helper of the binary before the exec (a session
			// older than this daemon) recorded its child agent's end.
			e.source, e.pid = "helper_postmortem", pm.AgentPID
		}
		return e
	}
	if known != nil { // read from the exited process (endAtExit)
		e := *known
		e.helperOnly = err == nil && !ok
		return e
	}
	if !present {
		return agentEnd{}
	}
	e, found := sessionEnd(sess)
	if found && p.PanePID > 0 && sess.PanePID != p.PanePID {
		e, found = agentEnd{}, false // a person's pane, not the agent's (agentpane.go)
	}
	if !found || e.ended.IsZero() {
		// Not seen by the census yet, or seen without its time (the census
		// does not list pane_dead_time): one read of the pane says both —
		// an end told after a daemon restart carries when it happened.
		if target, ok := m.agentEndTarget(ctx, sess, p); ok {
			if r := m.readPaneEnd(ctx, m.lifeOf(p.ServerPID, p.ServerStart), target); r.source != "" || !found {
				e = r
			}
		}
	}
	// No start record (and no fence error): the helper never got past its
	// first steps, so whatever tmux kept is its end, not an agent's.
	e.helperOnly = e.source != "" && err == nil && !ok
	return e
}

// agentEndTarget is the pane to read p's end from: agentPaneTarget, except
// that a session tmux lists without p's pane (killed or respawned by hand)
// has none (ok false) — the pane it would fall back to is a person's, whose
// exit is not the agent's, and waiting for it to die held the stop for
// readPaneEnd's whole bound.
func (m *Manager) agentEndTarget(ctx context.Context, sess census.Session, p fence.Published) (string, bool) {
	if p.PanePID <= 0 || sess.PanePID == p.PanePID {
		return m.agentPaneTarget(ctx, sess, p), true
	}
	id, _, found, listed := m.agentPaneIn(ctx, p)
	switch {
	case found:
		return id, true
	case listed:
		return "", false
	}
	return m.agentPaneTarget(ctx, sess, p), true
}

// sessionEnd is the exit the census holds for the session's pane.
func sessionEnd(s census.Session) (agentEnd, bool) {
	if !s.PaneDead || (s.PaneDeadStatus == nil && s.PaneDeadSignal == "") {
		return agentEnd{}, false
	}
	e := agentEnd{source: "pane_dead_status", read: "tmux", signal: signalName(s.PaneDeadSignal), pid: s.PanePID}
	if s.PaneDeadStatus != nil {
		v := *s.PaneDeadStatus
		e.status = &v
	}
	return e, true
}

// paneEndFormat reads a pane's end in one line.
const paneEndFormat = "#{pane_dead}\t#{pane_dead_status}\t#{pane_dead_signal}\t#{pane_dead_time}\t#{pane_pid}"

// readPaneEnd asks tmux for target's exit until it has one, poking tmux to
// reap, for up to paneExitWait; the zero agentEnd when tmux has none (the
// pane or session is gone, or tmux did not answer).
func (m *Manager) readPaneEnd(ctx context.Context, life tmuxctl.ServerLife, target string) agentEnd {
	start := time.Now()
	nextPoke := start.Add(paneExitPoke / 5)
	for {
		rep, err := m.commandIn(ctx, life, "display-message", "-p", "-t", target, paneEndFormat)
		if err != nil || len(rep.Lines) != 1 {
			return agentEnd{}
		}
		if e, ok := parsePaneEnd(rep.Lines[0]); ok {
			return e
		}
		now := time.Now()
		if now.Sub(start) > paneExitWait {
			m.log.Debug().Str("target", target).Msg("dead pane's exit status not filled in by tmux")
			return agentEnd{}
		}
		if now.After(nextPoke) {
			// A background child whose exit makes tmux's waitpid loop reap.
			_, _ = m.commandIn(ctx, life, "run-shell", "-b", "true")
			nextPoke = now.Add(paneExitPoke)
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return agentEnd{}
		}
	}
}

// parsePaneEnd parses a paneEndFormat line; ok only for a dead pane whose
// status or signal tmux has filled in.
func parsePaneEnd(line string) (agentEnd, bool) {
	f := strings.Split(line, "\t")
	if len(f) != 5 || f[0] != "1" || (f[1] == "" && f[2] == "") {
		return agentEnd{}, false
	}
	e := agentEnd{source: "pane_dead_status", read: "tmux", signal: signalName(f[2])}
	if f[1] != "" {
		st, err := strconv.Atoi(f[1])
		if err != nil {
			return agentEnd{}, false
		}
		e.status = &st
	}
	if t, err := strconv.ParseInt(f[3], 10, 64); err == nil && t > 0 {
		e.ended = time.Unix(t, 0)
	}
	e.pid, _ = strconv.Atoi(f[4])
	return e, true
}

// signalName turns tmux's pane_dead_signal (a number in 3.3a) into a name.
func signalName(s string) string {
	if n, err := strconv.Atoi(s); err == nil && n > 0 {
		return unix.SignalName(unix.Signal(n))
	}
	return s
}
