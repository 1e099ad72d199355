package census

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/proctree"
)

// A pane process killed by SIGKILL is in the census, dead with its signal,
// through PaneExited alone: the subscription and the pane-died hook are off
// (DeathsByExitOnly), the reconcile is an hour away, and tmux sends no
// notification for a pane's death under remain-on-exit (docs/tmux-facts.md §8), so no
// other path can tell it. The exit is told by a real ExitWatch on the pane's
// pid, as lifecycle does; nothing here is timed, every wait is for a
// condition with the generous limit.
func TestPaneExitedReadsTheSession(t *testing.T) {
	cfg := testConfig()
	cfg.reconcile = time.Hour
	cfg.exitOnly = true
	r := newRig(t, &cfg)
	r.tmux("set-option", "-g", "remain-on-exit", "on")
	w, err := proctree.NewExitWatch()
	if err != nil {
		t.Skipf("no exit watch here: %v", err)
	}
	defer w.Close()
	info, _ := r.c.Info()
	sub := r.c.Subscribe(64)
	defer sub.Close()
	const n = 6
	ids := map[string]bool{}
	for i := 0; i < n; i++ {
		id := r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", "x"+strconv.Itoa(i), "sleep 100000")
		ids[id] = true
	}
	var pids []int
	eventually(t, "every session listed with its pane", func() bool {
		pids = pids[:0]
		for id := range ids {
			s, ok := r.c.ByID(id)
			if !ok || s.PanePID <= 0 {
				return false
			}
			pids = append(pids, s.PanePID)
		}
		return true
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for id := range ids {
		s, _ := r.c.ByID(id)
		start, err := proctree.ChildStartTime(s.PanePID, info.PID)
		if err != nil {
			t.Fatal(err)
		}
		err = w.Watch(id, s.PanePID, start, func(e proctree.Exit) { r.c.PaneExited(ctx, info.ServerLife, e.Key, e.Reaped) })
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	died := map[string]bool{}
	for len(died) < n {
		ch := next(t, sub)
		if ch.Kind == Changed && ids[ch.Session.ID] && ch.PaneDied {
			died[ch.Session.ID] = true
		}
	}
	eventually(t, "every pane dead with signal 9", func() bool {
		for id := range ids {
			s, _ := r.c.ByID(id)
			if !s.PaneDead || s.PaneDeadSignal != "9" {
				return false
			}
		}
		return true
	})
	eventually(t, "every watch released", func() bool { return w.Len() == 0 })
}

// Sessions their caller kills after Removing are removed by a read of their
// id: their end's notifications (%sessions-changed, %unlinked-window-close)
// cost no list of every session. The subscription is off and the reconcile
// an hour away (DeathsByExitOnly), so the count of lists is the whole story.
func TestRemovingReadsInsteadOfListing(t *testing.T) {
	cfg := testConfig()
	cfg.reconcile = time.Hour
	cfg.exitOnly = true
	r := newRig(t, &cfg)
	info, _ := r.c.Info()
	var ids []string
	for i := 0; i < 4; i++ {
		ids = append(ids, r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", "k"+strconv.Itoa(i), "sleep 100000"))
	}
	eventually(t, "every session listed", func() bool {
		for _, id := range ids {
			if _, ok := r.c.ByID(id); !ok {
				return false
			}
		}
		return true
	})
	// The creations' own lists are over once every session is held; let a
	// trailing one (debounced) finish before counting.
	eventually(t, "no list pending", func() bool {
		full, idl := r.c.Relists(), r.c.idLists.Load()
		time.Sleep(3 * cfg.maxDelay)
		return full == r.c.Relists() && idl == r.c.idLists.Load()
	})
	full0, ids0 := r.c.Relists(), r.c.idLists.Load()
	sub := r.c.Subscribe(64)
	defer sub.Close()
	for _, id := range ids {
		r.c.Removing(info.ServerLife, id)
		r.tmux("kill-session", "-t", id)
		for {
			ch := next(t, sub)
			if ch.Kind == Removed && ch.Session.ID == id {
				break
			}
		}
	}
	if full, idl := r.c.Relists()-full0, r.c.idLists.Load()-ids0; full != 0 || idl != 0 {
		t.Fatalf("%d full and %d id-only lists for %d removals told in advance", full, idl, len(ids))
	}
	// Each end's second notification reads its id once more after the
	// first read dropped it; that read must end the removal too, or every
	// later end reads it again (for removingFor). Every removal but the
	// last had a later end's reads behind it.
	for _, id := range ids[:len(ids)-1] {
		if r.c.isRemoving(id) {
			t.Fatalf("the removal of %s, seen gone, is still pending", id)
		}
	}
}

// TestRemovalEndsWhenListedGone: a removal told in advance (Removing) whose
// session a list shows gone before any read by id did is over with that list;
// left pending, every later end's notifications would read it again.
func TestRemovalEndsWhenListedGone(t *testing.T) {
	cfg := testConfig()
	cfg.reconcile = time.Hour
	cfg.exitOnly = true
	r := newRig(t, &cfg)
	info, _ := r.c.Info()
	id := r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", "lg", "sleep 100000")
	eventually(t, "the session listed", func() bool { _, ok := r.c.ByID(id); return ok })
	r.c.Removing(info.ServerLife, id)
	r.tmux("kill-session", "-t", id)
	if err := r.c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.c.ByID(id); ok {
		t.Fatalf("%s still held after a list without it", id)
	}
	if r.c.isRemoving(id) {
		t.Fatalf("the removal of %s is still pending after a list showed it gone", id)
	}
}

// TestGoneDropsAtOnce: a removal told in advance (Removing) and then proven
// by its caller (Gone) is dropped at once and told as Removed, the end's
// notifications cost no list, and nothing stays pending. (Whether they cost
// a read of the id depends on whether Gone lands before them.)
func TestGoneDropsAtOnce(t *testing.T) {
	cfg := testConfig()
	cfg.reconcile = time.Hour
	cfg.exitOnly = true
	r := newRig(t, &cfg)
	info, _ := r.c.Info()
	id := r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", "gone", "sleep 100000")
	eventually(t, "the session listed", func() bool { _, ok := r.c.ByID(id); return ok })
	eventually(t, "no list pending", func() bool { // the creation's trailing list
		full, idl := r.c.Relists(), r.c.idLists.Load()
		time.Sleep(3 * cfg.maxDelay)
		return full == r.c.Relists() && idl == r.c.idLists.Load()
	})
	sub := r.c.Subscribe(64)
	defer sub.Close()
	full0, ids0 := r.c.Relists(), r.c.idLists.Load()
	r.c.Removing(info.ServerLife, id)
	r.tmux("kill-session", "-t", id)
	r.c.Gone(info.ServerLife, id)
	if _, ok := r.c.ByID(id); ok {
		t.Fatalf("%s still held after Gone", id)
	}
	for {
		if ch := next(t, sub); ch.Kind == Removed && ch.Session.ID == id {
			break
		}
	}
	eventually(t, "the end's notifications handled", func() bool {
		r.c.lookMu.Lock()
		defer r.c.lookMu.Unlock()
		return r.c.absorb == 0
	})
	if r.c.isRemoving(id) {
		t.Fatalf("the removal of %s is still pending after Gone", id)
	}
	if full, idl := r.c.Relists()-full0, r.c.idLists.Load()-ids0; full != 0 || idl != 0 {
		t.Fatalf("%d full and %d id-only lists for an end told in advance", full, idl)
	}
}
