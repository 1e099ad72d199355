package census

import (
	"context"
	"time"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// A pane process's exit, told from outside tmux.
//
// tmux tells the census of a pane's death late or not at all at scale: its
// pane-died hook runs a shell and a tmux client per death, the subscription
// shows it within a second, and tmux 3.3a with utempter can miss the SIGCHLD
// of a pane process, so that neither the status nor (when the pty closed
// first) the death is there until another child of the server exits. A
// caller that watches the pane's process itself (lifecycle, with a pidfd per
// generation: proctree.ExitWatch) tells the census the moment it exits, and
// the census then looks at that one session — a read by id, two small
// commands whatever the server's size — instead of waiting for either. The
// census stays the authority on what tmux says: an exit told here is only
// when to look, and what the read shows is what is applied.

// Timings of PaneExited's wait for tmux to reap (vars: tests may shorten them).
var (
	// exitOwnReap is how long tmux is given to reap an exited pane process
	// by itself (its SIGCHLD) before the census pokes it.
	exitOwnReap = 5 * time.Millisecond
	// exitRepoke is how often the poke is repeated while tmux has not reaped.
	exitRepoke = 250 * time.Millisecond
	// exitReapWait bounds the whole wait: the session is read then anyway,
	// and a status that comes later is seen as any other change.
	exitReapWait = 2 * time.Second
	// exitPollMax caps the step of the reap check (starting at 1 ms).
	exitPollMax = 4 * time.Millisecond
)

// PaneExited tells the census that the process of session id's pane (in
// server life life) has exited; reaped reports whether its parent, the tmux
// server, has reaped it since. tmux fills in a dead pane's status when it
// reaps, so the census first waits for that — poking tmux to reap
// (reapPoke) when it does not within exitOwnReap — and then reads the
// session by id on its Run goroutine: the dead pane and its exit status are
// in the census, and its subscribers get the PaneDied change, one round trip
// later. It returns once the read is queued (or ctx is done, or the census
// is on another server life, where the session cannot be). It blocks for the
// wait, so it is called on a goroutine of the caller's own.
func (c *Census) PaneExited(ctx context.Context, life tmuxctl.ServerLife, id string, reaped func() bool) {
	if !validID(id) || !c.onLife(life) {
		return
	}
	c.awaitReap(ctx, life, reaped)
	if ctx.Err() != nil {
		return
	}
	c.lookMu.Lock()
	c.looks[id] = struct{}{}
	c.lookMu.Unlock()
	select {
	case c.lookKick <- struct{}{}:
	default: // a kick is pending: Run takes every queued id with it
	}
}

// OnLife reports whether the census is connected to server life life.
func (c *Census) OnLife(life tmuxctl.ServerLife) bool { return c.onLife(life) }

// onLife reports whether the census is connected to server life life.
func (c *Census) onLife(life tmuxctl.ServerLife) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.online && c.info.ServerLife == life
}

// awaitReap waits until reaped holds, poking tmux when it does not reap by
// itself, for up to exitReapWait. The pokes are sent on the caller's
// goroutine, sharing reapPoke's one-in-flight rule.
func (c *Census) awaitReap(ctx context.Context, life tmuxctl.ServerLife, reaped func() bool) {
	start := time.Now()
	poke := start.Add(exitOwnReap)
	step := time.Millisecond
	t := time.NewTimer(step)
	defer t.Stop()
	for !reaped() {
		now := time.Now()
		if now.Sub(start) > exitReapWait {
			c.log.Debug().Msg("census: an exited pane process was not reaped by tmux; reading its session anyway")
			return
		}
		if !now.Before(poke) {
			c.pokeFor(ctx, life)
			poke = time.Now().Add(exitRepoke)
		}
		t.Reset(step)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		step = min(2*step, exitPollMax)
	}
}

// pokeFor asks for a reap poke and, when none is in flight, sends it (and
// any asked for meanwhile) on the caller's goroutine.
func (c *Census) pokeFor(ctx context.Context, life tmuxctl.ServerLife) {
	c.pokeAgain.Store(true)
	if c.poking.CompareAndSwap(false, true) {
		c.pokeLoop(ctx, life)
	}
}

// takeLooks returns and clears the sessions PaneExited queued (Run only).
func (c *Census) takeLooks() []string {
	c.lookMu.Lock()
	defer c.lookMu.Unlock()
	ids := make([]string, 0, len(c.looks))
	for id := range c.looks {
		ids = append(ids, id)
		delete(c.looks, id)
	}
	return ids
}

// onLooks reads the sessions PaneExited queued, by id, with the burst's
// other reads (one batch in flight; subscription.go startReads); a session
// gone by then is the list's that its end's notification brings.
func (c *Census) onLooks(ctx context.Context, b *burst) {
	ids := c.takeLooks()
	if len(ids) == 0 {
		return
	}
	if b.reads == nil {
		b.reads = map[string]struct{}{}
	}
	for _, id := range ids {
		b.reads[id] = struct{}{}
	}
	c.startReads(ctx, b)
}

// removingFor bounds how long a Removing stands: the kill it announces is
// sent right after, and its notifications follow its reply.
const removingFor = 5 * time.Second

// endNotes is how many notifications a one-window session's end sends that
// would each cost an id-only list: %sessions-changed, %unlinked-window-close.
const endNotes = 2

// Removing tells the census that the caller is about to kill session id (in
// server life life) itself, and confirms it gone on its own (lifecycle's
// killConfirm: kill-session, then has-session until tmux says it is not
// there). The end's notifications are then answered by a read of that one id
// — gone: Removed, as a list would have said — instead of an id-only list,
// which costs tmux ~80 ms at 4,000 sessions in its one thread, where every
// later end (its reap, its read) waits behind it.
//
// What that gives up: a notification absorbed so may have been another's (a
// session created or killed by hand at the same moment); the subscription
// shows such a change within a second (a segment new to the census, or gone
// from tmux but still held, costs an id-only list), and the reconcile is the
// last backstop. An absorption stands for removingFor at most, and a session
// with more windows sends more notifications than are absorbed: those list.
func (c *Census) Removing(life tmuxctl.ServerLife, id string) {
	if !validID(id) || !c.onLife(life) {
		return
	}
	c.lookMu.Lock()
	defer c.lookMu.Unlock()
	until := time.Now().Add(removingFor)
	c.removing[id] = until
	c.absorb += endNotes
	c.absorbTo = until
}

// Gone tells the census that session id (server life life), announced with
// Removing, is proven gone by its caller: the has-session after its kill
// found no such session (ids are never reused within a server life). The
// census drops it as its own read by id would have, without that read —
// two commands and, at 4,000 sessions, one more pass of tmux's loop that
// the next end's pipeline queued behind. It waits for the census's sync
// lock (a list in flight must not add back what it saw before the kill), so
// callers run it on a goroutine of their own.
func (c *Census) Gone(life tmuxctl.ServerLife, id string) {
	if !validID(id) || !c.isRemoving(id) {
		return
	}
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	c.goneSynced(life, id)
}

// TryGone is Gone when the census's sync lock is free, done before it
// returns true: the usual case, and then a read right after the caller's
// (a show after the ended verdict its removal preceded) no longer finds the
// session. It returns false, having done nothing, while a list is in flight:
// the caller runs Gone on a goroutine of its own then.
func (c *Census) TryGone(life tmuxctl.ServerLife, id string) bool {
	if !validID(id) || !c.isRemoving(id) {
		return true
	}
	if !c.syncMu.TryLock() {
		return false
	}
	defer c.syncMu.Unlock()
	c.goneSynced(life, id)
	return true
}

// goneSynced drops session id of life; c.syncMu is held.
func (c *Census) goneSynced(life tmuxctl.ServerLife, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.online || c.info.ServerLife != life {
		return
	}
	c.removedLocked(id, life)
}

// absorbEnd answers an end notification (endsOnly) with reads by id of the
// sessions being removed, when one is expected: true when it did, and the
// notification needs no list. Run only.
func (c *Census) absorbEnd(ctx context.Context, b *burst) bool {
	now := time.Now()
	c.lookMu.Lock()
	if c.absorb <= 0 || now.After(c.absorbTo) {
		c.absorb = 0 // expired: nothing is absorbed for kills long past
		c.lookMu.Unlock()
		return false
	}
	c.absorb--
	for id, until := range c.removing {
		if now.After(until) {
			delete(c.removing, id)
		} else {
			c.looks[id] = struct{}{}
		}
	}
	c.lookMu.Unlock()
	c.onLooks(ctx, b)
	return true
}

// isRemoving reports whether id is being removed by its caller (Removing).
func (c *Census) isRemoving(id string) bool {
	c.lookMu.Lock()
	defer c.lookMu.Unlock()
	_, ok := c.removing[id]
	return ok
}

// doneRemoving forgets a removal once the session is seen gone.
func (c *Census) doneRemoving(id string) {
	c.lookMu.Lock()
	defer c.lookMu.Unlock()
	delete(c.removing, id)
}

// removedLocked drops session id, read gone by id, when its caller is
// removing it (Removing); any other gone read is left to the lists. c.mu is
// held.
func (c *Census) removedLocked(id string, life tmuxctl.ServerLife) {
	if !c.isRemoving(id) {
		return
	}
	// Forgotten also when an earlier read already dropped it: an end sends
	// two notifications, each answered by reads of every pending removal,
	// and one left pending was read again on every end for removingFor —
	// at an end every 60 ms, ~80 stale ids read per end, hundreds of tmux
	// commands in its one thread.
	c.doneRemoving(id)
	e := c.sessions[id]
	if e == nil || e.control {
		return
	}
	c.unindexLocked(e)
	delete(c.sessions, id)
	c.emitLocked(Change{Kind: Removed, Session: e.s, Reason: ReasonGone, Life: life})
}
