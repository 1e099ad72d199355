package census

import (
	"strconv"
	"testing"

	"github.com/rs/zerolog"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// TestLastNamed: the census remembers the last name of a session it reported
// removed (the newest wearer of a name wins), not while a listed session
// wears the name, and forgets the oldest names past its bound.
func TestLastNamed(t *testing.T) {
	log := zerolog.Nop()
	c := newCensus(nil, &log, defaultConfig())
	life := tmuxctl.ServerLife{PID: 7, StartTime: 9}
	remove := func(id, name string) {
		c.mu.Lock()
		c.emitLocked(Change{Kind: Removed, Session: Session{ID: id, Name: name}, Life: life})
		c.mu.Unlock()
	}
	remove("$1", "by-hand")
	remove("$2", "by-hand")
	if g, ok := c.LastNamed("by-hand"); !ok || g.ID != "$2" || g.Life != life {
		t.Fatalf("LastNamed: %+v %v, want $2 (the newest wearer)", g, ok)
	}
	c.mu.Lock()
	c.byName["by-hand"] = "$3" // listed again: ByName answers for it
	c.mu.Unlock()
	if _, ok := c.LastNamed("by-hand"); ok {
		t.Fatal("LastNamed answered for a name a listed session wears")
	}
	for i := 0; i < maxGoneNames; i++ {
		remove("$"+strconv.Itoa(10+i), "s"+strconv.Itoa(i))
	}
	if _, ok := c.LastNamed("s0"); !ok {
		t.Fatal("s0 forgotten within the bound")
	}
	remove("$99999", "one-more")
	if _, ok := c.LastNamed("s0"); ok {
		t.Fatal("the oldest name kept past the bound")
	}
}
