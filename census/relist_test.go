package census

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// fakeTmux is a scripted tmuxClient: it answers the sync's commands from a
// fixed session list, counts list-sessions commands, and can hold them (to
// keep a re-list in flight) or fail them.
type fakeTmux struct {
	events chan tmuxctl.Event

	mu      sync.Mutex
	lines   []string // list-sessions -F listFormat lines
	hold    chan struct{}
	fail    error
	lists   int             // list-sessions commands received (full and id-only)
	idLists int             // id-only list-sessions commands received
	reads   int             // display-message reads by id
	gone    map[string]bool // ids display-message no longer finds (killed after the list)
	// noControl leaves the control session ($0, fakeControl) out of the
	// lists, as a server that is exiting can answer.
	noControl bool
	// script, while set, answers every command with the next reply block
	// of a replayed stream (replay_test.go); exited fails them once the
	// stream's %exit was read.
	sent    map[string]int // commands received, by name
	script  chan tmuxctl.Record
	exited  chan struct{}
	num     uint64 // tmux's command counter: every reply gets the next number
	running atomic.Int32
	maxRun  atomic.Int32 // most list-sessions in flight at once
}

func newFake() *fakeTmux { return &fakeTmux{events: make(chan tmuxctl.Event, 1000)} }

func (f *fakeTmux) Events() <-chan tmuxctl.Event { return f.events }

func (f *fakeTmux) CommandIn(ctx context.Context, life tmuxctl.ServerLife, args ...string) (tmuxctl.Reply, error) {
	f.mu.Lock()
	script, exited := f.script, f.exited
	f.mu.Unlock()
	if script != nil {
		return replayed(ctx, script, exited, args)
	}
	if args[0] == "display-message" {
		return f.displayByID(args[3]), nil
	}
	f.mu.Lock()
	f.num++
	num := f.num
	if f.sent == nil {
		f.sent = map[string]int{}
	}
	f.sent[args[0]]++
	f.mu.Unlock()
	if args[0] != "list-sessions" {
		return tmuxctl.Reply{}, nil
	}
	n := f.running.Add(1)
	defer f.running.Add(-1)
	for {
		m := f.maxRun.Load()
		if n <= m || f.maxRun.CompareAndSwap(m, n) {
			break
		}
	}
	f.mu.Lock()
	f.lists++
	hold, fail, lines := f.hold, f.fail, append([]string{fakeControl}, f.lines...)
	if f.noControl {
		lines = lines[1:]
	}
	if args[2] == "#{session_id}" {
		f.idLists++
		for i, l := range lines {
			lines[i], _, _ = strings.Cut(l, "\t")
		}
	}
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return tmuxctl.Reply{}, ctx.Err()
		}
	}
	if fail != nil {
		return tmuxctl.Reply{}, fail
	}
	return tmuxctl.Reply{Lines: lines, Number: num}, nil
}

// displayByID answers `display-message -p -t ID baseFormat` from the fake's
// list lines (base fields and name), empty when the id is not listed.
func (f *fakeTmux) displayByID(id string) tmuxctl.Reply {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	f.num++
	if f.gone[id] {
		return tmuxctl.Reply{Number: f.num}
	}
	for _, l := range f.lines {
		fs := strings.Split(l, "\t")
		if fs[0] == id {
			return tmuxctl.Reply{Lines: []string{strings.Join(append(fs[:baseFields:baseFields], fs[len(fs)-1]), "\t")}, Number: f.num}
		}
	}
	return tmuxctl.Reply{}
}

func (f *fakeTmux) readCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

func (f *fakeTmux) listCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}

func (f *fakeTmux) counts() (full, ids int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists - f.idLists, f.idLists
}

func (f *fakeTmux) setLines(lines ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lines = lines
}

func (f *fakeTmux) sub(value string) {
	f.events <- tmuxctl.Event{Kind: tmuxctl.Notify, Note: tmuxctl.Notification{
		Name: "%subscription-changed", Text: subName + " $0 - - - : " + value}}
}

func (f *fakeTmux) notify(name string) {
	f.events <- tmuxctl.Event{Kind: tmuxctl.Notify, Note: tmuxctl.Notification{Name: name}}
}

// startFake runs a census on f with cfg, connected, and waits for the first sync.
func startFake(t *testing.T, f *fakeTmux, cfg config) *Census {
	t.Helper()
	info := tmuxctl.ServerInfo{ServerLife: tmuxctl.ServerLife{PID: os.Getpid(), StartTime: 1}, ControlSessionID: "$0"}
	return startFakeInfo(t, f, cfg, info, nil)
}

// startFakeInfo is startFake for a server info of the test's choosing; setup,
// when not nil, adjusts the census before it runs.
func startFakeInfo(t *testing.T, f *fakeTmux, cfg config, info tmuxctl.ServerInfo, setup func(*Census)) *Census {
	t.Helper()
	c := newCensus(f, nil, cfg)
	if setup != nil {
		setup(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	f.events <- tmuxctl.Event{Kind: tmuxctl.Connected, Info: info}
	eventually(t, "first sync", c.Synced)
	return c
}

// fakeControl is the list line of the control session, $0, which every
// list of a live server shows.
const fakeControl = "$0\t1700000000\t1\t%0\t99\t0\t\t\t1700000000\t1\t\t\t\t\t\tskc-control"

const fakeLine = "$1\t1700000000\t0\t%1\t100\t0\t\t\t1700000000\t\t\t\t\t\t\tone"

// A lone notification re-lists at once (leading edge): with a quiet period
// and a maximum delay of an hour, only the leading edge can run it.
func TestLeadingEdgeRelist(t *testing.T) {
	f := newFake()
	f.lines = []string{fakeLine}
	cfg := testConfig()
	cfg.quiet, cfg.maxDelay = time.Hour, time.Hour
	c := startFake(t, f, cfg)
	sub := c.Subscribe(10)
	defer sub.Close()
	before := f.listCount()
	f.mu.Lock()
	f.lines = nil // the session ended
	f.mu.Unlock()
	f.notify("%sessions-changed")
	if ch := next(t, sub); ch.Kind != Removed || ch.Session.ID != "$1" {
		t.Fatalf("want $1 removed, got %+v", ch)
	}
	if n := f.listCount() - before; n != 1 {
		t.Fatalf("one notification cost %d re-lists, want 1", n)
	}
}

// A burst of notifications arriving while a re-list is in flight costs
// exactly one more re-list after it, and never two at once.
func TestBurstWhileInFlightOneTrailing(t *testing.T) {
	f := newFake()
	cfg := testConfig()
	cfg.quiet, cfg.maxDelay = time.Millisecond, time.Millisecond
	c := startFake(t, f, cfg)
	before := f.listCount()
	hold := make(chan struct{})
	f.mu.Lock()
	f.hold = hold
	f.mu.Unlock()
	f.notify("%sessions-changed") // leading edge: starts a re-list, held
	eventually(t, "leading re-list in flight", func() bool { return f.listCount()-before == 1 })
	for i := 0; i < 100; i++ {
		f.notify("%unlinked-window-add")
	}
	eventually(t, "burst consumed", func() bool { return len(f.events) == 0 })
	f.mu.Lock()
	f.hold = nil
	f.mu.Unlock()
	close(hold)
	eventually(t, "trailing re-list", func() bool { return f.listCount()-before == 2 })
	time.Sleep(50 * cfg.maxDelay) // room for any further (wrong) re-list
	if n := f.listCount() - before; n != 2 {
		t.Fatalf("a 101-notification burst cost %d re-lists, want 2", n)
	}
	if m := f.maxRun.Load(); m != 1 {
		t.Fatalf("%d re-lists were in flight at once", m)
	}
	_ = c
}

// A failing re-list is retried with exponential backoff, one at a time, and
// notifications do not bring the retry forward.
func TestRetryBackoff(t *testing.T) {
	f := newFake()
	cfg := testConfig()
	cfg.retry, cfg.retryMax = 20*time.Millisecond, 80*time.Millisecond
	c := startFake(t, f, cfg)
	_ = c
	f.mu.Lock()
	f.fail = errors.New("command timed out")
	f.mu.Unlock()
	before := f.listCount()
	f.notify("%sessions-changed")
	eventually(t, "first failure", func() bool { return f.listCount()-before >= 1 })
	// Flood with notifications for a while: they must not add re-lists.
	stop := time.Now().Add(600 * time.Millisecond)
	for time.Now().Before(stop) {
		f.notify("%sessions-changed")
		time.Sleep(2 * time.Millisecond)
	}
	n := f.listCount() - before
	// 600 ms of backoff 20, 40, 80, 80, … ms allows at most ~10 attempts;
	// without backoff every notification (~300) could start one.
	t.Logf("failed re-lists in 600 ms of notifications: %d", n)
	if n > 12 || n < 2 {
		t.Fatalf("%d re-list attempts; want a backed-off handful", n)
	}
	if m := f.maxRun.Load(); m != 1 {
		t.Fatalf("%d re-lists were in flight at once", m)
	}
	f.mu.Lock()
	f.fail = nil
	f.mu.Unlock()
	eventually(t, "recovered", func() bool { return c.Synced() && c.lastSync.Load() > 0 })
}

const fakeLine2 = "$2\t1700000000\t0\t%2\t101\t0\t\t\t1700000000\t\t\t\t\t\t\ttwo"

// Session ends cost an id-only list, not a full one; a new id in it is read
// by id, and any other notification takes the full list.
func TestEndsUseIDList(t *testing.T) {
	f := newFake()
	f.lines = []string{fakeLine, fakeLine2}
	cfg := testConfig()
	cfg.quiet, cfg.maxDelay = 0, 0 // every trigger is a leading edge
	c := startFake(t, f, cfg)
	sub := c.Subscribe(10)
	defer sub.Close()
	full0, ids0 := f.counts()

	f.setLines(fakeLine2)
	f.notify("%sessions-changed")
	if ch := next(t, sub); ch.Kind != Removed || ch.Session.ID != "$1" {
		t.Fatalf("want $1 removed, got %+v", ch)
	}
	if full, ids := f.counts(); full != full0 || ids != ids0+1 {
		t.Fatalf("an end cost %d full and %d id-only lists, want 0 and 1", full-full0, ids-ids0)
	}

	// A create also sends %sessions-changed: the new id is read by id, not
	// with the full list.
	f.setLines(fakeLine2, fakeLine3)
	f.notify("%sessions-changed")
	if ch := next(t, sub); ch.Kind != Added || ch.Session.ID != "$3" || ch.Session.Name != "three" || ch.Session.PanePID != 102 {
		t.Fatalf("want $3 added, got %+v", ch)
	}
	if full, ids := f.counts(); full != full0 || ids != ids0+2 {
		t.Fatalf("a create cost %d full and %d id-only lists, want 0 and 2", full-full0, ids-ids0)
	}
}

const fakeLine3 = "$3\t1700000000\t0\t%3\t102\t0\t\t\t1700000000\t\t\t\t\t\t\tthree"

// A subscription change that only drops or adds sessions costs an id-only
// list while the census still holds a dropped one or lacks an added one,
// nothing otherwise; a change of a held session's segment that the census
// does not hold yet is read by id, never with a list.
func TestSubscriptionDropsOnly(t *testing.T) {
	f := newFake()
	f.lines = []string{fakeLine, fakeLine2}
	cfg := testConfig()
	cfg.quiet, cfg.maxDelay = 0, 0 // every trigger is a leading edge
	c := startFake(t, f, cfg)
	sub := c.Subscribe(10)
	defer sub.Close()
	reads0 := f.readCount()
	settle := func(full, ids, reads int) {
		t.Helper()
		eventually(t, "lists", func() bool {
			a, b := f.counts()
			return a == full && b == ids && f.readCount()-reads0 == reads
		})
	}
	full, ids := f.counts()
	f.sub("$1/000//0// $2/000//0// ")
	full++ // the first value of a connection is compared with nothing
	settle(full, ids, 0)

	f.setLines(fakeLine2)
	f.sub("$2/000//0// ") // $1 ended, the census still holds it
	if ch := next(t, sub); ch.Kind != Removed || ch.Session.ID != "$1" {
		t.Fatalf("want $1 removed, got %+v", ch)
	}
	ids++
	settle(full, ids, 0)

	f.notify("%sessions-changed") // the same end, seen by notification: id list
	ids++
	settle(full, ids, 0)
	f.sub("$2/000//0// $9/000//0// ")
	ids++ // a new session's segment, unknown to the census: id list
	settle(full, ids, 0)
	f.sub("$9/000//0// ") // $2 dropped, but it is in the census: id list
	ids++
	settle(full, ids, 0)
	f.sub("") // $9 dropped: not in the census, nothing to do
	f.setLines(strings.Replace(fakeLine2, "\t0\t%2", "\t1\t%2", 1))
	f.sub("$2/000//1// ") // attached changed: read by id, no list
	if ch := next(t, sub); ch.Kind != Changed || ch.Session.Attached != 1 {
		t.Fatalf("want $2 changed to 1 attached, got %+v", ch)
	}
	settle(full, ids, 1)
}

// A notification that needs the full list, arriving while an id-only list
// is in flight, makes the trailing re-list a full one.
func TestFullTriggerDuringIDList(t *testing.T) {
	f := newFake()
	f.lines = []string{fakeLine}
	cfg := testConfig()
	cfg.quiet, cfg.maxDelay = time.Millisecond, time.Millisecond
	startFake(t, f, cfg)
	full0, ids0 := f.counts()
	hold := make(chan struct{})
	f.mu.Lock()
	f.hold = hold
	f.mu.Unlock()
	f.notify("%sessions-changed") // leading edge: id-only, held
	eventually(t, "id list in flight", func() bool { _, ids := f.counts(); return ids == ids0+1 })
	f.notify("%session-renamed")
	eventually(t, "consumed", func() bool { return len(f.events) == 0 })
	f.mu.Lock()
	f.hold = nil
	f.mu.Unlock()
	close(hold)
	eventually(t, "trailing full re-list", func() bool { full, _ := f.counts(); return full == full0+1 })
	if _, ids := f.counts(); ids != ids0+1 {
		t.Fatalf("%d id-only lists, want 1", ids-ids0)
	}
}

// A session end inside a burst (right after a create, say) is told by an
// id-only list at once, not after the burst's debounce: with quiet and
// maxDelay at one hour, only that path can report it.
func TestEndInsideBurst(t *testing.T) {
	f := newFake()
	f.lines = []string{fakeLine, fakeLine2}
	cfg := testConfig()
	cfg.quiet, cfg.maxDelay = time.Hour, time.Hour
	c := startFake(t, f, cfg)
	sub := c.Subscribe(10)
	defer sub.Close()
	full0, ids0 := f.counts()
	f.notify("%session-renamed") // leading edge of a burst: a full list
	eventually(t, "leading full list", func() bool { full, _ := f.counts(); return full == full0+1 })
	f.setLines(fakeLine2)
	f.notify("%sessions-changed") // $1 ended, inside the burst
	if ch := next(t, sub); ch.Kind != Removed || ch.Session.ID != "$1" {
		t.Fatalf("want $1 removed, got %+v", ch)
	}
	if full, ids := f.counts(); full != full0+1 || ids != ids0+1 {
		t.Fatalf("%d full and %d id-only lists, want 1 and 1", full-full0, ids-ids0)
	}
}

// More new ids in an id-only list than maxFreshReads cost one full list, not
// a read per id.
func TestManyFreshIDsCostFullList(t *testing.T) {
	f := newFake()
	f.lines = []string{fakeLine}
	cfg := testConfig()
	cfg.quiet, cfg.maxDelay = 0, 0
	c := startFake(t, f, cfg)
	full0, ids0 := f.counts()
	lines := []string{fakeLine}
	for i := 10; i < 10+maxFreshReads+1; i++ {
		lines = append(lines, "$"+strconv.Itoa(i)+"\t1700000000\t0\t%"+strconv.Itoa(i)+"\t1\t0\t\t\t1700000000\t\t\t\t\t\t\tn"+strconv.Itoa(i))
	}
	f.setLines(lines...)
	f.notify("%sessions-changed")
	eventually(t, "all listed", func() bool { return len(c.Snapshot().Sessions) == len(lines) })
	f.mu.Lock()
	reads := f.reads
	f.mu.Unlock()
	if full, ids := f.counts(); full != full0+1 || ids != ids0+1 || reads != 0 {
		t.Fatalf("%d new ids cost %d full lists, %d id-only, %d reads by id; want 1, 1, 0",
			maxFreshReads+1, full-full0, ids-ids0, reads)
	}
}

// A session an id-only list showed but that is gone when read by id (killed
// right after its create) is not held, and that list does not count against
// its creator's AdmitCreated: the creator admits it, and the next list reports
// it Removed — its end is never lost.
func TestFreshGoneBeforeReadStillAdmitted(t *testing.T) {
	f := newFake()
	f.lines = []string{fakeLine}
	cfg := testConfig()
	cfg.quiet, cfg.maxDelay = 0, 0
	c := startFake(t, f, cfg)
	sub := c.Subscribe(10)
	defer sub.Close()
	_, ids0 := f.counts()
	f.mu.Lock()
	f.gone = map[string]bool{"$3": true}
	f.num++ // the new-session that created $3
	created := f.num
	f.mu.Unlock()
	f.setLines(fakeLine, fakeLine3)
	f.notify("%sessions-changed")
	eventually(t, "id list and read", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.idLists == ids0+1 && f.reads == 1
	})
	info, _ := c.Info()
	if ok, err := c.AdmitCreated(info.ServerLife, Session{ID: "$3", Name: "three"}, created, 0); !ok || err != nil {
		t.Fatalf("AdmitCreated after a list that showed it: %v %v", ok, err)
	}
	if ch := next(t, sub); ch.Kind != Added || ch.Session.ID != "$3" {
		t.Fatalf("want $3 added, got %+v", ch)
	}
	f.setLines(fakeLine)
	f.notify("%sessions-changed")
	if ch := next(t, sub); ch.Kind != Removed || ch.Session.ID != "$3" {
		t.Fatalf("want $3 removed, got %+v", ch)
	}
}

// The periodic reconcile is spaced by its own cost at scale: no sooner than
// reconcileShare times the last full sync after it, nor than cfg.reconcile.
func TestReconcileSpacedByCost(t *testing.T) {
	c := newCensus(nil, nil, defaultConfig())
	now := time.Now()
	for _, tc := range []struct {
		cost, ago time.Duration
		due       bool
	}{
		{10 * time.Millisecond, 30 * time.Second, true},
		{10 * time.Millisecond, 10 * time.Second, false},
		{time.Second, 50 * time.Second, false},
		{time.Second, 120 * time.Second, true},
	} {
		c.lastSync.Store(int64(tc.cost))
		c.lastSyncAt.Store(now.Add(-tc.ago).UnixNano())
		if got := c.reconcileDue(now); got != tc.due {
			t.Errorf("last full sync %v ago, cost %v: due %v, want %v", tc.ago, tc.cost, got, tc.due)
		}
	}
}
