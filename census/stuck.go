package census

import (
	"context"
	"time"
)

// Panes dead without a status, poked until tmux has one.
//
// reapPoke goes out when a held session's segment turns dead without a
// status. That alone left two holes, either of which leaves a pane dead
// without its status for good on tmux 3.3a (nothing else of the server's
// exits, so nothing makes it wait for the pane's process): a session whose
// first segment already shows it so — created and dead within one tick,
// before the census held it — was never poked; and one poke can come too
// early, its child reaped before the pane's process was a zombie. The first
// is how TestPaneDeathsFollowTmux waited out its 30 s once in CI: the last of
// 40 panes dying at once, with no later child of the server to reap it.
//
// So every value is also counted for such panes, and while the latest one
// shows any, the census pokes again stuckFirst after it was seen and then at
// doubling intervals up to stuckMax; the status, when it comes, changes the
// value (read by id as any pane change) and stops it. A pane that stays so —
// its process closed the terminal and lives on — costs one forked child of
// tmux per stuckMax.

const (
	// stuckFirst is how long a pane may show dead without a status before the
	// census pokes for it again (tmux fills the status a tick after the death).
	stuckFirst = time.Second
	// stuckMax bounds the interval between pokes for panes that stay so.
	stuckMax = 8 * time.Second
)

// stuckPanes is Run's state of the pokes for panes dead without a status.
type stuckPanes struct {
	timer *time.Timer
	armed bool
	n     int           // such panes in the latest value
	wait  time.Duration // the armed (or next) interval
}

func newStuckPanes() stuckPanes {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return stuckPanes{timer: t}
}

// noteStuck records how many panes the latest value shows dead without a
// status, and arms the next poke while there are any. Run's goroutine only.
func (c *Census) noteStuck(b *burst, n int) {
	s := &b.stuck
	s.n = n
	switch {
	case n == 0:
		s.wait = 0
		if s.armed {
			s.timer.Stop()
			s.armed = false
		}
	case !s.armed:
		if s.wait == 0 {
			s.wait = stuckFirst
		}
		s.timer.Reset(s.wait)
		s.armed = true
	}
}

// stuckDue pokes once more for panes still dead without a status, and arms
// the next poke, later each time. Run's goroutine only.
func (c *Census) stuckDue(ctx context.Context, b *burst) {
	s := &b.stuck
	s.armed = false
	if s.n == 0 {
		return
	}
	c.reapPoke(ctx)
	s.wait = min(2*s.wait, stuckMax)
	s.timer.Reset(s.wait)
	s.armed = true
}
