package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/fencetest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Writes queued while the writer is held run as one group transaction, each
// with its own outcome: per identity exactly one of three racing reserves
// wins (the later ones see the first's row in the same transaction and are
// refused), the refusals undo none of the winners' rows, and a write whose
// caller gave up while queued runs not at all.
func TestGroupCommitOutcomesAreEachOwn(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "fence.sqlite"), fence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var mu sync.Mutex
	var groups []int
	testHookGroup = func(n int) { mu.Lock(); groups = append(groups, n); mu.Unlock() }
	defer func() { testHookGroup = nil }()

	const ids, each = 4, 3
	dir := t.TempDir()
	s.wr.sem <- struct{}{} // hold the writer: every write below queues
	type out struct {
		sid string
		res fence.ReserveResult
		err error
	}
	outs := make(chan out, ids*each)
	for i := 0; i < ids*each; i++ {
		sid := fmt.Sprintf("g%d", i%ids)
		go func() {
			res, err := s.Reserve(ctx, fence.Identity{StateDir: dir, SessionID: sid}, fencetest.SpecFor(dir, sid))
			outs <- out{sid, res, err}
		}()
	}
	gaveUp := make(chan error, 1)
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		_, err := s.Reserve(cctx, fence.Identity{StateDir: dir, SessionID: "quitter"}, fencetest.SpecFor(dir, "quitter"))
		gaveUp <- err
	}()
	waitQueued(t, s, ids*each+1)
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("a reserve whose caller gave up while queued succeeded")
	}
	<-s.wr.sem // let them run

	won := map[string]fence.Reservation{}
	for i := 0; i < ids*each; i++ {
		o := <-outs
		switch {
		case o.err == nil && o.res.Outcome == fence.Reserved:
			if _, dup := won[o.sid]; dup {
				t.Fatalf("%s reserved twice", o.sid)
			}
			won[o.sid] = o.res.Reservation
		case o.err == nil:
			t.Fatalf("%s: outcome %v beside an in-flight reservation", o.sid, o.res.Outcome)
		case verdict.CodeOf(o.err) == "":
			t.Fatalf("%s: uncoded error %v", o.sid, o.err)
		}
	}
	if len(won) != ids {
		t.Fatalf("%d identities reserved, want %d", len(won), ids)
	}
	for sid, r := range won {
		if got, ok, err := s.Reservation(ctx, r.ID); err != nil || !ok || got.Identity.SessionID != sid {
			t.Fatalf("%s: winner's row %s not committed: %v %v", sid, r.ID, ok, err)
		}
	}
	res, err := s.Reserve(ctx, fence.Identity{StateDir: dir, SessionID: "quitter"}, fencetest.SpecFor(dir, "quitter"))
	if err != nil || res.Outcome != fence.Reserved || res.Reservation.Generation != 1 {
		t.Fatalf("the quitter's identity was written while queued: %+v %v", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(groups) == 0 || groups[0] != ids*each {
		t.Fatalf("group sizes %v, want the first to hold all %d queued writes", groups, ids*each)
	}
}

func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.wq.mu.Lock()
		got := len(s.wq.reqs)
		s.wq.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}
