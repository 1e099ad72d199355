package tmuxctl

import (
	"context"
	"strconv"

	"golang.org/x/sys/unix"
)

// AgentNofileEnv names the variable of the supervised server's global
// environment that holds the open-files soft limit the server was started
// with: the one its panes' programs are to get (RLIMIT_NOFILE).
//
// A Go program raises its own soft limit to the hard one at start and gives
// the original back to the processes it starts, so the tmux server it
// starts keeps the caller's soft limit — 1,024 in most login shells and
// under systemd — and every pane holds at least one of the server's fds (its
// pty): at about a thousand sessions the server's forks failed, "Too many
// open files", whatever the daemon's own limit. The Client raises the
// server's soft limit to its hard one (prlimit) at each connection and keeps
// the original here, where every new pane inherits it, so that the pane
// helper gives it back to the agent before it execs it (lifecycle): the
// agents keep the limit they would have had.
const AgentNofileEnv = "SKC_AGENT_NOFILE"

// raiseServerFiles raises the open-files soft limit of the server conn is
// connected to (its pid from tmux itself: the server at our socket) to its
// hard limit, recording the limit it had for the panes (AgentNofileEnv).
// A server already at its hard limit (raised by an earlier connection, or
// started so) is left as it is. Failures are logged: the server then keeps
// the limit it has.
func (c *Client) raiseServerFiles(ctx context.Context, conn *Conn) {
	pid := conn.Info().PID
	var old unix.Rlimit
	if pid <= 0 || unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &old) != nil || old.Cur >= old.Max {
		return
	}
	if _, err := conn.Command(ctx, "set-environment", "-g", AgentNofileEnv, strconv.FormatUint(old.Cur, 10)); err != nil {
		c.log.Warn().Err(err).Msg("tmux server's open-files limit not raised: its panes' limit could not be recorded")
		return
	}
	raised := unix.Rlimit{Cur: old.Max, Max: old.Max}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &raised, nil); err != nil {
		c.log.Warn().Err(err).Int("server_pid", pid).Msg("tmux server's open-files limit not raised")
		return
	}
	c.log.Info().Int("server_pid", pid).Uint64("from", old.Cur).Uint64("to", old.Max).
		Msg("raised the tmux server's open-files soft limit (its panes keep the old one)")
}
