package census

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// A pane's death under remain-on-exit (no notification in tmux 3.3a) is
// read by id when the subscription shows it — no list — and told as a
// Changed with PaneDied; the exit status, which tmux fills in a tick later,
// follows as another Changed.
func TestPaneDeathReadByID(t *testing.T) {
	f := newFake()
	f.lines = []string{fakeLine, fakeLine2}
	cfg := testConfig()
	c := startFake(t, f, cfg)
	sub := c.Subscribe(10)
	defer sub.Close()
	f.sub("$1/000//0// $2/000//0// ")
	eventually(t, "first value's list", func() bool { full, _ := f.counts(); return full == 2 })
	full0, ids0 := f.counts()
	reads0 := f.readCount()

	dead := strings.Replace(fakeLine, "\t100\t0\t\t\t", "\t100\t1\t\t\t", 1)
	f.setLines(dead, fakeLine2)
	f.sub("$1/000/./0// $2/000//0// ")
	ch := next(t, sub)
	if ch.Kind != Changed || ch.Session.ID != "$1" || !ch.Session.PaneDead || !ch.PaneDied || ch.Session.PaneDeadStatus != nil {
		t.Fatalf("want $1 changed, pane died, no status yet; got %+v", ch)
	}
	eventually(t, "a reap poke for the missing status", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.sent["run-shell"] == 1
	})
	f.setLines(strings.Replace(fakeLine, "\t100\t0\t\t\t", "\t100\t1\t3\t\t", 1), fakeLine2)
	f.sub("$1/000/3./0// $2/000//0// ")
	ch = next(t, sub)
	if ch.Kind != Changed || ch.PaneDied || ch.Session.PaneDeadStatus == nil || *ch.Session.PaneDeadStatus != 3 {
		t.Fatalf("want $1 changed with status 3; got %+v", ch)
	}
	if full, ids := f.counts(); full != full0 || ids != ids0 || f.readCount()-reads0 != 2 {
		t.Fatalf("two pane changes cost %d full lists, %d id lists, %d reads; want 0, 0, 2",
			full-full0, ids-ids0, f.readCount()-reads0)
	}
}

// A session the census holds alive (read at its creation) whose first
// segment already shows its pane dead — it was created and died within one
// subscription tick — is read by id: comparing segments only with the
// previous value saw nothing to do, and the census kept pane_dead false until
// the periodic reconcile (BenchmarkBurst100/forks, 27–47 s).
func TestNewSegmentAlreadyDead(t *testing.T) {
	f, c := startOneSession(t)
	sub := c.Subscribe(10)
	defer sub.Close()
	f.setLines(fakeLine, strings.Replace(fakeLine2, "\t101\t0\t\t\t", "\t101\t1\t0\t\t", 1))
	f.notify("%sessions-changed") // the create: $2 read by id while its pane ran
	if ch := next(t, sub); ch.Kind != Added || ch.Session.ID != "$2" {
		t.Fatalf("want $2 added, got %+v", ch)
	}
	c.mu.Lock() // as read a moment before the pane exited
	e := *c.sessions["$2"]
	e.s.PaneDead, e.s.PaneDeadStatus = false, nil
	c.sessions["$2"] = &e
	c.mu.Unlock()
	f.sub("$1/000//0// $2/000/0./0// ")
	if ch := next(t, sub); ch.Kind != Changed || !ch.PaneDied || ch.Session.PaneDeadStatus == nil {
		t.Fatalf("want $2 changed, pane died with its status; got %+v", ch)
	}
}

// Pane output moves a session's Activity from the subscription value
// itself: no list, no read by id.
func TestActivityFromSubscription(t *testing.T) {
	f := newFake()
	f.lines = []string{fakeLine}
	now := time.Unix(1800000500, 0)
	info := tmuxctl.ServerInfo{ServerLife: tmuxctl.ServerLife{PID: os.Getpid(), StartTime: 1}, ControlSessionID: "$0"}
	c := startFakeInfo(t, f, testConfig(), info, func(c *Census) { c.now = func() time.Time { return now } })
	sub := c.Subscribe(10)
	defer sub.Close()
	if s, _ := c.ByID("$1"); !s.Activity.IsZero() {
		t.Fatalf("no output since creation: want zero activity, got %v", s.Activity)
	}
	f.sub("$1/000//0// ")
	eventually(t, "first value's list", func() bool { full, _ := f.counts(); return full == 2 })
	full0, ids0 := f.counts()
	reads0 := f.readCount()
	f.sub("$1/123//0// ")
	ch := next(t, sub)
	if want := time.Unix(1800000123, 0); ch.Kind != Changed || !ch.Session.Activity.Equal(want) {
		t.Fatalf("want $1's activity %v, got %+v", want, ch)
	}
	f.sub("$1/499//0// ")
	if ch := next(t, sub); !ch.Session.Activity.Equal(time.Unix(1800000499, 0)) {
		t.Fatalf("want activity 1800000499, got %v", ch.Session.Activity)
	}
	if full, ids := f.counts(); full != full0 || ids != ids0 || f.readCount() != reads0 {
		t.Fatalf("activity cost %d full lists, %d id lists, %d reads; want none", full-full0, ids-ids0, f.readCount()-reads0)
	}
}

func TestActivityFrom(t *testing.T) {
	now := time.Unix(1800000005, 0)
	for _, tc := range []struct {
		digits string
		want   int64
	}{
		{"005", 1800000005}, {"006", 1800000006}, {"004", 1800000004}, {"999", 1799999999}, {"007", 1799999007},
	} {
		got, ok := activityFrom(tc.digits, now)
		if !ok || got.Unix() != tc.want {
			t.Errorf("%s at %d: got %d %v, want %d", tc.digits, now.Unix(), got.Unix(), ok, tc.want)
		}
	}
	if _, ok := activityFrom("x", now); ok {
		t.Error("non-digits accepted")
	}
}

// Output within the session's creation second leaves window_activity at the
// creation time; wroteFlag's "+" in a list line tells it apart from no
// output, and a session the subscription first shows without activity is
// read by id once its creation second is over, which finds it.
func TestActivityWithinCreationSecond(t *testing.T) {
	var s Session
	line := strings.Split(strings.Replace(fakeLine, "\t1700000000\t\t", "\t1700000000+\t\t", 1), "\t")
	if !parseBase(&s, line) || !s.Activity.Equal(time.Unix(1700000000, 0)) {
		t.Fatalf("list line with the flag: activity %v", s.Activity)
	}
	if !parseBase(&s, strings.Split(fakeLine, "\t")) || !s.Activity.IsZero() {
		t.Fatalf("list line without output: activity %v", s.Activity)
	}

	f, c := startOneSession(t)
	sub := c.Subscribe(10)
	defer sub.Close()
	created := time.Now().Unix()
	quiet := fmt.Sprintf("$2\t%d\t0\t%%2\t101\t0\t\t\t%d\t\t\t\t\t\t\ttwo", created, created)
	f.setLines(fakeLine, quiet)
	f.notify("%sessions-changed")
	if ch := next(t, sub); ch.Kind != Added || ch.Session.ID != "$2" || !ch.Session.Activity.IsZero() {
		t.Fatalf("want $2 added without activity, got %+v", ch)
	}
	// The banner written in the creation second: only the flag shows it.
	f.setLines(fakeLine, strings.Replace(quiet, fmt.Sprintf("\t%d\t\t", created), fmt.Sprintf("\t%d+\t\t", created), 1))
	f.sub(fmt.Sprintf("$1/000//0// $2/%03d//0// ", created%activityMod))
	ch := next(t, sub)
	if ch.Kind != Changed || ch.Session.ID != "$2" || ch.Session.Activity.Unix() != created {
		t.Fatalf("want $2's activity at its creation %d, got %+v", created, ch)
	}
}

func TestActivityAt(t *testing.T) {
	for _, tc := range []struct {
		act, created int64
		wrote        bool
		want         int64 // 0: none
	}{
		{100, 100, false, 0}, {100, 100, true, 100}, {99, 100, true, 0}, {101, 100, false, 101}, {101, 100, true, 101},
	} {
		got := activityAt(tc.act, tc.created, tc.wrote)
		if tc.want == 0 && !got.IsZero() || tc.want != 0 && got.Unix() != tc.want {
			t.Errorf("%+v: got %v", tc, got)
		}
	}
}

// A session first seen by the subscription already dead without a status —
// created and dead within one tick, before the census held it — gets a reap
// poke, and while the value still shows it so, another after stuckFirst:
// tmux 3.3a may otherwise never collect the status (stuck.go; how
// TestPaneDeathsFollowTmux once waited out its 30 s in CI).
func TestStuckPaneIsPokedAgain(t *testing.T) {
	f, c := startOneSession(t)
	f.setLines(fakeLine, strings.Replace(fakeLine2, "\t101\t0\t\t\t", "\t101\t1\t\t\t", 1))
	f.sub("$1/000//0// $2/000/./0// ")
	pokes := func(n int) func() bool {
		return func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.sent["run-shell"] >= n
		}
	}
	eventually(t, "a poke for the new session's missing status", pokes(1))
	eventually(t, "another while the value still shows it", pokes(2))
	if s, ok := c.ByID("$2"); !ok || !s.PaneDead {
		t.Fatalf("want $2 held, its pane dead; got %+v %v", s, ok)
	}
}

// startOneSession starts a census on a fake server of one session ($1) and
// returns once the subscription's first value has had its full list.
func startOneSession(t *testing.T) (*fakeTmux, *Census) {
	t.Helper()
	f := newFake()
	f.lines = []string{fakeLine}
	c := startFake(t, f, testConfig())
	f.sub("$1/000//0// ")
	eventually(t, "first value's list", func() bool { full, _ := f.counts(); return full == 2 })
	return f, c
}
