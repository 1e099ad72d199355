package lifecycle

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/sqlite"
	"github.com/skc-supervisor/skc-supervisor/internal/testwatch"
	"github.com/skc-supervisor/skc-supervisor/metrics"
	"github.com/skc-supervisor/skc-supervisor/proctree"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"

	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

// openTestFence opens a home's fence as the daemon's wiring does (cmd's
// openFence): the test binary plays the pane helper too.
func openTestFence(home string) (fence.Fence, error) {
	s, err := sqlite.Open(filepath.Join(home, "fence.sqlite"), fence.Options{})
	if err != nil {
		return nil, err // a nil Fence, not a Fence holding a nil *Store
	}
	return s, nil
}

// TestMain lets the test binary play every other program the lifecycle runs:
// the pane helper (`helper …`, exactly as the daemon's pane command), fake agents
// (`agent …`), and a whole daemon that crashes at a fault point (`faultchild`).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "helper":
			os.Exit(RunHelper(os.Args[2:], openTestFence))
		case "agent":
			os.Exit(fakeAgent(os.Args[2:]))
		case "execagent":
			os.Exit(execAgent(os.Args[2:], agentEnv(os.Environ(), nil, ""), "").Status)
		case "hupdefault":
			os.Exit(hupDefaultChild(os.Args[2:]))
		case "createchild":
			os.Exit(createChild(os.Args[2:]))
		case "faultchild":
			os.Exit(faultChild(os.Args[2:]))
		case "poolchild":
			os.Exit(poolChild(os.Args[2:]))
		}
	}
	testwatch.Arm()
	os.Exit(m.Run())
}

// startIgnoringChild starts `agent ignore` in a process group of its own
// and lets it go: a child that outlives its agent.
func startIgnoringChild() bool {
	exe, _ := os.Executable()
	c := exec.Command(exe, "agent", "ignore")
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c.Start() != nil {
		return false
	}
	_ = c.Process.Release()
	return true
}

// fakeAgent modes: "exit N" exits with N; "sleep" waits for a signal and dies of
// it (default action); "pwdenv FILE" writes its cwd and env to FILE then sleeps.
func fakeAgent(args []string) int {
	switch args[0] {
	case "exit":
		n, _ := strconv.Atoi(args[1])
		return n
	case "sleep":
		for {
			time.Sleep(time.Hour)
		}
	case "ignore": // ignores the hangup and SIGTERM: only SIGKILL ends it
		signal.Ignore(syscall.SIGHUP, syscall.SIGTERM)
		markReady()
		for {
			time.Sleep(time.Hour) // not select {}: the runtime would call that a deadlock and exit
		}
	case "childpgrp": // a child that ignores everything polite, in a group of its own
		if !startIgnoringChild() {
			return 3
		}
		signal.Ignore(syscall.SIGHUP, syscall.SIGTERM)
		markReady()
		for {
			time.Sleep(time.Hour) // not select {}: the runtime would call that a deadlock and exit
		}
	case "childleft": // a child that ignores everything polite; itself dies of the hangup
		if !startIgnoringChild() {
			return 3
		}
		markReady()
		for {
			time.Sleep(time.Hour)
		}
	case "childexit": // leaves a child that ignores everything polite, then exits N
		if !startIgnoringChild() {
			return 3
		}
		n, _ := strconv.Atoi(args[1])
		return n
	case "mark", "markexit": // appends its pid to FILE, then sleeps (mark) or exits N (markexit)
		f, err := os.OpenFile(args[1], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return 98
		}
		_, _ = fmt.Fprintf(f, "%d\n", os.Getpid())
		_ = f.Close()
		if args[0] == "markexit" {
			n, _ := strconv.Atoi(args[2])
			return n
		}
		for {
			time.Sleep(time.Hour)
		}
	case "pwdenv":
		wd, _ := os.Getwd()
		body := wd + "\n" + strings.Join(os.Environ(), "\n") + "\n"
		_ = os.WriteFile(args[1]+".tmp", []byte(body), 0o600)
		_ = os.Rename(args[1]+".tmp", args[1])
		for {
			time.Sleep(time.Hour)
		}
	}
	return talkAgent(args) // the agents of talk_test.go
}

// env is one supervised world: a private tmux server, a fence, a verdict writer,
// a census and a Manager, all real.
type env struct {
	t      testing.TB
	home   string
	socket string
	store  fence.Fence
	w      *verdict.Writer
	client *tmuxctl.Client
	census *census.Census
	m      *Manager
	reg    *metrics.Registry
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed bool

	noCgroup bool // Config.NoCgroup: hold generations by the pane's session only
	poolSize int  // Config.PoolSize: the warm pool (0: off)
	// exitOnly: the census sees pane deaths only when the Manager's exit
	// watch tells it (census.Options.DeathsByExitOnly), its reconcile an
	// hour away.
	exitOnly  bool
	reconcile time.Duration // the census's reconcile period, when not the default

	wrapFence func(fence.Fence) fence.Fence // what the Manager uses of store; nil: store itself

	startServer func(context.Context) error // tmuxctl.Config.StartServer; nil: none
}

func newHome(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "skc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tmuxtest.Command("-S", filepath.Join(dir, "tmux.sock"), "kill-server").Run()
		_ = os.RemoveAll(dir)
		removeCgroups(dir)
	})
	return dir
}

// startEnv starts the components on home (a fresh one when ""), and runs the
// Manager's end detection loop unless noRun.
func startEnv(t testing.TB, home string, fault string, noRun bool) *env {
	t.Helper()
	return startEnvServer(t, home, fault, noRun, nil)
}

// startEnvServer is startEnv with a tmuxctl StartServer hook, which the client
// calls before each dial that finds no server: a test can hold a reconnect there.
func startEnvServer(t testing.TB, home string, fault string, noRun bool, startServer func(context.Context) error) *env {
	t.Helper()
	return startEnvWith(t, &env{home: home, startServer: startServer}, fault, noRun)
}

// startEnvWith starts e (home, startServer and noCgroup as the test sets them).
func startEnvWith(t testing.TB, e *env, fault string, noRun bool) *env {
	t.Helper()
	if e.home == "" {
		e.home = newHome(t)
	}
	e.t, e.socket = t, filepath.Join(e.home, "tmux.sock")
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	if err := e.open(ctx, fault); err != nil {
		e.close()
		t.Fatal(err)
	}
	if !noRun {
		e.wg.Add(1)
		go func() { defer e.wg.Done(); _ = e.m.Run(ctx) }()
	}
	t.Cleanup(e.close)
	return e
}

func (e *env) open(ctx context.Context, fault string) error {
	var err error
	if e.store, err = sqlite.Open(filepath.Join(e.home, "fence.sqlite"), fence.Options{}); err != nil {
		return err
	}
	if e.w, err = verdict.NewWriter(e.store, filepath.Join(e.home, "verdicts.jsonl"), zerolog.Nop()); err != nil {
		return err
	}
	e.client = tmuxctl.NewClient(tmuxctl.Config{Tmux: tmuxtest.Bin(), Socket: e.socket, ConfigFile: "/dev/null", StartServer: e.startServer})
	e.wg.Add(1)
	go func() { defer e.wg.Done(); _ = e.client.Run(ctx) }()
	e.census = census.New(e.client, nil)
	if e.exitOnly {
		e.census = census.NewWithOptions(e.client, nil, census.Options{DeathsByExitOnly: true, Reconcile: time.Hour})
	} else if e.reconcile > 0 {
		e.census = census.NewWithOptions(e.client, nil, census.Options{Reconcile: e.reconcile})
	}
	e.wg.Add(1)
	go func() { defer e.wg.Done(); _ = e.census.Run(ctx) }()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := e.census.WaitSynced(wctx); err != nil {
		return fmt.Errorf("census never synced: %w", err)
	}
	e.reg = metrics.NewRegistry()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var log *zerolog.Logger
	if os.Getenv("SKC_TEST_LOG") != "" {
		l := zerolog.New(os.Stderr).With().Timestamp().Logger()
		log = &l
	}
	mgrFence := e.store
	if e.wrapFence != nil {
		mgrFence = e.wrapFence(e.store)
	}
	e.m, err = New(Config{Home: e.home, Tmux: e.client, Census: e.census, Fence: mgrFence,
		Verdicts: e.w, HelperPath: exe, Metrics: e.reg, Fault: fault, Log: log, NoCgroup: e.noCgroup,
		PoolSize: e.poolSize})
	return err
}

func (e *env) close() {
	if e.closed {
		return
	}
	e.closed = true
	if e.m != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = e.m.Shutdown(ctx)
		cancel()
	}
	e.cancel()
	// Client.Run closes its event stream itself before returning (no reader
	// needed), so nothing is left to drain once e.wg is done.
	e.wg.Wait()
	if e.w != nil {
		_ = e.w.Close()
	}
	if e.store != nil {
		_ = e.store.Close()
	}
}

// identity returns a fresh identity under the env's home (state dirs must exist
// for canonicalisation to be stable).
func (e *env) identity(name string) (fence.Identity, fence.Spec) {
	dir := filepath.Join(e.home, "state-"+name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		e.t.Fatal(err)
	}
	exe, _ := os.Executable()
	id := fence.Identity{StateDir: dir, SessionID: name}
	return id, fence.Spec{StateFile: filepath.Join(dir, name+".jsonl"), Argv: []string{exe, "agent", "sleep"}, Cwd: dir}
}

// sessions lists the live sessions carrying identity digest d, read from tmux
// itself (a fork, not the census: the test checks the census's world too).
func (e *env) sessions(d string) []string {
	out, err := tmuxtest.Command("-S", e.socket, "list-sessions", "-F",
		"#{session_id} #{session_name} #{@skc-identity}").Output()
	if err != nil {
		return nil
	}
	var ids []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[2] == d {
			ids = append(ids, f[0])
		} else if len(f) >= 2 && strings.HasPrefix(f[1], "skc-"+d[:12]) {
			ids = append(ids, f[0]) // an attempt not yet (or never) tagged
		}
	}
	return ids
}

// verdicts returns the journal's records for id.
func (e *env) verdicts(id fence.Identity) []verdict.Record {
	e.t.Helper()
	recs, err := e.m.verdictsOf(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return recs
}

func count(recs []verdict.Record, v string) int {
	n := 0
	for _, r := range recs {
		if r.Verdict == v {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func pidAlive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

func startEnvB(b *testing.B) *env { return startEnv(b, "", "", false) }

// removeCgroups removes the generation cgroups the tests' daemons made for home
// once their processes are gone (the tmux server was killed after the Manager
// stopped, so no stop removed them); it waits a little for the hangup to land.
func removeCgroups(home string) {
	base, err := proctree.BaseFor(home)
	if err != nil {
		return
	}
	for i := 0; i < 500; i++ { // up to 10 s
		proctree.RemoveBaseTree(base)
		if _, err := os.Stat(base); err != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readyComm is the name a fake agent gives itself once its signal handling is
// in place (before that, a signal kills it by its default action): a test that
// signals it waits for isReady.
const readyComm = "agent-ready"

// markReady renames the main thread (any thread of a group may rename another
// through /proc/self/task/TID/comm).
func markReady() {
	_ = os.WriteFile(fmt.Sprintf("/proc/self/task/%d/comm", os.Getpid()), []byte(readyComm), 0)
}

func isReady(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.TrimSpace(string(b)) == readyComm
}
