package lifecycle

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/proctree"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// exitState is the Manager's watch of its generations' pane processes.
type exitState struct {
	w      *proctree.ExitWatch // made at the first watch (a Manager that never publishes holds nothing)
	closed bool                // Shutdown: no new watcher
	failed bool                // a watch failed: said once in the log
}

// An agent's end, told the moment it happens.
//
// The pane's process is the agent (the helper execs it), a child of the tmux
// server, so tmux is the one that learns of its exit — and at scale it tells
// the census late: its pane-died hook forks a shell and a client per death,
// the census subscription shows a death within a second, and tmux 3.3a with
// utempter can miss the SIGCHLD, leaving the pane's status (and, when the
// pty closed first, the death itself) unseen until another child of the
// server exits. So every published generation of ours has its pane process
// watched (proctree.ExitWatch: one pidfd, opened for the pid and start time
// the fence recorded at spawn, so it is that very process), and its exit
// starts the generation's end at once (endAtExit): the agent's exit status is
// read from the exited process itself while tmux has not yet reaped it
// (proctree.Exit.Status; at thousands of sessions tmux reaps tens of
// milliseconds later), so the end waits neither for tmux's reap nor for a
// census read — what is left is the stop's proof and the one pipeline that
// captures the tail and removes the session. Where the status cannot be read
// (tmux reaped first, no trace permission, no /proc/PID/io), the exit makes
// the census look at that one session (census.PaneExited: it lets tmux reap,
// poking it if need be, then reads the session by id), and end detection acts
// on what it reads, as before (onPaneDead).
//
// A watch is made at publication and, after a daemon restart, for every
// generation Recover adopts; it is released when its process exits, when
// the generation's stop is over, and at Shutdown. It costs one fd per live
// generation, and one goroutine and two fds for all of them.

// exitWatch returns the watcher, making it at the first call; nil after
// Shutdown or where none can be made (said once).
func (m *Manager) exitWatch() *proctree.ExitWatch {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.exits.w != nil || m.exits.closed || m.exits.failed {
		return m.exits.w
	}
	w, err := proctree.NewExitWatch()
	if err != nil {
		m.exits.failed = true
		m.log.Info().Err(err).Msg("pane processes not watched; ends are seen by tmux's notices only")
	}
	m.exits.w = w
	return w
}

// closeExitWatch releases every watch and stops the watcher (Shutdown).
func (m *Manager) closeExitWatch() {
	m.mu.Lock()
	w := m.exits.w
	m.exits.closed = true
	m.mu.Unlock()
	if w != nil {
		w.Close()
	}
}

// watchExit watches p's pane process, when p's spawn recorded it (pid and
// start time). A watch that cannot be made (no pidfds before Linux 5.3, the
// fd limit) leaves the census's own paths — the pane-died hook, the
// subscription — to tell the end, as they did before; the session is marked
// census.TagUnwatched for the hook, which skips the watched ones.
func (m *Manager) watchExit(p fence.Published) {
	if p.TmuxID == "" {
		return
	}
	if p.PanePID <= 0 || p.PaneStart == 0 {
		m.markUnwatched(p)
		return
	}
	w := m.exitWatch()
	if w == nil {
		m.markUnwatched(p)
		return
	}
	// The callback keeps the session's life, id and generation only, not p:
	// a few dozen bytes per watch at 4,000 of them.
	life, id, gen, pid := m.lifeOf(p.ServerPID, p.ServerStart), p.TmuxID, p.Generation, p.PanePID
	err := w.Watch(stopKey(p), p.PanePID, p.PaneStart, func(e proctree.Exit) {
		st, known := e.Status()
		if known {
			if r := m.endAtExit(life, id, gen, st); r != nil {
				// A stop that did not remove the session (kept for a
				// restart, or not proven) leaves a dead pane the census
				// has not read: it is told now, as it would have been.
				<-r.done
				if _, listed := m.census.ByID(id); !listed || !m.census.OnLife(life) {
					return
				}
			}
		}
		m.census.PaneExited(m.stopCtx, life, id, e.Reaped)
		if s, listed := m.census.ByID(id); listed {
			var exit *proctree.ExitStatus
			if known {
				exit = &st
			}
			// The census lists a person's pane as the session's when it
			// lists another pid (agentpane.go): its read cannot show the
			// agent's death, which is waited for here.
			m.endInOwnPane(life, id, gen, exit, s.PanePID != pid)
		}
	})
	if err != nil && err != proctree.ErrWatchClosed {
		m.mu.Lock()
		said := m.exits.failed
		m.exits.failed = true // no new watcher; this one keeps its watches
		m.mu.Unlock()
		if !said {
			m.log.Info().Err(err).Msg("a pane process not watched (said once); its end is seen by tmux's notices")
		}
		m.markUnwatched(p)
	}
}

// markUnwatched tags p's session census.TagUnwatched, so that the census's
// pane-died hook, which skips the sessions of published generations (their
// pidfd watch tells their deaths), tells this one's. Failure is only logged:
// the subscription still shows the death within a second.
func (m *Manager) markUnwatched(p fence.Published) {
	life := m.lifeOf(p.ServerPID, p.ServerStart)
	if _, err := m.commandIn(m.stopCtx, life, "set-option", "-t", p.TmuxID, census.TagUnwatched, "1"); err != nil {
		m.log.Debug().Err(err).Str("tmux_id", p.TmuxID).Msg("unwatched session not marked for the pane-died hook")
	}
}

// unwatchExit releases p's watch (its generation has ended).
func (m *Manager) unwatchExit(p fence.Published) {
	m.mu.Lock()
	w := m.exits.w
	m.mu.Unlock()
	if w != nil {
		w.Release(stopKey(p))
	}
}

// ExitWatches returns how many pane processes are watched (one fd each).
func (m *Manager) ExitWatches() int {
	m.mu.Lock()
	w := m.exits.w
	m.mu.Unlock()
	if w == nil {
		return 0
	}
	return w.Len()
}

// hungUp reports an exit by hangup: SIGHUP, or a shell's 128+SIGHUP. It is
// what an agent gets when its terminal goes — its session killed, or its
// server dead, whose ptys the kernel closes before the server shows as
// exited — so such an end is the census's to tell (tmux_session_missing,
// server_exited), not an agent_exited read in the race with it.
func hungUp(st proctree.ExitStatus) bool {
	return st.Signal == int(unix.SIGHUP) || st.Code == 128+int(unix.SIGHUP)
}

// endAtExit starts the stop of generation gen in session id (server life
// life), whose pane process — its agent — exited with st: reason
// agent_exited, with that exit, and returns the stop's run. It returns nil,
// leaving the end to the census's look, when end detection is not running (Run), when that
// generation is not the one published there (ended already, or a later one),
// when its server is not running or not the census's, or when the agent was
// hung up (hungUp: a dead server's ptys close and the hangup ends every
// agent; the census tells that end, as server_exited). A session removed before its agent exited (a hangup by its
// removal) is told by the stop's kill pipeline: finishEnd then ends it as the
// removal, not as the agent's own exit.
func (m *Manager) endAtExit(life tmuxctl.ServerLife, id string, gen uint64, st proctree.ExitStatus) *stopRun {
	if hungUp(st) {
		return nil
	}
	p, ok := m.exitedGeneration(life, id, gen)
	if !ok {
		return nil
	}
	return m.stopGeneration(p, endCause{reason: verdict.ReasonAgentExited, exit: processEnd(p, st)})
}

// processEnd is the agent's end as read from its exited process.
func processEnd(p fence.Published, st proctree.ExitStatus) *agentEnd {
	end := agentEnd{source: "pane_dead_status", read: "process", pid: p.PanePID, ended: time.Now()}
	if st.Signal != 0 {
		end.signal = unix.SignalName(unix.Signal(st.Signal))
	} else {
		code := st.Code
		end.status = &code
	}
	return &end
}

// endInOwnPane looks, once the agent of generation gen in session id exited
// (st, when its process told) and no stop of it started, at the agent's own
// pane among the session's. Dead: the generation ends (agent_exited), its
// exit read from that pane when the process did not tell. Not there while
// the session is: the pane was killed or respawned by hand, and the
// generation ends (agent_pane_missing, a stop) — left alone, its session went
// on looking like a running agent, input went to the person's process, and
// no verdict was written. Still alive: the census sees its death as tmux
// shows it, unless it lists a person's pane as the session's (wait), whose
// read cannot show it: then the pane is looked at again, bounded. Nothing
// when the session is not there (its removal is the census's to tell), or
// the generation is not the one published there (a stop ended it).
func (m *Manager) endInOwnPane(life tmuxctl.ServerLife, id string, gen uint64, st *proctree.ExitStatus, wait bool) {
	p, ok := m.exitedGeneration(life, id, gen)
	if !ok {
		return
	}
	// tmux marks the pane dead once it has reaped the process and (3.3a)
	// read the pty to its end: a moment after the exit, bounded here.
	for deadline := time.Now().Add(paneExitWait); ; {
		_, dead, found, listed := m.agentPaneIn(m.stopCtx, p)
		switch {
		case found && dead, !found && listed:
			cause := endCause{reason: verdict.ReasonAgentExited}
			if !found {
				cause.reason = verdict.ReasonAgentPaneMissing
			}
			if st != nil {
				cause.exit = processEnd(p, *st)
			}
			m.stopGeneration(p, cause)
			return
		case !found, !wait:
			return
		}
		if time.Now().After(deadline) || !sleepCtx(m.stopCtx, 20*time.Millisecond) {
			return
		}
	}
}

// exitedGeneration is generation gen published in session id of server life
// life, whose pane process a watch saw exit, when this daemon is to end it:
// end detection runs (Run), the server runs and is the census's, and gen is
// still the one published there (not ended already, no later one).
func (m *Manager) exitedGeneration(life tmuxctl.ServerLife, id string, gen uint64) (fence.Published, bool) {
	if !m.detecting.Load() || !m.census.OnLife(life) || !proctree.Running(life.PID) {
		return fence.Published{}, false
	}
	p, ok := m.publishedByTmuxID(m.stopCtx, id, life)
	return p, ok && p.Generation == gen
}
