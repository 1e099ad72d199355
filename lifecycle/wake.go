package lifecycle

import (
	"errors"
	"os"
	"strconv"
	"syscall"
)

// wakeSignal is how the daemon tells a pane helper "look at the fence now"
// after publishing its generation (DESIGN §6: woken by the daemon; the helper
// re-reads the fence itself, a wake-up proves nothing, and it also re-reads
// on its own every helperPoll). SIGURG because its default action is to be
// ignored — a wake that reaches a process which is not (or not yet) a helper
// listening for it does nothing at all. Go's runtime sends itself SIGURG to
// preempt goroutines; such a wake only costs one read.
const wakeSignal = syscall.SIGURG

// wakeHelper sends the wake to the pane helper of a session: the pane's
// process, which tmux started for this create (new-session execs the helper
// directly, no shell) and which is never ended by it — while it is still the
// helper. Once its gate opened the helper exec'd the agent in the same pid,
// and an agent is not sent our wake: SIGURG is ignored by default, but an
// agent may have a use of its own for it. So the wake goes only to a pane
// process whose executable is still the helper's (a look at /proc; an exec
// between the look and the kill leaves one stray SIGURG, which its default
// ignores). A failure only means the helper sees the publication at its next
// poll.
func (m *Manager) wakeHelper(panePID int, tmuxID string) {
	if panePID <= 0 || !m.isHelper(panePID) {
		return
	}
	if err := syscall.Kill(panePID, wakeSignal); err != nil && !errors.Is(err, syscall.ESRCH) {
		m.log.Debug().Err(err).Int("pane_pid", panePID).Str("tmux_id", tmuxID).Msg("wake helper")
	}
}

// isHelper reports whether pid runs the helper's executable (the same file
// as HelperPath), that is has not exec'd its agent yet. A helper binary
// replaced on disk since the helper started is not the same file: that
// helper is not woken and sees its publication at its next poll.
func (m *Manager) isHelper(pid int) bool {
	exe, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return false
	}
	bin, err := os.Stat(m.cfg.HelperPath)
	return err == nil && os.SameFile(exe, bin)
}
