package census

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// subName names the census subscription (refresh-client -B, docs/tmux-facts.md §6).
const subName = "skc-census"

// relistOn are the notifications after which the census re-lists (coalesced).
// A session's rename is read by id instead (renamed.go), unless its
// notification cannot be parsed. Window notifications matter because a session's last window closing ends
// the session, and a pane or window change moves the session's active pane;
// client ones change the attached count. Window renames and layout changes
// touch nothing the census holds, so they cost nothing.
var relistOn = map[string]bool{
	"sessions-changed":       true,
	"session-renamed":        true,
	"session-window-changed": true,
	"client-session-changed": true,
	"client-detached":        true,
	"window-add":             true,
	"window-close":           true,
	"window-pane-changed":    true,
	"unlinked-window-add":    true,
	"unlinked-window-close":  true,
}

// endsOnly are the notifications a session's end or creation sends (docs/tmux-facts.md
// §8: a bare %sessions-changed, then %unlinked-window-close for an end's
// windows or %unlinked-window-add for a new session's). A burst made only of
// these (and of subscription changes that only add or drop sessions) is
// answered by an id-only list (relistIDs): a missing id is a session gone, a
// new id is read by id (or, many at once, with the full list). What such a
// burst could also carry — a window opening or closing in a surviving
// session — changes that session's subscription segment within a second,
// which then costs a full re-list. Before creations took this path too,
// every create cost a full list: 0.3 s of tmux's time at 3,750 sessions,
// which every end behind it waited for.
var endsOnly = map[string]bool{
	"sessions-changed":      true,
	"unlinked-window-close": true,
	"window-close":          true,
	"unlinked-window-add":   true,
}

// Run consumes the client's events until ctx is done (then returns nil) or
// the event channel closes. It is the only goroutine that reacts to
// connects, disconnects and notifications; queries never wait for it.
// The census and the client may stop in either order: the client closes
// its event stream itself when its Run returns, whether or not anybody
// reads it, so nobody has to drain Events().
//
// Re-lists run on a goroutine of their own, at most one at a time, so that
// notifications, connects and disconnects are handled while one is in
// flight; Run waits for it before returning.
func (c *Census) Run(ctx context.Context) error {
	events := c.cl.Events()
	l := newRunLoop(c.cfg)
	defer c.closeRunLoop(l)
	b, p := l.b, l.p
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				return nil
			}
			c.handle(ctx, ev, b)
			if ev.Kind == tmuxctl.Disconnected && c.awaitingDeath() {
				l.probe.Reset(probeEvery)
			}
		case <-l.probe.C:
			if c.awaitingDeath() {
				l.probe.Reset(probeEvery)
			}
		case <-c.kick:
			c.trigger(ctx, b, true)
		case <-c.lookKick:
			c.onLooks(ctx, b)
		case <-l.reconcile.C:
			if c.reconcileDue(c.now()) {
				c.trigger(ctx, b, true)
			}
		case <-b.timer.C:
			b.pending, b.hurry = false, false
			if b.inflight { // a stale fire after a connect started one
				b.dirty = true
			} else {
				c.startRelist(ctx, b)
			}
		case err := <-b.done:
			c.relistDone(ctx, b, err)
		case err := <-b.readDone:
			c.readsDone(ctx, b, err)
		case <-b.checkTimer.C:
			c.checksDue(ctx, b)
		case <-b.stuck.timer.C:
			c.stuckDue(ctx, b)
		case <-p.timer.C:
			c.pollTick(ctx, p)
		case r := <-p.done:
			c.pollDone(ctx, b, p, r)
		}
	}
}

// runLoop holds Run's timers and the state of its lists and polls, so that
// Run itself is only the dispatch of its events.
type runLoop struct {
	reconcile *time.Ticker
	probe     *time.Timer // stopped until a disconnect waits for the old server's death
	b         *burst
	p         *poller
}

func newRunLoop(cfg config) *runLoop {
	l := &runLoop{
		reconcile: time.NewTicker(cfg.reconcile),
		probe:     time.NewTimer(time.Hour),
		b:         newBurst(),
		p:         newPoller(cfg.pollAbove, cfg.pollBelow),
	}
	l.probe.Stop()
	l.b.poll = l.p
	return l
}

// closeRunLoop stops the timers and waits out every list, read, poll and
// background goroutine still in flight: nothing of the census outlives Run.
func (c *Census) closeRunLoop(l *runLoop) {
	if l.p.inflight {
		<-l.p.done
	}
	l.p.timer.Stop()
	l.probe.Stop()
	if l.b.inflight {
		<-l.b.done
	}
	if l.b.reading {
		<-l.b.readDone
	}
	c.bg.Wait()
	l.b.stuck.timer.Stop()
	l.b.checkTimer.Stop()
	l.b.timer.Stop()
	l.reconcile.Stop()
}

// reconcileShare bounds the tmux time the periodic reconcile takes: the next
// one is due no sooner than reconcileShare times the last full sync's cost
// after it (or cfg.reconcile, whichever is longer). A full list costs tmux
// ~0.65 s at 4,000 sessions, and tmux runs one command at a time: every 30 s
// it held up 2 % of session ends behind it, the scale run's end → verdict p99
// (BENCHMARKS.md, Scale). At 1,000 sessions (~20 ms) the 30 s period stands.
const reconcileShare = 100

// reconcileDue says whether the periodic reconcile should list now: any full
// sync since the last one (a burst's, a connect's) counts as one.
func (c *Census) reconcileDue(now time.Time) bool {
	last := time.Unix(0, c.lastSyncAt.Load())
	every := max(c.cfg.reconcile, reconcileShare*time.Duration(c.lastSync.Load()))
	return now.Sub(last) >= every-time.Second // the ticker's own jitter
}

// burst coalesces triggers into re-lists, never more than one in flight.
//
// Leading edge: a trigger after cfg.quiet without any starts a re-list at
// once, so a lone session end is seen after one list round trip. Triggers
// while a re-list is in flight set dirty; when it completes, one trailing
// re-list follows once the burst has been quiet for cfg.quiet, or cfg.maxDelay
// after the first trigger it covers, whichever is first. Triggers within
// cfg.quiet of the previous one (a burst still going on) take the same
// debounce. So a burst costs one leading re-list plus one per maxDelay of
// its length, and a failed re-list is retried with exponential backoff
// (cfg.retry doubling up to cfg.retryMax), never sooner.
type burst struct {
	timer      *time.Timer
	pending    bool      // timer armed: a re-list (trailing or retry) will start
	hurry      bool      // … as soon as the id-list spacing allows (soonIDList): light triggers do not push it back
	due        time.Time // when the armed timer fires (while pending)
	first      time.Time // first trigger the pending/dirty re-list covers
	last       time.Time // last trigger
	inflight   bool
	dirty      bool          // a trigger arrived while in flight
	urgent     bool          // a connect arrived while in flight: re-list right after it
	full       bool          // some trigger covered by the next re-list needs a full list
	nextFull   bool          // … by the one after the in-flight one
	failures   int           // consecutive failed re-lists (backoff)
	lightDirty bool          // a session-end trigger arrived while in flight
	idFast     bool          // the one in flight is an id-only list started by an end mid-burst
	idStart    time.Time     // when the last such list started
	idCost     time.Duration // how long it took
	done       chan error

	// Reads by id of sessions whose subscription segment changed (a pane's
	// death, a tag): one batch in flight at a time (subscription.go).
	reads    map[string]struct{} // ids waiting for the next batch
	reading  bool
	readDone chan error

	// Sessions to read by id once their creation second is over, unless
	// they show activity by then (wrotecheck.go): when each is due.
	checks     map[string]time.Time
	checkTimer *time.Timer

	poll *poller // polling instead of the subscription at scale (poll.go)

	// Pokes for panes dead without a status (stuck.go).
	stuck stuckPanes
}

func newBurst() *burst {
	t := time.NewTimer(time.Hour)
	t.Stop()
	ct := time.NewTimer(time.Hour)
	ct.Stop()
	return &burst{timer: t, done: make(chan error, 1), readDone: make(chan error, 1), checkTimer: ct, stuck: newStuckPanes()}
}

// trigger notes that the census may be behind tmux; full is false when the
// trigger can only mean that sessions ended.
func (c *Census) trigger(ctx context.Context, b *burst, full bool) {
	now := c.now()
	if b.inflight {
		b.nextFull = b.nextFull || full
	} else {
		b.full = b.full || full
	}
	idle := b.last.IsZero() || now.Sub(b.last) >= c.cfg.quiet
	b.last = now
	if !full && !idle && !b.inflight && c.soonIDList(ctx, b, now) {
		return
	}
	if !full && b.inflight {
		b.lightDirty = true
	}
	switch {
	case b.inflight:
		if !b.dirty {
			b.dirty, b.first = true, now
		}
	case b.failures > 0:
		// Backing off: the armed retry covers this trigger; never sooner.
	case b.pending && b.hurry && !full:
		// Due as soon as the spacing allows: never later.
	case b.pending && b.hurry:
		// A full trigger is not an id list's to wait for: due by its own
		// debounce if that comes first, and the list it starts is full.
		c.arm(b, now, minTime(b.due, c.debounce(b, now)))
	case b.pending:
		c.arm(b, now, c.debounce(b, now))
	case idle:
		c.startRelist(ctx, b) // leading edge
	default:
		b.pending, b.first = true, now
		c.arm(b, now, c.debounce(b, now))
	}
}

// debounce is when a pending re-list is due after a trigger at now: quiet
// after the last trigger, but no later than maxDelay after the first.
func (c *Census) debounce(b *burst, now time.Time) time.Time {
	return minTime(now.Add(c.cfg.quiet), b.first.Add(c.cfg.maxDelay))
}

// arm sets the burst's timer to fire at at (at once when that has passed).
func (c *Census) arm(b *burst, now, at time.Time) {
	if at.Before(now) {
		at = now
	}
	b.due = at
	b.timer.Reset(at.Sub(now))
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// fastIDList starts an id-only list for a session end inside a burst (say,
// right after a create), while the burst's own re-list stays debounced.
// Such lists are spaced by five times their cost, but never more than
// maxDelay (idListDue), so at most a fifth of tmux's time goes to them however
// fast ends and creates come — unless one list costs more than maxDelay / 5
// (50 ms: about 2,500 sessions), where ends are told within maxDelay instead.
//
// A new id in it is read at once with the full list (relistIDs), in the same
// slot and counted in its cost, never left to the burst's debounce:
// %sessions-changed is also what a create sends, every further trigger of a
// burst pushes the trailing re-list back (up to maxDelay), and a session the
// census never listed can never be reported Removed — neither when it is
// killed a moment after its create, nor when the server exits.
func (c *Census) fastIDList(ctx context.Context, b *burst, now time.Time) bool {
	if b.failures > 0 || now.Before(c.idListDue(b)) {
		return false
	}
	b.inflight, b.idFast, b.idStart = true, true, now
	go func() { b.done <- c.relistIDs(ctx) }()
	return true
}

// idListDue is the earliest time the next mid-burst id-only list may start:
// five times the last one's cost after it, but never more than maxDelay. The
// bound matters because the cost is measured on the daemon's clock: a daemon
// stopped for a while (SIGSTOP, a debugger, a loaded host) with a list in
// flight measures the stall as the list's cost, and unbounded spacing then
// held every later end back by five times the stall.
func (c *Census) idListDue(b *burst) time.Time {
	return b.idStart.Add(min(c.cfg.maxDelay, max(2*time.Millisecond, 5*b.idCost)))
}

// soonIDList answers a trigger that may mean sessions ended or were created:
// the id-only list now (fastIDList) or, while the spacing holds it back, a
// re-list as soon as the spacing allows one, not at the end of the burst's
// debounce, which further triggers keep pushing back. It reports whether it
// covered the trigger; failing re-lists keep their backoff (false).
func (c *Census) soonIDList(ctx context.Context, b *burst, now time.Time) bool {
	if c.fastIDList(ctx, b, now) {
		return true
	}
	if b.failures > 0 {
		return false
	}
	if b.pending && b.hurry {
		return true // already due as soon as the spacing allows
	}
	at := c.idListDue(b)
	if b.pending {
		at = minTime(at, c.debounce(b, now))
	} else {
		b.pending, b.first = true, now
	}
	b.hurry = true
	c.arm(b, now, at)
	return true
}

// startRelist starts a sync on its own goroutine: an id-only list when
// every trigger it covers can only mean ended sessions, else a full one.
func (c *Census) startRelist(ctx context.Context, b *burst) {
	b.inflight = true
	full := b.full || b.failures > 0 || !c.Synced()
	b.full = false
	go func() {
		if full {
			b.done <- c.resync(ctx)
		} else {
			b.done <- c.relistIDs(ctx)
		}
	}()
}

// relistDone handles the end of a re-list: a retry with backoff after a
// failure while connected, else the trailing re-list if triggers arrived.
func (c *Census) relistDone(ctx context.Context, b *burst, err error) {
	b.inflight = false
	b.full, b.nextFull = b.full || b.nextFull, false
	if b.idFast {
		b.idFast, b.idCost = false, c.now().Sub(b.idStart)
	}
	if b.urgent {
		b.urgent, b.dirty, b.failures, b.full, b.lightDirty = false, false, 0, true, false
		c.startRelist(ctx, b)
		return
	}
	if err != nil && !errors.Is(err, errStale) && !errors.Is(err, tmuxctl.ErrNotConnected) && ctx.Err() == nil {
		b.failures++
		d := c.cfg.retry << min(b.failures-1, 16)
		if d > c.cfg.retryMax || d <= 0 {
			d = c.cfg.retryMax
		}
		c.log.Warn().Err(err).Int("failures", b.failures).Dur("retry_in", d).Msg("census re-list failed; retrying")
		b.dirty, b.full = false, true
		now := c.now()
		b.pending, b.hurry, b.first = true, false, now
		c.arm(b, now, now.Add(d))
		return
	}
	b.failures = 0
	if b.dirty && b.lightDirty && !b.full && c.fastIDList(ctx, b, c.now()) {
		b.dirty, b.lightDirty = false, false // only ends arrived: this list is the trailing one
		return
	}
	if b.dirty {
		b.dirty, b.hurry = false, false
		b.pending = true
		now := c.now()
		c.arm(b, now, minTime(b.last.Add(c.cfg.quiet), b.first.Add(c.cfg.maxDelay)))
	}
	if b.lightDirty { // an end (or a create) arrived during that list: tell it now
		b.lightDirty = false
		c.soonIDList(ctx, b, c.now())
	}
}

// handle applies one client event.
func (c *Census) handle(ctx context.Context, ev tmuxctl.Event, b *burst) {
	switch ev.Kind {
	case tmuxctl.Connected:
		c.onConnected(ev.Info)
		c.subSegs, c.subSeen = nil, nil // the new subscription's first line is compared with nothing
		c.subscribe(ctx, ev.Info)
		if b.poll != nil {
			b.poll.on = false // a new connection subscribes; the size decides again
		}
		b.pending, b.hurry, b.failures, b.full = false, false, 0, true
		b.reads = nil // the full sync reads them all
		b.timer.Stop()
		if b.inflight {
			b.urgent = true // it belongs to the old epoch
		} else {
			c.startRelist(ctx, b)
		}
	case tmuxctl.Disconnected:
		c.onDisconnected(ev.Err)
	case tmuxctl.Notify:
		name := strings.TrimPrefix(ev.Note.Name, "%")
		ours := name == "subscription-changed" && strings.HasPrefix(ev.Note.Text, subName+" ")
		switch {
		case ours:
			c.subLines.Add(1)
			c.onSubscription(ctx, b, ev.Note.Text)
		case name == "window-renamed":
			c.onWindowRenamed(ctx, b, ev.Note.Text)
		case name == "session-renamed":
			c.onSessionRenamed(ctx, b, ev.Note.Text)
		case endsOnly[name] && c.absorbEnd(ctx, b):
			// The end of a session its caller is removing: read by id (Removing).
		case relistOn[name]:
			c.trigger(ctx, b, !endsOnly[name])
		}
	}
}

// onConnected starts a new epoch. A new server life drops every session of
// the old one (Removed, life_changed): ids restart at $0 in a new life. The
// old life may also have had sessions the census never listed (created after
// its last list, during a burst's debounce, say), which ended with it unseen:
// the new life's first sync tells subscribers so with a Resync.
func (c *Census) onConnected(info tmuxctl.ServerInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	if c.info.PID != 0 && c.info.ServerLife != info.ServerLife {
		c.dropAllLocked(ReasonLifeChanged)
		c.lifeEnded = true
	}
	c.info = info
	c.online = true
	c.setUnsyncedLocked()
	c.log.Info().Int("server_pid", info.PID).Int64("server_start", info.StartTime).Msg("census connected")
}

// onDisconnected marks the census unsynced at once. When the server process
// is gone, its life is over and every session with it: Removed,
// server_exited. Otherwise (the control client was detached, or the server
// is still shutting down) the sessions stay, unsynced, until the next
// connect tells whether the life continues.
func (c *Census) onDisconnected(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	c.online = false
	c.setUnsyncedLocked()
	gone := c.info.PID != 0 && processGone(c.info.PID)
	if gone {
		c.dropAllLocked(ReasonServerExited)
	}
	c.log.Info().Err(cause).Bool("server_gone", gone).Msg("census disconnected")
}

// probeEvery is how often a disconnected census checks whether the old
// server process has died. A SIGKILLed server's sockets close before the
// process is a zombie, so the check at the disconnect itself can be early.
const probeEvery = 50 * time.Millisecond

// awaitingDeath drops every session (server_exited) once the disconnected
// server's process is gone, and reports whether it should be checked again.
func (c *Census) awaitingDeath() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.online || len(c.sessions) == 0 || c.info.PID == 0 {
		return false
	}
	if processGone(c.info.PID) {
		c.dropAllLocked(ReasonServerExited)
		return false
	}
	return true
}

// subscribe installs the census subscription and the pane-died hook on the
// current connection, both at once (one round trip of waiting for Run).
// Failure is logged, not fatal: the periodic reconcile still runs.
func (c *Census) subscribe(ctx context.Context, info tmuxctl.ServerInfo) {
	if c.cfg.exitOnly {
		return
	}
	hooked := make(chan struct{})
	go func() { defer close(hooked); c.setPaneHook(ctx, info) }()
	_, err := c.cl.CommandIn(ctx, info.ServerLife, "refresh-client", "-B", subName+"::"+subFormat)
	if err != nil {
		c.log.Warn().Err(err).Msg("census subscription failed; relying on the periodic reconcile")
	}
	<-hooked
}

// processGone reports whether pid no longer names a live process. A zombie
// counts as gone: it runs no code and holds no sessions.
func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err == nil {
		// The state follows the ")" that closes the command name.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
			st := b[i+2]
			return st == 'Z' || st == 'X'
		}
		return false
	}
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
