package census

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// renamed sends `%session-renamed id name` as read after the block numbered after.
func (f *fakeTmux) renamed(id, name string, after uint64) {
	f.events <- tmuxctl.Event{Kind: tmuxctl.Notify, Note: tmuxctl.Notification{
		Name: "%session-renamed", Text: id + " " + name, After: after}}
}

func (f *fakeTmux) number() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.num
}

// waitName waits until the census holds id under name (and nothing else by it).
func waitName(t *testing.T, c *Census, id, name string) {
	t.Helper()
	eventually(t, id+" named "+name, func() bool {
		s, ok := c.ByName(name)
		b, _ := c.ByID(id)
		return ok && s.ID == id && b.Name == name
	})
}

// A held session's rename is applied from its notification alone: no list.
// The id-only list a following end brings shows the census is past the
// notification; a rename that had cost a full list would have made the next
// list a full one.
func TestRenameInPlaceWithoutList(t *testing.T) {
	f := newFake()
	f.lines = []string{fakeLine, fakeLine2}
	cfg := testConfig()
	c := startFake(t, f, cfg)
	sub := c.Subscribe(10)
	defer sub.Close()
	full0, ids0 := f.counts()
	f.renamed("$1", "uno", f.number())
	ch := next(t, sub)
	if ch.Kind != Changed || ch.Session.ID != "$1" || ch.Session.Name != "uno" {
		t.Fatalf("want $1 changed to uno, got %+v", ch)
	}
	waitName(t, c, "$1", "uno")
	if _, ok := c.ByName("one"); ok {
		t.Error("the old name still finds the session")
	}
	f.setLines(fakeLine2) // $1 ended, its line (with the old name) gone
	f.notify("%sessions-changed")
	if ch := next(t, sub); ch.Kind != Removed || ch.Session.ID != "$1" || ch.Session.Name != "uno" {
		t.Fatalf("want $1 removed under its new name, got %+v", ch)
	}
	full, ids := f.counts()
	if full != full0 || ids != ids0+1 {
		t.Errorf("lists: %d full, %d by id since the sync; want 0 and 1", full-full0, ids-ids0)
	}
	if st := c.Stats(); st.Renames != 1 {
		t.Errorf("Renames = %d, want 1", st.Renames)
	}
	// An id the census does not hold costs a full list, as before.
	f.setLines(fakeLine2, fakeLine3)
	f.renamed("$3", "three", f.number())
	waitName(t, c, "$3", "three")
	if full, _ := f.counts(); full != full0+1 {
		t.Errorf("a rename of an unheld id: %d full lists, want 1", full-full0)
	}
}

// A list that ran before a rename's notification was written, applied after
// the census took the rename from it, does not undo it; a list that ran after
// does count, even for a name no notification told (a rename by a hook).
func TestRenameSurvivesOlderList(t *testing.T) {
	f := newFake()
	f.lines = []string{fakeLine, fakeLine2}
	cfg := testConfig()
	c := startFake(t, f, cfg)
	sub := c.Subscribe(10)
	defer sub.Close()
	hold := make(chan struct{})
	f.mu.Lock()
	f.hold = hold
	f.mu.Unlock()
	full0, _ := f.counts()
	f.notify("%window-add") // a full list, held in flight: it shows $1 as "one"
	eventually(t, "list in flight", func() bool { full, _ := f.counts(); return full == full0+1 })
	f.renamed("$1", "uno", f.number()) // written after that list ran
	waitName(t, c, "$1", "uno")
	f.mu.Lock()
	f.hold = nil
	f.mu.Unlock()
	close(hold)
	uno := strings.Replace(fakeLine, "\tone", "\tuno", 1)
	f.setLines(uno, fakeLine2)                              // tmux's own view since the rename
	if err := c.Refresh(context.Background()); err != nil { // after the held list
		t.Fatal(err)
	}
	if ch := next(t, sub); ch.Kind != Changed || ch.Session.Name != "uno" {
		t.Fatalf("want the rename, got %+v", ch)
	}
	if len(sub.C()) != 0 {
		t.Fatalf("the held list changed the name back and forth: %+v", <-sub.C())
	}
	// A list run after the rename that says "one": as after a rename back
	// by a hook, which tmux does not notify.
	f.setLines(fakeLine, fakeLine2)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitName(t, c, "$1", "one")
}

// A notification older than the list the census applied (the list ran after
// it was written) does not bring back the name the list replaced: the line of
// the rename that made it old follows it.
func TestOlderRenameLineYieldsToNewerList(t *testing.T) {
	f := newFake()
	f.lines = []string{fakeLine, fakeLine2}
	c := startFake(t, f, testConfig())
	before := f.number()
	f.setLines(strings.Replace(fakeLine, "\tone", "\tdos", 1), fakeLine2)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitName(t, c, "$1", "dos")
	f.renamed("$1", "uno", before) // written before that list ran
	f.renamed("$2", "zwei", f.number())
	waitName(t, c, "$2", "zwei") // handled in order: the line before it was too
	if s, _ := c.ByID("$1"); s.Name != "dos" {
		t.Errorf("an older line undid a newer list: %q", s.Name)
	}
}

// An admission carries the creator's rename (a claimed standby), numbered:
// a rename by hand notified after it stays, one notified before it does not.
func TestAdmissionAndRenameOrder(t *testing.T) {
	f := newFake()
	f.lines = []string{fakeLine, fakeLine2}
	c := startFake(t, f, testConfig())
	life := tmuxctl.ServerLife{PID: c.info.PID, StartTime: c.info.StartTime}
	n := f.number()
	f.renamed("$1", "by-hand", n+5) // written after the creator's rename (n+2)
	waitName(t, c, "$1", "by-hand")
	s, _ := c.ByID("$1")
	s.Name, s.Tags = "attempt", map[string]string{TagIdentity: digest(1), TagGeneration: "1"}
	if ok, err := c.AdmitCreated(life, s, n+2); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if got, _ := c.ByID("$1"); got.Name != "by-hand" || got.Tags[TagIdentity] != digest(1) {
		t.Errorf("admission: %q %v, want the hand's newer name with the creator's tags", got.Name, got.Tags)
	}
	f.renamed("$2", "early", n+1) // written before the creator's rename (n+3)
	waitName(t, c, "$2", "early")
	s2, _ := c.ByID("$2")
	s2.Name, s2.Tags = "attempt2", map[string]string{TagIdentity: digest(2), TagGeneration: "1"}
	if ok, err := c.AdmitCreated(life, s2, n+3); !ok || err != nil {
		t.Fatal(ok, err)
	}
	waitName(t, c, "$2", "attempt2")
}

// With tmux: a rename by hand (another client) is seen by name without a full
// list, and so is a burst of renames of many sessions.
func TestRenameByHandWithoutList(t *testing.T) {
	r := newRig(t, nil)
	const n = 12
	var ids []string
	for i := 0; i < n; i++ {
		ids = append(ids, r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", fmt.Sprintf("h%d", i), "cat"))
	}
	eventually(t, "sessions held", func() bool { return len(r.c.Snapshot().Sessions) == n })
	relists := r.c.Stats().Relists
	r.tmux("rename-session", "-t", ids[0], "renamed-0")
	eventually(t, "rename by hand", func() bool {
		s, ok := r.c.ByName("renamed-0")
		_, old := r.c.ByName("h0")
		return ok && s.ID == ids[0] && !old
	})
	// A burst: every session renamed three times by one client, pipelined.
	var args []string
	for round := 1; round <= 3; round++ {
		for i, id := range ids {
			if len(args) > 0 {
				args = append(args, ";")
			}
			args = append(args, "rename-session", "-t", id, fmt.Sprintf("r%d-%d", round, i))
		}
	}
	r.tmux(args...)
	eventually(t, "burst of renames", func() bool {
		for i, id := range ids {
			if s, ok := r.c.ByName(fmt.Sprintf("r3-%d", i)); !ok || s.ID != id {
				return false
			}
		}
		return len(r.c.Snapshot().Sessions) == n
	})
	if got := r.c.Stats().Relists - relists; got != 0 {
		t.Errorf("renames cost %d full lists, want 0", got)
	}
	if st := r.c.Stats(); st.Renames < n+1 {
		t.Errorf("Renames = %d, want at least %d", st.Renames, n+1)
	}
}

// With tmux: renames by hand while full lists run back to back. The names
// the census tells for the session only move forward through the renames,
// and the last one stays: no list undoes a rename it ran before.
func TestRenameWhileListing(t *testing.T) {
	r := newRig(t, nil)
	id := r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", "n0", "cat")
	eventually(t, "session held", func() bool { _, ok := r.c.ByID(id); return ok })
	sub := r.c.Subscribe(4096)
	defer sub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var lists atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if r.c.Refresh(ctx) == nil {
				lists.Add(1)
			}
		}
	}()
	const renames = 40
	for i := 1; i <= renames; i++ {
		r.tmux("rename-session", "-t", id, "n"+strconv.Itoa(i))
	}
	last := "n" + strconv.Itoa(renames)
	eventually(t, "last rename", func() bool { s, ok := r.c.ByName(last); return ok && s.ID == id })
	seen := lists.Load()
	eventually(t, "more lists after it", func() bool { return lists.Load() >= seen+3 }) // they must not undo it
	cancel()
	wg.Wait()
	if s, ok := r.c.ByID(id); !ok || s.Name != last {
		t.Fatalf("after the lists: %+v, want %s", s, last)
	}
	prev := 0
	for len(sub.C()) > 0 {
		ch := <-sub.C()
		if ch.Session.ID != id || ch.Kind != Changed {
			continue
		}
		k, err := strconv.Atoi(strings.TrimPrefix(ch.Session.Name, "n"))
		if err != nil || k < prev {
			t.Fatalf("name went back from n%d to %q", prev, ch.Session.Name)
		}
		prev = k
	}
}
