package census

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// stallClock is the census's clock with a test-controlled jump: a daemon
// stopped for a while (SIGSTOP 2–4 s, a debugger) sees its wall clock jump.
type stallClock struct{ off atomic.Int64 }

func (s *stallClock) now() time.Time        { return time.Now().Add(time.Duration(s.off.Load())) }
func (s *stallClock) stall(d time.Duration) { s.off.Add(int64(d)) }

// A stall of the daemon with an id-only list in flight, then a kill and a
// rename: both show within one normal sync (maxDelay, 200 ms here), not
// after a multiple of the stall. The stall is an hour on the census's clock,
// so the old behaviour (the next id list due 5 × the measured cost later,
// and that pending list swallowing the rename's full trigger) would take
// hours; the waits below give up after 30 s. quiet is an hour so that every
// trigger after the first is inside one burst: the mid-burst path.
func TestStallThenRenameAndKill(t *testing.T) {
	f := newFake()
	f.lines = []string{fakeLine, fakeLine2}
	cfg := testConfig()
	cfg.quiet = time.Hour
	clk := &stallClock{}
	info := tmuxctl.ServerInfo{ServerLife: tmuxctl.ServerLife{PID: os.Getpid(), StartTime: 1}, ControlSessionID: "$0"}
	c := startFakeInfo(t, f, cfg, info, func(c *Census) { c.now = clk.now })
	sub := c.Subscribe(10)
	defer sub.Close()
	_, ids0 := f.counts()

	f.notify("%sessions-changed") // a burst's leading edge: an id-only list
	eventually(t, "leading id list", func() bool { _, ids := f.counts(); return ids == ids0+1 })
	hold := make(chan struct{})
	f.mu.Lock()
	f.hold = hold
	f.mu.Unlock()
	f.notify("%sessions-changed") // mid-burst: an id-only list of its own, held
	eventually(t, "mid-burst id list in flight", func() bool { _, ids := f.counts(); return ids == ids0+2 })
	clk.stall(time.Hour) // the daemon is stopped while that list is answered
	f.mu.Lock()
	f.hold = nil
	f.mu.Unlock()
	close(hold)
	eventually(t, "stalled list done", func() bool { return f.running.Load() == 0 && len(f.events) == 0 })
	// The notifications queued during the stall: the first is a burst's
	// leading edge again (an hour has passed on the clock), the next ones
	// are inside that burst.
	f.notify("%sessions-changed")
	eventually(t, "post-stall leading list", func() bool { _, ids := f.counts(); return ids == ids0+3 })
	eventually(t, "post-stall leading list done", func() bool { return f.running.Load() == 0 })

	f.setLines(fakeLine2Renamed) // $1 killed, $2 renamed
	f.notify("%sessions-changed")
	f.notify("%session-renamed")
	got := map[string]Change{}
	for len(got) < 2 {
		ch := next(t, sub)
		got[ch.Session.ID] = ch
	}
	if ch := got["$1"]; ch.Kind != Removed || ch.Reason != ReasonGone {
		t.Errorf("$1: want removed (gone), got %s %q", ch.Kind, ch.Reason)
	}
	if ch := got["$2"]; ch.Kind != Changed || ch.Session.Name != "renamed" {
		t.Errorf("$2: want changed to name renamed, got %s %q", ch.Kind, ch.Session.Name)
	}
}

const fakeLine2Renamed = "$2\t1700000000\t0\t%2\t101\t0\t\t\t1700000000\t\t\t\t\t\t\trenamed"

// A full trigger (a rename) arriving while an id-only list waits for its
// spacing is due by its own debounce, not by the id list's spacing: the
// burst's state machine, driven directly.
func TestFullTriggerNotSwallowedByPendingIDList(t *testing.T) {
	c := newCensus(newFake(), nil, testConfig())
	now := time.Now()
	c.now = func() time.Time { return now }
	b := newBurst()
	defer b.timer.Stop()
	b.last = now
	b.pending, b.hurry, b.first = true, true, now
	c.arm(b, now, now.Add(time.Hour)) // an id list held back by its spacing
	c.trigger(context.Background(), b, true)
	if limit := now.Add(c.cfg.maxDelay); b.due.After(limit) || !b.full {
		t.Fatalf("full trigger due %v after it (full %v); want a full list within maxDelay %v",
			b.due.Sub(now), b.full, c.cfg.maxDelay)
	}
	c.trigger(context.Background(), b, false) // a later end does not push it back
	if limit := now.Add(c.cfg.maxDelay); b.due.After(limit) {
		t.Fatalf("a light trigger moved the full list to %v", b.due.Sub(now))
	}
	// The spacing itself is bounded whatever the last list's measured cost.
	b.idStart, b.idCost = now, time.Hour
	if due := c.idListDue(b); due.After(now.Add(c.cfg.maxDelay)) {
		t.Fatalf("id list spacing %v after a stalled list; want at most maxDelay", due.Sub(now))
	}
}
