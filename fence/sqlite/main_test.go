package sqlite

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/fencetest"
	"github.com/skc-supervisor/skc-supervisor/internal/proctest"
	"github.com/skc-supervisor/skc-supervisor/internal/testwatch"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// The test binary impersonates helper processes (like Go's os/exec tests):
// with FENCE_TEST_HELPER set, TestMain runs that mode instead of the tests.
// Separate processes are what make the multi-process fence tests real: their
// own pid, incarnation, SQLite connections and locks.
const helperEnv = "FENCE_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	testwatch.Arm()
	goleak.VerifyTestMain(m)
}

func runHelper(mode string) int {
	switch mode {
	case "worker":
		return helperWorker(os.Getenv("FENCE_DB"))
	case "crash":
		return helperCrash()
	case "intx":
		return helperInTx()
	case "readonly":
		return helperReadOnly()
	}
	fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
	return 2
}

// helperCmd returns a command running this test binary in helper mode.
func helperCmd(t testing.TB, mode string, env ...string) *exec.Cmd {
	t.Helper()
	return proctest.Command(t, helperEnv, mode, env...)
}

// child is a started helper process with line-oriented stdin/stdout.
type child = proctest.Child

func startChild(t testing.TB, mode string, env ...string) *child {
	t.Helper()
	return proctest.Start(t, helperCmd(t, mode, env...))
}

// helperWorker serves commands on stdin, one reply line each:
//
//	reserve DIR SID START_NS   → "ok OUTCOME RESID GEN" | "err CODE"
//	release RESID              → "ok"
//	bench DIR N                → "ok P50_NS P99_NS ERRORS" (N reserve+release cycles)
//	quit
func helperWorker(path string) int {
	s, err := Open(path, fence.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "reserve":
			start, _ := strconv.ParseInt(f[3], 10, 64)
			time.Sleep(time.Until(time.Unix(0, start)))
			fmt.Println(workerReserve(s, f[1], f[2]))
		case "release":
			fmt.Println(replyErr(s.Release(context.Background(), f[1])))
		case "bench":
			n, _ := strconv.Atoi(f[2])
			fmt.Println(workerBench(s, f[1], n))
		case "quit":
			return 0
		}
	}
	return 0
}

func workerReserve(s *Store, dir, sid string) string {
	res, err := s.Reserve(context.Background(), fence.Identity{StateDir: dir, SessionID: sid}, fencetest.SpecFor(dir, sid))
	if err != nil {
		return "err " + verdict.CodeOf(err)
	}
	r := res.Reservation
	return fmt.Sprintf("ok %s %s %d", res.Outcome, orDash(r.ID), r.Generation)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func replyErr(err error) string {
	if err != nil {
		return "err " + verdict.CodeOf(err)
	}
	return "ok"
}

// workerBench runs n reserve+release cycles on the worker's own identity and
// reports the per-transition latency percentiles.
func workerBench(s *Store, dir string, n int) string {
	sid := fmt.Sprintf("bench-%d", os.Getpid())
	var lat []time.Duration
	errs := 0
	for i := 0; i < n; i++ {
		d1, d2, err := cycle(s, dir, sid)
		if err != nil {
			errs++
			continue
		}
		lat = append(lat, d1, d2)
	}
	return fmt.Sprintf("ok %d %d %d", percentile(lat, 50), percentile(lat, 99), errs)
}

// cycle is one Reserve and one Release, each timed.
func cycle(s *Store, dir, sid string) (time.Duration, time.Duration, error) {
	ctx := context.Background()
	t0 := time.Now()
	res, err := s.Reserve(ctx, fence.Identity{StateDir: dir, SessionID: sid}, fencetest.SpecFor(dir, sid))
	d1 := time.Since(t0)
	if err != nil {
		return 0, 0, err
	}
	if res.Outcome != fence.Reserved {
		return 0, 0, fmt.Errorf("outcome %s", res.Outcome)
	}
	t1 := time.Now()
	err = s.Release(ctx, res.Reservation.ID)
	return d1, time.Since(t1), err
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	return s[i-1]
}

// helperCrash runs the saga up to FENCE_PHASE on its own identity, says "at",
// and blocks until it is killed.
func helperCrash() int {
	s, err := Open(os.Getenv("FENCE_DB"), fence.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, sid := os.Getenv("FENCE_STATE_DIR"), os.Getenv("FENCE_SID")
	if err := sagaTo(s, dir, sid, os.Getenv("FENCE_PHASE")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("at")
	_, _ = io.Copy(io.Discard, os.Stdin)
	select {} // never exits on its own: only SIGKILL ends it
}

// sagaTo walks a create saga up to the named point: a phase name, or
// "released" (published, then the row released).
func sagaTo(s *Store, dir, sid, point string) error {
	ctx := context.Background()
	res, err := s.Reserve(ctx, fence.Identity{StateDir: dir, SessionID: sid}, fencetest.SpecFor(dir, sid))
	if err != nil {
		return err
	}
	if res.Outcome != fence.Reserved {
		return fmt.Errorf("reserve: %s", res.Outcome)
	}
	r := res.Reservation
	steps := []struct {
		name string
		do   func() error
	}{
		{"helper_invoked", func() error {
			return s.Advance(ctx, &r, fence.PhaseHelperInvoked, fence.Patch{AttemptName: "skc-" + r.ID})
		}},
		{"spawned", func() error {
			return s.Advance(ctx, &r, fence.PhaseSpawned, fence.Patch{TmuxID: "$7", PanePID: 4242, ServerPID: 99, ServerStart: 1})
		}},
		{"tagged", func() error { return s.Advance(ctx, &r, fence.PhaseTagged, fence.Patch{}) }},
		{"published", func() error { _, _, err := s.Publish(ctx, &r, fencetest.Record("published")); return err }},
		{"released", func() error { return s.Release(ctx, r.ID) }},
	}
	if point == "reserved" {
		return nil
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
		if st.name == point {
			return nil
		}
	}
	return fmt.Errorf("unknown point %q", point)
}

// helperInTx starts a Reserve and stops inside its transaction, before COMMIT,
// saying "in-tx"; the parent SIGKILLs it there.
func helperInTx() int {
	s, err := Open(os.Getenv("FENCE_DB"), fence.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var once sync.Once
	testHookBeforeCommit = func(string) {
		once.Do(func() {
			fmt.Println("in-tx")
			select {}
		})
	}
	dir, sid := os.Getenv("FENCE_STATE_DIR"), os.Getenv("FENCE_SID")
	_, err = s.Reserve(context.Background(), fence.Identity{StateDir: dir, SessionID: sid}, fencetest.SpecFor(dir, sid))
	fmt.Fprintln(os.Stderr, "reserve returned:", err)
	return 1
}
