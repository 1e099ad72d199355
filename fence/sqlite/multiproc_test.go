package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/fencetest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// procWorld is a fence file and state directory shared with real processes.
func procWorld(t *testing.T) (path, dir string) {
	root := t.TempDir()
	dir = filepath.Join(root, "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(root, "home", "fence.sqlite")
	s, err := Open(path, fence.Options{}) // create and migrate once, up front
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	return path, dir
}

func checkIntegrity(t *testing.T, path string) {
	t.Helper()
	s, err := Open(path, fence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if msg, err := s.Check(ctx); err != nil || msg != "ok" {
		t.Fatalf("integrity_check: %q %v", msg, err)
	}
}

// TestRaceReserveProcesses: N separate processes race Reserve on one
// identity, round after round; exactly one wins each round and every other
// gets a refusal code.
func TestRaceReserveProcesses(t *testing.T) {
	const n = 8
	rounds := 40
	if testing.Short() {
		rounds = 10
	}
	path, dir := procWorld(t)
	workers := make([]*child, n)
	for i := range workers {
		workers[i] = startChild(t, "worker", "FENCE_DB="+path)
	}
	for round := 0; round < rounds; round++ {
		sid := fmt.Sprintf("race-%d", round)
		start := time.Now().Add(20 * time.Millisecond).UnixNano()
		for _, w := range workers {
			w.Send(t, fmt.Sprintf("reserve %s %s %d", dir, sid, start))
		}
		replies := make([]string, n)
		var wg sync.WaitGroup
		for i, w := range workers {
			wg.Add(1)
			go func() { defer wg.Done(); replies[i] = w.Recv(t) }()
		}
		wg.Wait()
		wins := 0
		for _, r := range replies {
			switch {
			case strings.HasPrefix(r, "ok reserved "):
				wins++
			case r == "err "+verdict.CodeIdentityReservedLive, r == "err "+verdict.CodeIdentityFenceContended:
			default:
				t.Fatalf("round %d: unexpected reply %q", round, r)
			}
		}
		if wins != 1 {
			t.Fatalf("round %d: %d winners: %q", round, wins, replies)
		}
	}
	for _, w := range workers {
		w.Send(t, "quit")
		_ = w.Cmd.Wait()
	}
	s, err := Open(path, fence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := s.Reservations(ctx)
	s.Close()
	if err != nil || len(rows) != rounds {
		t.Fatalf("%d rows (%v), want %d", len(rows), err, rounds)
	}
	checkIntegrity(t, path)
}

// TestKillInsideTransaction: a process SIGKILLed between its statements and
// COMMIT leaves no half-written row, no burnt generation, and no lock.
func TestKillInsideTransaction(t *testing.T) {
	path, dir := procWorld(t)
	for i := 0; i < 3; i++ {
		c := startChild(t, "intx", "FENCE_DB="+path, "FENCE_STATE_DIR="+dir, "FENCE_SID=x")
		if got := c.Recv(t); got != "in-tx" {
			t.Fatalf("child said %q", got)
		}
		c.Kill(t)
	}
	s, err := Open(path, fence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rows, err := s.Reservations(ctx)
	if err != nil || len(rows) != 0 {
		t.Fatalf("rows after kills: %+v %v", rows, err)
	}
	r := fencetest.MustReserve(t, s, fence.Identity{StateDir: dir, SessionID: "x"}, fencetest.SpecFor(dir, "x"))
	if r.Generation != 1 {
		t.Fatalf("generation %d: a killed transaction left its counter behind", r.Generation)
	}
	if msg, err := s.Check(ctx); err != nil || msg != "ok" {
		t.Fatalf("integrity_check: %q %v", msg, err)
	}
}

// truthInspector plays live tmux for a crashed creator: the attempt's
// session exists from spawned on, and is authoritative once its generation
// is the identity's published one.
type truthInspector struct {
	unknown bool
	kills   *[]string
}

func (ti truthInspector) Inspect(_ context.Context, ab fence.Reservation, pub *fence.Published) (fence.Authority, error) {
	switch {
	case ti.unknown:
		return fence.AuthorityUnknown, nil
	case pub != nil && !pub.Ended && pub.ReservationID == ab.ID && pub.Generation == ab.Generation:
		return fence.Authoritative, nil
	case ab.TmuxID != "":
		return fence.Orphan, nil
	}
	return fence.Absent, nil
}

func (ti truthInspector) KillConfirm(_ context.Context, ab fence.Reservation) error {
	*ti.kills = append(*ti.kills, ab.AttemptName)
	return nil
}

// ProcessesGone: these sagas start no processes.
func (ti truthInspector) ProcessesGone(context.Context, fence.Reservation, *fence.Published) error {
	return nil
}

// TestCrashAfterEachPhase: a creator SIGKILLed after each step leaves a row
// that the next owner (this process, real liveness) resolves as DESIGN §6 says.
func TestCrashAfterEachPhase(t *testing.T) {
	for _, tc := range []struct {
		point   string
		outcome fence.ReserveOutcome
		branch  fence.RecoverBranch
		code    string
		killed  bool
	}{
		{"reserved", fence.Reserved, 0, "", false},
		{"helper_invoked", fence.NeedsRecovery, fence.BranchReclaimed, "", false},
		{"spawned", fence.NeedsRecovery, fence.BranchOrphanCleaned, "", true},
		{"tagged", fence.NeedsRecovery, fence.BranchOrphanCleaned, "", true},
		{"published", fence.NeedsRecovery, fence.BranchPreserved, verdict.CodeIdentityExistingOwner, false},
		{"released", fence.MaybeExisting, 0, "", false},
	} {
		t.Run(tc.point, func(t *testing.T) {
			path, dir := procWorld(t)
			c := startChild(t, "crash", "FENCE_DB="+path, "FENCE_STATE_DIR="+dir, "FENCE_SID=x", "FENCE_PHASE="+tc.point)
			if got := c.Recv(t); got != "at" {
				t.Fatalf("child said %q", got)
			}
			c.Kill(t)
			s, err := Open(path, fence.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			id, spec := fence.Identity{StateDir: dir, SessionID: "x"}, fencetest.SpecFor(dir, "x")
			res, err := s.Reserve(ctx, id, spec)
			if err != nil || res.Outcome != tc.outcome {
				t.Fatalf("reserve: %s %v, want %s", res.Outcome, err, tc.outcome)
			}
			if tc.outcome != fence.NeedsRecovery {
				return
			}
			var kills []string
			// Liveness unknown to tmux first: the row is kept, nothing killed.
			rr, err := s.RecoverAbandoned(ctx, res.Abandoned, truthInspector{unknown: true, kills: &kills})
			if fencetest.CodeOf(t, err) != verdict.CodeIdentityOrphanUnresolved || rr.Branch != fence.BranchUnresolved || len(kills) != 0 {
				t.Fatalf("unknown: %+v %v %v", rr, err, kills)
			}
			rr, err = s.RecoverAbandoned(ctx, res.Abandoned, truthInspector{kills: &kills})
			if fencetest.CodeOf(t, err) != tc.code || rr.Branch != tc.branch || (len(kills) == 1) != tc.killed {
				t.Fatalf("recover: %s %v kills %v, want %s %q", rr.Branch, err, kills, tc.branch, tc.code)
			}
			if tc.branch == fence.BranchPreserved {
				again, err := s.Reserve(ctx, id, spec)
				if err != nil || again.Outcome != fence.MaybeExisting {
					t.Fatalf("after preserve: %s %v", again.Outcome, err)
				}
				return
			}
			if rr.Reservation == nil || rr.Reservation.OwnerPID != os.Getpid() || rr.Reservation.Generation != 2 {
				t.Fatalf("new reservation %+v", rr.Reservation)
			}
			if err := s.Release(ctx, rr.Reservation.ID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestReserveWithRealLiveness(t *testing.T) {
	// A real owner process holds the row; while it lives we are refused, once
	// it is killed and reaped its reserved-phase row is reclaimed in place.
	w := newWorld(t)
	c := startChild(t, "worker", "FENCE_DB="+w.path)
	c.Send(t, fmt.Sprintf("reserve %s x %d", w.Dir, time.Now().UnixNano()))
	if got := c.Recv(t); !strings.HasPrefix(got, "ok reserved ") {
		t.Fatalf("child: %s", got)
	}
	s, err := Open(w.path, fence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Reserve(ctx, w.ID("x"), w.Spec("x"))
	fencetest.WantCode(t, err, "identity_reserved_live")
	c.Kill(t)
	r := fencetest.MustReserve(t, s, w.ID("x"), w.Spec("x"))
	if r.OwnerPID != os.Getpid() || r.Generation != 2 {
		t.Fatalf("%+v", r)
	}
}
