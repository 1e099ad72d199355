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
	// standby is the token of a warm pool's standby (pool.go): the helper
	// waits for its hand-off before it has a reservation.
	standby string
	// ownPane: run only if the fence records this process as the
	// reservation's pane (a claimed standby: its reservation came from a
	// file, not from tmux starting it for that reservation). The daemon
	// placed such a helper in its cgroup (cgroup names the one entered, ""
	// when none) and recorded its start before the hand-off (handOff), so it
	// does neither itself.
	ownPane bool
	// entered yields the cgroup the helper entered ("" when none), once the
	// move RunHelper started at once is done (enterCgroupEarly): set for
	// every helper that records its own start (not a standby).
	entered <-chan string
}

// OpenFence opens the fence of the home directory home, as the daemon that
// started the pane holds it: the pane helper opens it on its own (it is
// another process, and outlives a daemon). Only the daemon's wiring knows the
// engine, so it hands RunHelper this.
type OpenFence func(home string) (fence.Fence, error)

// RunHelper is `skc-supervisor helper --home H --reservation R --generation G`, the
// pane's process until its gate opens. It enters its generation's cgroup,
// records its pid and incarnation (a warm pool's standby, `--standby TOKEN`,
// has both done by the daemon when it is claimed), waits until the fence
// shows its generation published and its own, and then execs the agent in
// place (argv, env and cwd read from the fence): from then on the pane's
// process is the agent, and tmux keeps its exit status or signal in the dead
// pane (remain-on-exit), where end detection reads it. It returns only when no
// agent runs: its own exit code (helperUsage, helperNoFence, helperGaveUp), or
// 127/126 when the agent could not be executed, recorded first as the
// generation's postmortem.
func RunHelper(args []string, open OpenFence) int {
	if len(args) == 1 && args[0] == clearArg {
		return 0 // recovery's stand-in in a kept session's pane (restart_start.go): nothing runs
	}
	// One P: the helper only waits (for publication) before it becomes the
	// agent, and every OS thread it starts is a task against the kernel's
	// pid_max while it waits: a burst of creates has many waiting at once.
	runtime.GOMAXPROCS(1)
	a, err := parseHelperArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "skc-supervisor helper:", err)
		return helperUsage
	}
	if a.standby == "" {
		a.entered = enterCgroupEarly(a.cgroup)
	}
	// Listen for the daemon's wake before the first look at the fence: a wake
	// sent earlier is ignored (SIGURG's default), but then that first look
	// already sees the publication it announced.
	wake := make(chan os.Signal, 1)
	signal.Notify(wake, wakeSignal)
	defer signal.Stop(wake)
	a.wake = wake
	// A standby opens the fence before its hand-off, while it waits: the
	// creates of a burst wake their standbys together, and each opening its
	// fence then (files, connections, the schema check) would compete with
	// the burst's own writes. An open fence between transactions holds no lock.
	var st fence.Fence
	err = retryFence(context.Background(), func() (err error) {
		st, err = open(a.home)
		return err
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "skc-supervisor helper:", err)
		return helperNoFence
	}
	if a.standby != "" {
		warmFence(st)
		if code, ok := awaitHandoff(&a); !ok {
			st.Close()
			return code
		}
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
	fs.StringVar(&a.standby, "standby", "", "a warm pool standby's token")
	if err := fs.Parse(args); err != nil {
		return a, err
	}
	if a.standby != "" {
		if a.home == "" || !validToken(a.standby) || a.resID != "" || gen != "" {
			return a, errors.New("usage: helper --home DIR --standby TOKEN")
		}
		return a, nil
	}
	g, err := strconv.ParseUint(gen, 10, 64)
	if err != nil || a.home == "" || a.resID == "" || g == 0 {
		return a, errors.New("usage: helper --home DIR --reservation ID --generation N")
	}
	a.generation = g
	return a, nil
}

// runHelper owns st: it closes it before the exec (an open fence is SQLite
// file locks, which an exec'd agent must not inherit as open descriptors) and
// opens it again (reopen) only to record a failed exec.
func runHelper(ctx context.Context, st fence.Fence, a helperArgs, reopen func() (fence.Fence, error)) int {
	code, row, pid, inc, ok := startHelper(ctx, st, a)
	st.Close()
	if !ok {
		return code
	}
	env := agentEnv(os.Environ(), row.Spec.Env, row.Spec.Cwd)
	ex := execAgent(row.Spec.Argv, env, row.Spec.Cwd)
	fmt.Fprintln(os.Stderr, "skc-supervisor helper: start agent:", ex.Err)
	if inc == "" {
		inc, _ = fence.Incarnation(pid) // a claimed standby's: recorded by the daemon
	}
	recordPostmortem(reopen, row, pid, inc, ex)
	return ex.Status
}

// startHelper reads the helper's spec, records its start (a claimed
// standby's was recorded by the daemon) and waits for its generation's
// publication; ok says to run the agent, otherwise code is the helper's exit
// code. inc is "" for a claimed standby: it is read only if the exec fails.
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
	if !a.ownPane {
		if inc, err = recordOwnStart(ctx, st, a, pid); err != nil {
			fmt.Fprintln(os.Stderr, "skc-supervisor helper: record start:", err)
			return helperGaveUp, row, 0, "", false
		}
	}
	if !waitPublished(ctx, st, row, a.wake, a.ownPane) {
		fmt.Fprintln(os.Stderr, "skc-supervisor helper: not published for this reservation; not starting the agent")
		return helperGaveUp, row, 0, "", false
	}
	return 0, row, pid, inc, true
}

// recordOwnStart waits until the helper is in the generation's cgroup (or
// its move failed) and records the helper's start: its pid, incarnation and
// the cgroup entered. The start record is the helper's claim that the cgroup
// holds it, so the move is done before it, and before any agent.
func recordOwnStart(ctx context.Context, st fence.Fence, a helperArgs, pid int) (string, error) {
	cgroup := <-a.entered
	inc, err := fence.Incarnation(pid)
	if err != nil {
		return "", err
	}
	return inc, recordStart(ctx, st, a.resID, pid, inc, cgroup)
}

// enterCgroupEarly starts the helper's move into its cgroup at once, beside
// its fence's open and its spec's read: the move waits for an RCU grace
// period (~15 ms here), which was the largest part of the time from a
// create to its agent running without a pool. cgroup.procs moves the whole
// process, whichever of its threads writes it.
func enterCgroupEarly(dir string) <-chan string {
	ch := make(chan string, 1)
	go func() { ch <- enterCgroup(dir) }()
	return ch
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
// unavailable fence: racing creates keep the fence busy, a helper may start
// while its files cannot be written (a disk gone read-only for a moment), and
// a fleet's PostgreSQL may restart or fail over right after a create was
// answered published. Giving up would lose that agent (its create succeeded,
// and nothing would start it), so the helper waits as long as the fence stays
// merely unreachable — its session's kill still ends it (the hangup) — and
// says so on its pane once it has waited fenceWaitNotice. Its retries back off
// to fenceRetryMax, so a long outage costs a waiting helper next to nothing.
func retryFence(ctx context.Context, f func() error) error {
	began, said := time.Now(), false
	delay := 10 * time.Millisecond
	for {
		err := f()
		if verdict.CodeOf(err) != verdict.CodeIdentityFenceContended && verdict.CodeOf(err) != verdict.CodeFenceUnavailable {
			if said && err == nil {
				fmt.Fprintln(fenceWaitOut, "skc-supervisor helper: the fence answers again")
			}
			return err
		}
		if !said && time.Since(began) >= fenceWaitNotice {
			fmt.Fprintln(fenceWaitOut, "skc-supervisor helper: waiting for the fence:", err)
			said = true
		}
		if !sleepCtx(ctx, delay) {
			return err
		}
		delay = min(2*delay, fenceRetryMax)
	}
}

// How a helper waits for an unreachable fence (retryFence); variables so that
// tests need not wait out real outages.
var (
	fenceWaitNotice           = helperReadyWait
	fenceRetryMax             = time.Second
	fenceWaitOut    io.Writer = os.Stderr
)

// waitPublished re-reads the fence until this reservation's generation is the
// identity's published one (true), or the reservation is gone without publishing —
// released or reclaimed by someone else (false). A wake-up proves nothing, so the
// fence is the only evidence read. ownPane (a claimed standby) also requires the
// published pane to be this process.
func waitPublished(ctx context.Context, st fence.Fence, row fence.Reservation, wake <-chan os.Signal, ownPane bool) bool {
	t := time.NewTimer(helperPoll)
	defer t.Stop()
	mine := func(pub fence.Published) bool {
		return pub.Generation == row.Generation && !pub.Ended && (!ownPane || pub.PanePID == os.Getpid())
	}
	for {
		if pub, ok, err := st.PublishedByReservation(ctx, row.ID); err == nil && ok {
			return mine(pub)
		}
		if _, still, err := st.Reservation(ctx, row.ID); err == nil && !still {
			// Released between the two reads after publishing, or gone for good.
			pub, ok, err := st.PublishedByReservation(ctx, row.ID)
			return err == nil && ok && mine(pub)
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

// recordPostmortem writes the end of an agent that could not be executed to
// the fence, opened again for it, retrying briefly, before the helper exits:
// its status (127 or 126) is then the generation's exit even when the daemon
// is down, and says it was the exec that failed, not an agent. The reason is
// on the pane's stderr, which the ended verdict's output tail carries.
func recordPostmortem(reopen func() (fence.Fence, error), row fence.Reservation, pid int, inc string, ex agentExit) {
	status := ex.Status
	pm := fence.Postmortem{
		ReservationID: row.ID, Identity: row.Identity, Generation: row.Generation,
		HelperPID: pid, HelperIncarnation: inc,
		ExitStatus: &status, StartedAt: ex.Started, EndedAt: ex.Ended,
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
