package census

import "github.com/skc-supervisor/skc-supervisor/tmuxctl"

// Names of sessions gone.
//
// A session renamed by hand is reached by its current name while it is
// listed (ByName). Once it is gone, nothing else remembers that name: the
// fence keeps the name the daemon gave it. So that what was named a moment
// ago by the name `ls` showed can still be named for its end (wait --exit),
// the census keeps the last name of the sessions it reported Removed, the
// newest wearer of each name winning, for a bounded number of names.

// maxGoneNames bounds the names of sessions gone that the census keeps; the
// oldest is forgotten first.
const maxGoneNames = 4096

// GoneSession is a session the census reported Removed: its tmux id and the
// server life it lived in.
type GoneSession struct {
	ID   string
	Life tmuxctl.ServerLife
}

// goneNames is the record of the last names of sessions gone (c.mu).
type goneNames struct {
	byName map[string]GoneSession
	order  []string // names in the order they were last recorded, oldest first
}

// recordGoneLocked remembers that session s of life was removed under its
// last known name. c.mu is held.
func (c *Census) recordGoneLocked(s *Session, life tmuxctl.ServerLife) {
	g := &c.gone
	if g.byName == nil {
		g.byName = map[string]GoneSession{}
	}
	if _, ok := g.byName[s.Name]; ok {
		for i, n := range g.order {
			if n == s.Name {
				g.order = append(g.order[:i], g.order[i+1:]...)
				break
			}
		}
	}
	g.byName[s.Name] = GoneSession{ID: s.ID, Life: life}
	g.order = append(g.order, s.Name)
	if len(g.order) > maxGoneNames {
		delete(g.byName, g.order[0])
		g.order = g.order[1:]
	}
}

// LastNamed returns the session that last wore name when the census saw it
// removed (a session renamed by hand, gone since: its name as `ls` showed
// it), while the census remembers it; false when none did, or a listed
// session wears name now (ByName is the answer then).
func (c *Census) LastNamed(name string) (GoneSession, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if _, listed := c.byName[name]; listed {
		return GoneSession{}, false
	}
	g, ok := c.gone.byName[name]
	return g, ok
}
