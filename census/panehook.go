package census

import (
	"context"
	"strings"
	"time"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// Pane deaths, told at once.
//
// tmux 3.3a sends no control notification when a pane dies under
// remain-on-exit, and what its pane-died hook runs sends none either: every
// command a hook runs, `run-shell -C` included, is queued with notifications
// off (docs/tmux-facts.md §8; checked again here: a hook's rename-window of another
// session's window produced nothing). A command from another client does
// notify. So the hook runs, in the background, tmux itself (the server's own
// binary, /proc/PID/exe, on the server's socket) as a separate client that
// renames the census's control-session window to "skc-died-%P": the control
// client gets `%window-renamed @W skc-died-%P` within milliseconds, and the
// census reads that one session by id. It costs a shell and a tmux client per
// pane death it tells and nothing per session, and it tells only the deaths
// no pidfd watch does (hookCondition); the subscription (about a second)
// stays the fallback when the hook cannot run (no /proc, the control session
// replaced meanwhile, a hook removed by hand).
//
// The hook lives in an array slot of its own (paneDiedHook), so a user's
// `set-hook -g pane-died …` (slot 0) is left alone; it is set again at every
// connect, because it names the connection's control session. Its output
// and failures are discarded: run-shell would otherwise show them in a pane.

// paneDiedHook is the global hook slot the census owns.
const paneDiedHook = "pane-died[7510]"

// diedPrefix leads the control window's name when the hook renames it.
const diedPrefix = "skc-died-"

// TagUnwatched, set to "1" on a session of ours, says that lifecycle could
// not watch its pane process (no pidfd: Linux before 5.3, the fd limit), so
// the pane-died hook must tell its death.
const TagUnwatched = "@skc-unwatched"

// hookCondition is true (tmux's if-shell -F: not empty, not "0") for a pane
// the hook must tell: one in a session without our generation tag (not ours,
// or not yet published — a standby, a create in flight), or in one marked
// TagUnwatched. A published generation's pane process is watched by a pidfd
// (lifecycle, census.PaneExited), which tells its death at once: for it the
// hook's shell and tmux client, forked per death in tmux's one thread, only
// delayed the end (the scale bench's ends at 1,000 sessions: p50 ~280 ms
// with the hook, ~155 ms without; BENCHMARKS.md).
const hookCondition = `#{?#{` + TagGeneration + `},#{` + TagUnwatched + `},1}`

// paneDiedCommand is the hook's command for control session ctl ("$N"): the
// condition is evaluated by tmux itself (no fork), and only a pane it is
// true for costs the shell and the client.
func paneDiedCommand(ctl string) string {
	return `if-shell -F '` + hookCondition + `' { run-shell -b "/proc/#{pid}/exe -S #{q:socket_path} rename-window -t '` + ctl +
		`:' -- '` + diedPrefix + `#{pane_id}' >/dev/null 2>&1 || true" }`
}

// setPaneHook installs the pane-died hook for this connection. Failure is
// logged, not fatal: the subscription still tells deaths within a second.
func (c *Census) setPaneHook(ctx context.Context, info tmuxctl.ServerInfo) {
	if !validID(info.ControlSessionID) {
		return
	}
	_, err := c.cl.CommandIn(ctx, info.ServerLife, "set-hook", "-g", paneDiedHook, paneDiedCommand(info.ControlSessionID))
	if err != nil {
		c.log.Warn().Err(err).Msg("census pane-died hook not set; pane deaths are seen by the subscription only")
	}
}

// reapPoke makes tmux reap a pane process it has not waited for. tmux 3.3a
// (linked with utempter) can miss the SIGCHLD of a pane whose pty closed
// first: the pane is dead, but its status — and with it the pane-died hook —
// waits until some other child of the server exits, which on a quiet server
// may be never. A background `run-shell -b true` is such a child: its exit
// makes tmux's waitpid loop reap every zombie. One poke is in flight at a
// time; a request while one is in flight makes its sender send one more
// after it (pokeLoop), since that one's child may have exited before the
// process the request is about did.
func (c *Census) reapPoke(ctx context.Context) {
	c.pokeAgain.Store(true)
	if !c.poking.CompareAndSwap(false, true) {
		return
	}
	c.mu.RLock()
	life, online := c.info.ServerLife, c.online
	c.mu.RUnlock()
	if !online {
		c.poking.Store(false)
		return
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		c.pokeLoop(ctx, life)
	}()
}

// pokeLoop sends reap pokes while they are asked for; its caller holds
// c.poking, which it gives back when no request is left.
func (c *Census) pokeLoop(ctx context.Context, life tmuxctl.ServerLife) {
	for {
		for c.pokeAgain.Swap(false) {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if _, err := c.cl.CommandIn(pctx, life, "run-shell", "-b", "true"); err != nil {
				c.log.Debug().Err(err).Msg("census reap poke failed")
			}
			cancel()
		}
		c.poking.Store(false)
		// A request that found c.poking still held after the last Swap is
		// ours to send, unless its own caller took c.poking first.
		if !c.pokeAgain.Load() || !c.poking.CompareAndSwap(false, true) {
			return
		}
	}
}

// onWindowRenamed reads by id the session whose pane the hook reported dead
// (its active pane; any other is left to the subscription).
func (c *Census) onWindowRenamed(ctx context.Context, b *burst, text string) {
	_, name, _ := strings.Cut(text, " ")
	pane, ok := strings.CutPrefix(name, diedPrefix)
	if !ok || len(pane) < 2 || pane[0] != '%' {
		return
	}
	c.mu.RLock()
	id := ""
	for sid, e := range c.sessions {
		if e.s.PaneID == pane && !e.control {
			id = sid
			break
		}
	}
	c.mu.RUnlock()
	if id == "" {
		return
	}
	if b.reads == nil {
		b.reads = map[string]struct{}{}
	}
	b.reads[id] = struct{}{}
	c.startReads(ctx, b)
}
