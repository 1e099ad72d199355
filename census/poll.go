package census

import (
	"context"
	"strings"
	"time"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// Polling instead of the subscription at scale (issue 18, goal 4).
//
// tmux evaluates the census subscription once a second in its one thread,
// whatever changed, and 3.3a builds its #{S:} value by strlcat, so an
// evaluation costs the square of the value's length: at 3,968 sessions (a
// 78 KB value) one held tmux for ~250 ms, and every command sent meanwhile —
// an end's kill pipeline — waited behind it (the scale run's slowest ends,
// BENCHMARKS.md). Above pollAbove sessions the census drops the subscription
// and reads the very same segments itself, with `list-sessions -F` (one line
// per session: no quadratic build, and at the census's own pace): every
// pollEvery(n) — a second per 1,000 sessions — on a goroutine of its own,
// the result handed to Run as if tmux had sent it (onSubscription), so what
// a change costs stays what it was. Below pollBelow it subscribes again.
//
// What a user sees differently at that size: activity_at, and a pane death
// that neither a pidfd watch nor the pane-died hook told, within pollEvery
// instead of about a second.

const (
	// pollAbove is the session count above which the census polls.
	pollAbove = 1000
	// pollBelow is the count below which it subscribes again (hysteresis:
	// a server hovering at the threshold does not flip every second).
	pollBelow = 800
	// pollCheck is how often the size is looked at while subscribed.
	pollCheck = time.Second
)

// subSegment is one session's segment of the census subscription's value
// (subFormat), and the line format of a poll.
const subSegment = "#{session_id}/#{=-3:window_activity}/" +
	"#{W:#{P:#{?pane_dead,#{pane_dead_status}.#{pane_dead_signal},}}}/" +
	"#{session_attached}/#{=-4:@skc-identity}/#{@skc-generation}"

// pollEvery is the poll's period at n sessions: its cost grows with n, and
// so does the time between two (1 s per 1,000 sessions, at least 1 s).
func pollEvery(n int) time.Duration {
	return max(time.Second, time.Duration(n)*time.Millisecond)
}

// poller is Run's state of the polling (Run's goroutine only).
type poller struct {
	on       bool // polling; the subscription is dropped
	inflight bool
	timer    *time.Timer
	done     chan pollResult
	above    int // pollAbove (tests lower it)
	below    int // pollBelow
}

// pollResult is one poll's value, in a subscription line's shape.
type pollResult struct {
	text string
	life tmuxctl.ServerLife
	err  error
}

func newPoller(above, below int) *poller {
	return &poller{timer: time.NewTimer(pollCheck), done: make(chan pollResult, 1), above: above, below: below}
}

// held counts the sessions the census holds.
func (c *Census) held() (int, tmuxctl.ServerLife, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.sessions), c.info.ServerLife, c.online
}

// pollTick switches between subscription and polling by the census's size,
// and starts a poll when one is due. Run only.
func (c *Census) pollTick(ctx context.Context, p *poller) {
	n, life, online := c.held()
	next := pollCheck
	switch {
	case !online || c.cfg.exitOnly:
	case !p.on && n > p.above:
		p.on = true
		c.startPoll(ctx, p, life, true)
		next = pollEvery(n)
	case p.on && n < p.below:
		p.on = false
		go c.resubscribe(ctx, life)
	case p.on:
		if !p.inflight {
			c.startPoll(ctx, p, life, false)
		}
		next = pollEvery(n)
	}
	p.timer.Reset(next)
}

// startPoll reads every session's segment on a goroutine; with drop, it
// first drops the subscription (`refresh-client -B name` with no format).
func (c *Census) startPoll(ctx context.Context, p *poller, life tmuxctl.ServerLife, drop bool) {
	p.inflight = true
	go func() {
		if drop {
			if _, err := c.cl.CommandIn(ctx, life, "refresh-client", "-B", subName); err != nil {
				c.log.Debug().Err(err).Msg("census subscription not dropped")
			}
		}
		rep, err := c.cl.CommandIn(ctx, life, "list-sessions", "-F", subSegment)
		res := pollResult{life: life, err: err}
		if err == nil {
			res.text = subName + " poll : " + strings.Join(rep.Lines, " ")
		}
		p.done <- res
	}()
}

// resubscribe installs the subscription again (the census shrank).
func (c *Census) resubscribe(ctx context.Context, life tmuxctl.ServerLife) {
	if _, err := c.cl.CommandIn(ctx, life, "refresh-client", "-B", subName+"::"+subFormat); err != nil {
		c.log.Warn().Err(err).Msg("census subscription failed; relying on the periodic reconcile")
	}
}

// pollDone applies a poll's value as a subscription line, when it is of the
// server life the census is on.
func (c *Census) pollDone(ctx context.Context, b *burst, p *poller, r pollResult) {
	p.inflight = false
	_, life, online := c.held()
	if r.err != nil || !online || r.life != life || !p.on {
		return
	}
	c.polls.Add(1)
	c.onSubscription(ctx, b, r.text)
}
