package tmuxctl

import (
	"context"
	"strings"
)

// subChange is one -B argument of a refresh-client command: a
// subscription added (name:what:format) or removed (name alone).
type subChange struct {
	name string
	add  bool
}

// refreshArgFlags are refresh-client's flags that take a value (3.3a:
// [-A pane:state] [-B name:what:format] [-C XxY] [-f flags] [-F flags]
// [-t target-client]).
const refreshArgFlags = "ABCfFt"

// subChanges parses a refresh-client command's arguments as tmux's getopt
// does and returns its -B changes. A command aimed at another client (-t)
// returns none: that subscription is not this connection's.
func subChanges(args []string) []subChange {
	if len(args) == 0 || (args[0] != "refresh-client" && args[0] != "refresh") {
		return nil
	}
	var out []subChange
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			break
		}
		for j := 1; j < len(a); j++ {
			if strings.IndexByte(refreshArgFlags, a[j]) < 0 {
				continue
			}
			val := a[j+1:]
			if val == "" && i+1 < len(args) {
				i++
				val = args[i]
			}
			switch a[j] {
			case 't':
				return nil
			case 'B':
				name, _, add := strings.Cut(val, ":")
				out = append(out, subChange{name: name, add: add})
			}
			break
		}
	}
	return out
}

// trackSubs records the subscriptions a command is about to add, before it
// is sent: its outcome may never be known (timeout, server gone), and
// removing a name that is not subscribed is harmless.
func (c *Conn) trackSubs(changes []subChange) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range changes {
		if ch.add {
			if c.subs == nil {
				c.subs = make(map[string]struct{})
			}
			c.subs[ch.name] = struct{}{}
		}
	}
}

// untrackSubs forgets the subscriptions a command removed, once tmux has
// confirmed it.
func (c *Conn) untrackSubs(changes []subChange) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range changes {
		if !ch.add {
			delete(c.subs, ch.name)
		}
	}
}

// unsubscribeAll removes every subscription registered through this Conn
// and waits for the replies, bounded by Config.CloseTimeout; Close calls it
// before closing stdin. tmux 3.3a's subscription timer has no NULL-session
// guard (docs/tmux-facts.md §6, fixed upstream in 3.7): a control client that exits with
// a subscription can crash the server while its session is already gone.
// Removing the subscriptions first leaves the timer nothing to evaluate.
func (c *Conn) unsubscribeAll() {
	c.mu.Lock()
	if c.ended != nil || c.stdinDone || len(c.subs) == 0 {
		c.mu.Unlock()
		return
	}
	names := make([]string, 0, len(c.subs))
	for n := range c.subs {
		names = append(names, n)
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CloseTimeout)
	defer cancel()
	errs := make(chan error, len(names))
	for _, n := range names {
		go func() {
			_, err := c.Command(ctx, "refresh-client", "-B", n)
			errs <- err
		}()
	}
	for range names {
		if err := <-errs; err != nil {
			c.log.Warn().Err(err).Msg("removing a subscription before close failed")
		}
	}
}
