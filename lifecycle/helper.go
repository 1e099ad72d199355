package lifecycle

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/proctree"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Exit codes of the pane helper when it runs no agent.
const (
	helperUsage   = 2  // bad arguments
	helperNoFence = 70 // the fence could not be opened or read
	helperGaveUp  = 75 // its reservation was released or taken over: an orphan never runs an agent
)

// helperPoll is how often a helper waiting for its publication re-reads the
// fence on its own. The daemon wakes it right after publishing (wake.go), so
// this only bounds the wait when that wake is lost (a daemon that died right
// after publishing; its successor wakes the helpers it adopts). Polling every
// 20 ms instead made the helpers of a burst of creates, each preparing two
// SQLite queries per poll, a tenth of the machine's CPU while they waited.
var helperPoll = 200 * time.Millisecond // a var only so a test can make the wake the only way out

// helperArgs are the helper's command-line arguments: the reservation evidence,
// nothing user-controlled.
type helperArgs struct {
	home       string
	resID      string
	generation uint64
	cgroup     string           // the generation's cgroup to enter first ("" when none)
	wake       <-chan os.Signal // the daemon's wake-ups (nil: poll only)
}

// OpenFence opens the fence of the home directory home, as the daemon that
// started the pane holds it: the pane helper opens it on its own (it is
// another process, and outlives a daemon). Only the daemon's wiring knows the
// engine, so it hands RunHelper this.
type OpenFence func(home string) (fence.Fence, error)

// RunHelper is `skc-supervisor helper --home H --reservation R --generation G`, the
// pane's process. It records its pid and incarnation, waits until the fence
// (opened with open) shows its generation published, then runs the agent (argv,
// env and cwd read from the fence) as its child, forwards signals, and records a
// postmortem before it exits with the agent's status (128+n for signal n; 127
// when the agent cannot be found).
func RunHelper(args []string, open OpenFence) int {
	if len(args) == 1 && args[0] == clearArg {
		return 0 // recovery's stand-in in a kept session's pane (restart_start.go): nothing runs
	}
	// One P: the helper mostly waits (for publication, then for its agent),
	// and every OS thread it starts is a task against the kernel's pid_max for
	// as long as the session lives: with the default GOMAXPROCS an idle helper
	// kept 8 threads, with one 6, and the scale run stopped at ~3,750 sessions
	// when the machine ran out of pids (pid_max 32,768, fork: EAGAIN).
	runtime.GOMAXPROCS(1)
	a, err := parseHelperArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "skc-supervisor helper:", err)
		return helperUsage
	}
	// Listen for the daemon's wake before the first look at the fence: a wake
	// sent earlier is ignored (SIGURG's default), but then that first look
	// already sees the publication it announced.
	wake := make(chan os.Signal, 1)
	signal.Notify(wake, wakeSignal)
	defer signal.Stop(wake)
	a.wake = wake
	var st fence.Fence
	err = retryFence(context.Background(), func() (err error) {
		st, err = open(a.home)
		return err
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "skc-supervisor helper:", err)
		return helperNoFence
	}
	return runHelper(context.Background(), st, a, func() (fence.Fence, error) { return open(a.home) })
}

func parseHelperArgs(args []string) (helperArgs, error) {
	fs := flag.NewFlagSet("helper", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var a helperArgs
	var gen string
	fs.StringVar(&a.home, "home", "", "SKC_HOME")
	fs.StringVar(&a.resID, "reservation", "", "reservation id")
	fs.StringVar(&gen, "generation", "", "generation")
	fs.StringVar(&a.cgroup, "cgroup", "", "the generation's cgroup")
	if err := fs.Parse(args); err != nil {
		return a, err
	}
	g, err := strconv.ParseUint(gen, 10, 64)
	if err != nil || a.home == "" || a.resID == "" || g == 0 {
		return a, errors.New("usage: helper --home DIR --reservation ID --generation N")
	}
	a.generation = g
	return a, nil
}

// runHelper owns st: it closes it before the agent runs and opens the fence
// again (reopen) only to record the postmortem. A helper lives as long as its
// agent, and an open fence holds SQLite's file locks: with one per live
// session, every lock call of every fence user walks a kernel list of
// thousands (≈150 µs per call at 1,000 sessions; each read and write makes
// several), which made the daemon's own reads and writes O(sessions).
func runHelper(ctx context.Context, st fence.Fence, a helperArgs, reopen func() (fence.Fence, error)) int {
	code, row, pid, inc, ok := startHelper(ctx, st, a)
	st.Close()
	if !ok {
		return code
	}
	env := append(os.Environ(), row.Spec.Env...)
	ex := runAgent(row.Spec.Argv, env, row.Spec.Cwd)
	if ex.Err != nil {
		fmt.Fprintln(os.Stderr, "skc-supervisor helper: start agent:", ex.Err)
	}
	recordPostmortem(reopen, row, pid, inc, ex)
	return ex.Code
}

// startHelper reads the helper's spec, records its start and waits for its
// generation's publication; ok says to run the agent, otherwise code is the
// helper's exit code.
func startHelper(ctx context.Context, st fence.Fence, a helperArgs) (code int, row fence.Reservation, pid int, inc string, ok bool) {
	// The spec outlives the row's release (fence.HelperSpec), so this works
	// whether the helper starts before or after its generation is published.
	var h fence.HelperSpec
	var found bool
	err := retryFence(ctx, func() (err error) {
		h, found, err = st.HelperSpec(ctx, a.resID)
		return err
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "skc-supervisor helper:", err)
		return helperNoFence, row, 0, "", false
	}
	if !found || h.Generation != a.generation {
		fmt.Fprintln(os.Stderr, "skc-supervisor helper: reservation not found; not starting the agent")
		return helperGaveUp, row, 0, "", false
	}
	row = fence.Reservation{ID: h.ReservationID, Identity: h.Identity, Generation: h.Generation, Spec: h.Spec}
	pid = os.Getpid()
	cgroup := enterCgroup(a.cgroup)
	inc, err = fence.Incarnation(pid)
	if err == nil {
		err = recordStart(ctx, st, a.resID, pid, inc, cgroup)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "skc-supervisor helper: record start:", err)
		return helperGaveUp, row, 0, "", false
	}
	if !waitPublished(ctx, st, row, a.wake) {
		fmt.Fprintln(os.Stderr, "skc-supervisor helper: not published for this reservation; not starting the agent")
		return helperGaveUp, row, 0, "", false
	}
	return 0, row, pid, inc, true
}

// enterCgroup moves the helper into its generation's cgroup before it starts
// anything, so the agent and every descendant are born inside and the cgroup
// alone holds them (proctree). It returns the cgroup entered, "" when there is
// none or it could not be entered: the generation is then held by the pane's
// session, as on a host without cgroups, and the fence record says which.
func enterCgroup(dir string) string {
	if dir == "" {
		return ""
	}
	if err := proctree.EnterCgroup(dir); err != nil {
		fmt.Fprintln(os.Stderr, "skc-supervisor helper: cgroup not entered; the pane's session holds the agent:", err)
		return ""
	}
	return dir
}

// recordStart records the helper's start, retrying while the fence is contended
// (racing creates keep it busy): giving up would fail a create that is fine.
func recordStart(ctx context.Context, st fence.Fence, resID string, pid int, inc, cgroup string) error {
	return retryFence(ctx, func() error { return st.RecordHelperStart(ctx, resID, pid, inc, cgroup) })
}

// retryFence runs f until it succeeds or fails otherwise than with a busy or
// unavailable fence, for up to helperReadyWait: racing creates keep the fence
// busy, and a helper that starts while its files cannot be written (a disk
// gone read-only for a moment) waits for them rather than failing its create.
func retryFence(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(helperReadyWait)
	for {
		err := f()
		if verdict.CodeOf(err) != verdict.CodeIdentityFenceContended && verdict.CodeOf(err) != verdict.CodeFenceUnavailable {
			return err
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 10*time.Millisecond) {
			return err
		}
	}
}

// waitPublished re-reads the fence until this reservation's generation is the
// identity's published one (true), or the reservation is gone without publishing —
// released or reclaimed by someone else (false). A wake-up proves nothing, so the
// fence is the only evidence read.
func waitPublished(ctx context.Context, st fence.Fence, row fence.Reservation, wake <-chan os.Signal) bool {
	t := time.NewTimer(helperPoll)
	defer t.Stop()
	for {
		if pub, ok, err := st.PublishedByReservation(ctx, row.ID); err == nil && ok {
			return pub.Generation == row.Generation && !pub.Ended
		}
		if _, still, err := st.Reservation(ctx, row.ID); err == nil && !still {
			// Released between the two reads after publishing, or gone for good.
			pub, ok, err := st.PublishedByReservation(ctx, row.ID)
			return err == nil && ok && pub.Generation == row.Generation && !pub.Ended
		}
		t.Reset(helperPoll)
		select {
		case <-ctx.Done():
			return false
		case <-wake:
		case <-t.C:
		}
	}
}

// recordPostmortem writes the agent's end to the fence, opened again for it,
// retrying briefly: it is the only record of an exit that happens while the
// daemon is down.
func recordPostmortem(reopen func() (fence.Fence, error), row fence.Reservation, pid int, inc string, ex agentExit) {
	pm := fence.Postmortem{
		ReservationID: row.ID, Identity: row.Identity, Generation: row.Generation,
		HelperPID: pid, HelperIncarnation: inc, AgentPID: ex.PID,
		ExitStatus: ex.Status, Signal: ex.Signal,
		StartedAt: ex.Started, EndedAt: ex.Ended,
	}
	if ex.Rusage != nil {
		pm.UserTime = time.Duration(ex.Rusage.Utime.Nano())
		pm.SystemTime = time.Duration(ex.Rusage.Stime.Nano())
		pm.MaxRSS = ex.Rusage.Maxrss
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var st fence.Fence
	defer func() {
		if st != nil {
			st.Close()
		}
	}()
	for {
		var err error
		if st == nil {
			st, err = reopen()
		}
		if err == nil {
			if err = st.RecordPostmortem(ctx, pm); err == nil {
				return
			}
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			fmt.Fprintln(os.Stderr, "skc-supervisor helper: postmortem not recorded:", err)
			return
		}
	}
}
