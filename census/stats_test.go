package census

import (
	"testing"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// statsMatch checks the incremental counts against a full Snapshot.
func statsMatch(t *testing.T, c *Census) Stats {
	t.Helper()
	st := c.Stats()
	managed, unmanaged := 0, 0
	for _, s := range c.Snapshot().Sessions {
		if s.Managed {
			managed++
		} else {
			unmanaged++
		}
	}
	if st.Managed != managed || st.Unmanaged != unmanaged {
		t.Fatalf("Stats %d managed %d unmanaged, Snapshot %d and %d", st.Managed, st.Unmanaged, managed, unmanaged)
	}
	return st
}

func TestStatsCountsFollowApply(t *testing.T) {
	life := tmuxctl.ServerLife{Socket: "s", PID: 10, StartTime: 1}
	c := offline(life)
	if st := statsMatch(t, c); st.Synced || st.Managed+st.Unmanaged != 0 {
		t.Fatalf("fresh census: %+v", st)
	}
	ctl := entryFor(0, "skc-control", "")
	ctl.control = true
	steps := [][]*entry{
		{ctl, entryFor(1, "a", digest(1)), entryFor(2, "b", ""), entryFor(3, "c", "")},
		{ctl, entryFor(1, "a", ""), entryFor(2, "b", digest(2)), entryFor(3, "c", digest(3))}, // tags changed
		{ctl, entryFor(2, "b", digest(2))},                                                    // sessions gone
		{entryFor(0, "now-visible", ""), entryFor(2, "b", digest(2))},                         // control tag removed
	}
	want := [][2]int{{1, 2}, {2, 1}, {1, 0}, {1, 1}}
	for i, es := range steps {
		if err := c.apply(c.epoch, life, es); err != nil {
			t.Fatal(err)
		}
		st := statsMatch(t, c)
		if !st.Synced || st.Managed != want[i][0] || st.Unmanaged != want[i][1] {
			t.Fatalf("step %d: %+v, want managed/unmanaged %v", i, st, want[i])
		}
	}
	c.mu.Lock()
	c.dropAllLocked(ReasonServerExited)
	c.setUnsyncedLocked()
	c.mu.Unlock()
	if st := statsMatch(t, c); st.Synced || st.Managed+st.Unmanaged != 0 {
		t.Fatalf("after the server exited: %+v", st)
	}
}

func TestStatsCountsResyncMarks(t *testing.T) {
	life := tmuxctl.ServerLife{Socket: "s", PID: 10, StartTime: 1}
	c := offline(life)
	slow := c.Subscribe(1)
	defer slow.Close()
	for i := 1; i <= 4; i++ { // each apply adds one session: overflows at the second
		es := make([]*entry, 0, i)
		for k := 1; k <= i; k++ {
			es = append(es, entryFor(k, "s"+string(rune('0'+k)), ""))
		}
		if err := c.apply(c.epoch, life, es); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.Stats().Resyncs; n != 1 {
		t.Fatalf("Resyncs = %d, want 1 (one mark per overflow)", n)
	}
	<-slow.C()
	<-slow.C() // the Resync mark: the subscriber has caught up
	if err := c.apply(c.epoch, life, []*entry{entryFor(9, "x", "")}); err != nil {
		t.Fatal(err)
	}
	if err := c.apply(c.epoch, life, []*entry{entryFor(8, "y", "")}); err != nil {
		t.Fatal(err)
	}
	if n := c.Stats().Resyncs; n != 2 {
		t.Fatalf("Resyncs = %d after a second overflow, want 2", n)
	}
}

// On real tmux: counts, relists, the last sync duration and the
// subscription's lines all move as the server changes.
func TestStatsOnTmux(t *testing.T) {
	r := newRig(t, nil)
	st := statsMatch(t, r.c)
	if !st.Synced || st.Relists < 1 || st.LastSyncDuration <= 0 || st.Managed+st.Unmanaged != 0 {
		t.Fatalf("after the first sync: %+v", st)
	}
	r.tmux("new-session", "-d", "-s", "plain", "cat")
	r.tmux("new-session", "-d", "-s", "ours", "cat")
	eventually(t, "two sessions", func() bool { s := r.c.Stats(); return s.Unmanaged == 2 })
	lines := r.c.Stats().SubscriptionLines
	r.tmux("set-option", "-t", "=ours:", TagIdentity, digest(1)) // only the subscription sees this
	eventually(t, "tagged session counted managed", func() bool {
		s := r.c.Stats()
		return s.Managed == 1 && s.Unmanaged == 1 && s.SubscriptionLines > lines
	})
	st2 := statsMatch(t, r.c)
	if st2.Relists <= st.Relists || st2.Confirms < 2 {
		t.Fatalf("relists/confirms did not move: before %+v after %+v", st, st2)
	}
}
