package lifecycle

import (
	"errors"
	"syscall"
)

// wakeSignal is how the daemon tells a pane helper "look at the fence now"
// after publishing its generation (DESIGN §6: woken by the daemon; the helper
// re-reads the fence itself, a wake-up proves nothing, and it also re-reads
// on its own every helperPoll). SIGURG because its default action is to be
// ignored — a wake that reaches a process which is not (or not yet) a helper
// listening for it does nothing at all — and because the helper does not
// forward it to its agent (agent.go), unlike SIGWINCH. Go's runtime sends
// itself SIGURG to preempt goroutines; such a wake only costs one read.
const wakeSignal = syscall.SIGURG

// wakeHelper sends the wake to the pane helper of a session: the pane's
// process, which tmux started for this create (new-session execs the helper
// directly, no shell) and which is never ended by it. A failure only means
// the helper sees the publication at its next poll.
func (m *Manager) wakeHelper(panePID int, tmuxID string) {
	if panePID <= 0 {
		return
	}
	if err := syscall.Kill(panePID, wakeSignal); err != nil && !errors.Is(err, syscall.ESRCH) {
		m.log.Debug().Err(err).Int("pane_pid", panePID).Str("tmux_id", tmuxID).Msg("wake helper")
	}
}
