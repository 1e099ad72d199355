package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/internal/testwatch"
	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
	"github.com/skc-supervisor/skc-supervisor/proctree"
)

// The binary under test is built once per test binary, on first use, so that a
// run selecting only helper-mode tests does not pay for the build. It is built
// with -race (unless SKC_IT_RACE=0): the daemon's own data races then surface as
// a non-zero exit in MustCleanShutdown and as "DATA RACE" in its stderr.
var (
	buildOnce sync.Once
	binDir    string // world-readable (0755): the other-uid test runs the binary as nobody
	binPath   string
	buildErr  error
	buildLog  string
)

const modulePkg = "github.com/skc-supervisor/skc-supervisor/cmd/skc-supervisor"

// Generous deadlines: conditions are waited for, never assumed after a sleep. They
// only bound how long a broken build takes to fail.
const (
	startDeadline = 90 * time.Second
	stopDeadline  = 60 * time.Second
	cliDeadline   = 2 * time.Minute
	waitDeadline  = 60 * time.Second
)

func TestMain(m *testing.M) {
	if mode := os.Getenv("SKC_IT_HELPER"); mode != "" {
		os.Exit(runHelperMode(mode))
	}
	testwatch.Arm()
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// needBinary builds the binary (once) and fails t when it does not build: the
// test cannot say anything about a product that does not exist yet.
func needBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(build)
	if buildErr != nil {
		t.Fatalf("building %s: %v\n%s", modulePkg, buildErr, buildLog)
	}
	return binPath
}

func build() {
	dir, err := os.MkdirTemp("", "skcbin")
	if err != nil {
		buildErr = err
		return
	}
	binDir = dir
	if err := os.Chmod(dir, 0o755); err != nil {
		buildErr = err
		return
	}
	binPath = filepath.Join(dir, "skc-supervisor")
	args := []string{"build"}
	if os.Getenv("SKC_IT_RACE") != "0" {
		args = append(args, "-race")
	}
	args = append(args, "-o", binPath, modulePkg)
	cmd := exec.Command(goTool(), args...)
	cmd.Dir = ".." // the module root: tests run in integration/
	out, err := cmd.CombinedOutput()
	buildLog = string(out)
	buildErr = err
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

// Home is one private SKC_HOME (and runtime dir). Its cleanup, which runs after
// the cleanups of every daemon started in it, kills the supervised tmux server by
// its pid and fails the test if any process that carries this home in its
// environment is still alive.
type Home struct {
	Dir     string
	Runtime string // sockets; Dir unless a test separates them
	root    string // removed at cleanup
	t       testing.TB

	mu         sync.Mutex
	serverPIDs map[int]bool
	// outerPID maps a pid the home's tmux server reports (its own pid
	// namespace's) to this test's; nil when they are the same (NSHost sets it).
	outerPID func(int) int
}

// NewHome creates a short home (unix socket paths are limited to 107 bytes).
func NewHome(t testing.TB) *Home {
	t.Helper()
	needBinary(t)
	dir, err := os.MkdirTemp("", "skc")
	if err != nil {
		t.Fatal(err)
	}
	return homeAt(t, dir, dir)
}

// homeAt is a home at dir (which may be a symlink or a bad directory on purpose);
// cleanup removes root.
func homeAt(t testing.TB, dir, root string) *Home {
	t.Helper()
	needBinary(t)
	h := &Home{Dir: dir, Runtime: dir, root: root, t: t, serverPIDs: map[int]bool{}}
	t.Cleanup(func() { h.cleanup() })
	return h
}

// APISock is the daemon's API socket.
func (h *Home) APISock() string { return filepath.Join(h.Runtime, "api.sock") }

// TmuxSock is the supervised tmux server's socket.
func (h *Home) TmuxSock() string { return filepath.Join(h.Runtime, "tmux.sock") }

// Env is the environment every process of this home runs with. SKC_IT_MARK lets
// the leak check find strays by a value unique to this test, never by a name.
func (h *Home) Env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SKC_") || strings.HasPrefix(kv, "TMUX=") ||
			strings.HasPrefix(kv, "TMUX_PANE=") || strings.HasPrefix(kv, "GORACE=") || strings.HasPrefix(kv, "GODEBUG=") {
			continue
		}
		env = append(env, kv)
	}
	// A -race binary sleeps 1 s at exit by default (GORACE atexit_sleep_ms) to let
	// late reports land; every CLI call would pay it.
	// SKC_TMUX: the daemon and every CLI run the tmux under test
	// (SKC_TEST_TMUX, see internal/tmuxtest); extra may override it.
	env = append(env, "SKC_HOME="+h.Dir, "SKC_TMUX="+tmuxtest.Bin(), "SKC_TMUX_CONFIG=/dev/null", "SKC_IT_MARK="+h.Dir,
		"GORACE=atexit_sleep_ms=50",
		// A started exec.Cmd that is never waited for panics (a leaked child).
		"GODEBUG=execwait=2")
	return append(env, extra...)
}

// NoteServerPID remembers a tmux server pid seen in this home, for cleanup.
func (h *Home) NoteServerPID(pid int) {
	if pid > 0 && h.outerPID != nil {
		pid = h.outerPID(pid)
	}
	if pid <= 0 {
		return
	}
	h.mu.Lock()
	h.serverPIDs[pid] = true
	h.mu.Unlock()
}

func (h *Home) cleanup() {
	h.t.Helper()
	if pid, ok := h.liveServerPID(); ok {
		h.NoteServerPID(pid)
	}
	h.mu.Lock()
	pids := make([]int, 0, len(h.serverPIDs))
	for pid := range h.serverPIDs {
		pids = append(pids, pid)
	}
	h.mu.Unlock()
	for _, pid := range pids {
		if h.ownsProcess(pid) {
			terminate(pid)
		}
	}
	h.checkNoStrays()
	// The daemon's generation cgroups (empty now: no process of the home is
	// left) are removed with the home. A cgroup whose last process has just
	// exited may still refuse rmdir for a moment (EBUSY until the kernel has
	// released the task): retried for a few seconds, so no run leaves empty
	// cgroups on the machine.
	for _, key := range []string{h.Dir, realPath(h.Dir)} {
		base, err := proctree.BaseFor(key)
		if err != nil {
			continue
		}
		for i := 0; i < 250; i++ {
			proctree.RemoveBaseTree(base)
			if _, err := os.Stat(base); err != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	os.RemoveAll(h.root)
}

func realPath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// liveServerPID asks the supervised tmux server for its pid (list-sessions never
// starts a server).
func (h *Home) liveServerPID() (int, bool) {
	out, err := h.Tmux("list-sessions", "-F", "#{pid}")
	if err != nil {
		return 0, false
	}
	var pid int
	if _, err := fmt.Sscanf(strings.TrimSpace(out), "%d", &pid); err != nil {
		return 0, false
	}
	return pid, true
}

// ownsProcess reports whether pid belongs to this home: its environment carries
// the home, or its command line names the home's socket. Guards against pid reuse.
func (h *Home) ownsProcess(pid int) bool {
	if envHas(pid, "SKC_IT_MARK="+h.Dir) || envHas(pid, "SKC_HOME="+h.Dir) {
		return true
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return bytes.Contains(cmdline, []byte(h.Dir))
}

// checkNoStrays waits for every process of this home to be gone; any left is an
// error (a leaked daemon, tmux server, helper or agent) and is killed by pid.
func (h *Home) checkNoStrays() {
	h.t.Helper()
	var left []int
	deadline := time.Now().Add(20 * time.Second)
	for {
		left = h.processes()
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, pid := range left {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		h.t.Errorf("process left behind in %s: pid %d: %s", h.Dir, pid,
			strings.ReplaceAll(string(cmdline), "\x00", " "))
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// processes lists live (non-zombie) processes of this home, other than us.
func (h *Home) processes() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		if isZombie(pid) {
			continue
		}
		if envHas(pid, "SKC_IT_MARK="+h.Dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Tmux runs tmux against the supervised server's socket.
func (h *Home) Tmux(args ...string) (string, error) {
	all := append([]string{"-S", h.TmuxSock()}, args...)
	cmd := tmuxtest.Command(all...)
	cmd.Env = h.Env()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("tmux %q: %v: %s", args, err, stderr.String())
	}
	return string(out), nil
}

// Result is one finished CLI invocation.
type Result struct {
	Args   []string
	Stdout string
	Stderr string
	Code   int
}

func (r Result) String() string {
	return fmt.Sprintf("skc-supervisor %q: exit %d\nstdout: %s\nstderr: %s",
		r.Args, r.Code, clip(r.Stdout), clip(r.Stderr))
}

// CLIOpts are the less common knobs of a CLI run.
type CLIOpts struct {
	Dir   string   // working directory
	Env   []string // extra environment
	Wrap  []string // a command the binary runs under (e.g. setpriv …)
	Stdin io.Reader
}

// CLI runs the binary with this home's environment.
func (h *Home) CLI(t testing.TB, args ...string) Result {
	t.Helper()
	return h.CLIWith(t, CLIOpts{}, args...)
}

// CLIWith runs the binary with opts.
func (h *Home) CLIWith(t testing.TB, opts CLIOpts, args ...string) Result {
	t.Helper()
	needBinary(t)
	r, err := h.runCLI(t, opts, args...)
	if err != nil {
		t.Fatalf("%s\n%v", r, err)
	}
	return r
}

// runCLI runs the binary and never calls FailNow, so that goroutines may use it.
func (h *Home) runCLI(t testing.TB, opts CLIOpts, args ...string) (Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliDeadline)
	defer cancel()
	argv := append(append(append([]string{}, opts.Wrap...), binPath), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = h.Env(opts.Env...)
	cmd.Dir = opts.Dir
	cmd.Stdin = opts.Stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := Result{Args: args, Stdout: stdout.String(), Stderr: stderr.String()}
	if strings.Contains(r.Stderr, "WARNING: DATA RACE") {
		t.Errorf("data race in the CLI:\n%s", r)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return r, fmt.Errorf("did not finish within %v", cliDeadline)
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		r.Code = ee.ExitCode()
	default:
		return r, fmt.Errorf("running: %v", err)
	}
	return r, nil
}

// HTTP returns a client whose every request goes to the home's API socket; the
// URL's host is ignored ("http://skc/v1/ping").
func (h *Home) HTTP() *http.Client {
	sock := h.APISock()
	return &http.Client{
		Timeout: cliDeadline,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			},
		},
	}
}

// Get does one GET on the API and returns the status and body.
func (h *Home) Get(t testing.TB, path string) (int, []byte) {
	t.Helper()
	return h.Do(t, "GET", path, "", nil)
}

// Do sends one raw request on the API.
func (h *Home) Do(t testing.TB, method, path, body string, hdr http.Header) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://skc"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.HTTP().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp.StatusCode, b
}

func clip(s string) string {
	const max = 4000
	if len(s) > max {
		return s[:max/2] + "\n…\n" + s[len(s)-max/2:]
	}
	return s
}
