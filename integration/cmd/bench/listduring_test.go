package main

import (
	"testing"
	"time"
)

// TestListDuring: a pipeline overlaps a list-sessions sent before it ends and
// answered after it starts (or never answered), and no other.
func TestListDuring(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	evs := []wireEvent{
		{cmd: &wireCmd{verb: "list-sessions", sent: at(0), done: at(100)}, at: at(0)},
		{cmd: &wireCmd{verb: "kill-session", sent: at(150), done: at(160)}, at: at(150)},
		{cmd: &wireCmd{verb: "list-sessions", sent: at(300)}, at: at(300)},
	}
	lists := listCmds(evs)
	for _, c := range []struct {
		from, to int
		want     bool
	}{{50, 60, true}, {90, 200, true}, {110, 200, false}, {250, 290, false}, {250, 310, true}} {
		if got := listDuring(lists, at(c.from), at(c.to)); got != c.want {
			t.Errorf("pipeline %d–%d ms: overlap %v, want %v", c.from, c.to, got, c.want)
		}
	}
}
