package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/proctree"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestShutdownRacesCreates runs Shutdown (with its deadline already passed, so it
// abandons whatever is in flight at once) concurrently with creates that are
// advancing their reservations, many times: under -race this catches Shutdown
// reading an attempt's state that the create's goroutine writes. Each round uses a
// fresh Manager on the same tmux, census and fence (Shutdown is final for one).
func TestShutdownRacesCreates(t *testing.T) {
	e := startEnv(t, "", "", true)
	const rounds, creates = 25, 3
	for r := 0; r < rounds; r++ {
		m, err := New(e.m.cfg)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var finished atomic.Int32
		ids := make([]fence.Identity, creates)
		for i := 0; i < creates; i++ {
			id, spec := e.identity(fmt.Sprintf("sr%d-%d", r, i))
			ids[i] = id
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer finished.Add(1)
				_, err := m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
				if err != nil && verdict.CodeOf(err) == verdict.CodeInternal {
					t.Errorf("create: %v", err)
				}
			}()
		}
		// Shut down while at least one create is between its reservation and its
		// verdict (or all already finished: the round then checks nothing new).
		waitForInflightOrDone(m, &finished, creates)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = m.Shutdown(ctx)
		wg.Wait()
		// Every create has returned, each with exactly one verdict of its own
		// (a wedged fence writer used to lose them).
		for _, id := range ids {
			if recs := e.verdicts(id); len(recs) != 1 || recs[0].Action != verdict.ActionCreate {
				t.Fatalf("round %d: %s has verdicts %v", r, id.SessionID, verdictNames(recs))
			}
		}
		// What is left of a row is evidence for
		// recovery (abandoned), never a row still owned by a live attempt.
		rows, err := e.store.Reservations(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range rows {
			if !row.Abandoned {
				t.Fatalf("round %d: row left owned after shutdown: %+v; verdicts %v", r, row,
					verdictNames(e.verdicts(row.Identity)))
			}
		}
	}
}

// waitForInflightOrDone spins until m tracks an attempt, or every create has
// returned (none tracked any more and none will be).
func waitForInflightOrDone(m *Manager, finished *atomic.Int32, creates int) {
	for {
		m.mu.Lock()
		n := len(m.inflight)
		m.mu.Unlock()
		if n > 0 || int(finished.Load()) >= creates {
			return
		}
		runtime.Gosched()
	}
}

// TestShutdownSweepsEmptyGenerationCgroups: a clean stop removes the empty
// generation cgroups an undone attempt left (its helper slower to go than
// its reap's wait) and then the daemon's base — it left them to the next
// start (found outside-in) — and keeps a running generation's, whose session
// outlives the daemon.
func TestShutdownSweepsEmptyGenerationCgroups(t *testing.T) {
	e := startEnv(t, "", "", false)
	base := e.m.cgroupBase
	if base == "" {
		t.Skip("no cgroup v2 base here")
	}
	id, _ := e.create(t, "keeps", "agent", "sleep")
	pub := e.published(id)
	if pub.Cgroup == "" {
		t.Fatal("the running generation has no cgroup")
	}
	waitFor(t, "the agent in its cgroup", func() bool { return proctree.InCgroup(pub.PanePID, pub.Cgroup) })
	left := filepath.Join(base, "gen-00000000000000000000000000000001")
	if err := os.Mkdir(left, 0o755); err != nil {
		t.Fatal(err)
	}
	e.close()
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an empty generation cgroup outlived a clean stop: %v", err)
	}
	if _, err := os.Stat(pub.Cgroup); err != nil {
		t.Fatalf("the running generation's cgroup went with the daemon: %v", err)
	}
}
