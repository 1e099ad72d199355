package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// DaemonOpts configure one `serve`.
type DaemonOpts struct {
	Fault string   // SKC_FAULT, e.g. "after:spawned"
	Env   []string // extra environment
	// NoWait returns right after start, without waiting for /v1/ping.
	NoWait bool
	// Args follow "serve".
	Args []string
	// Wrap is a command that runs serve as its child (nsenter into a
	// namespaced host, NSHost). The daemon's pid is then that child's, and
	// signals go to it; the wrapper passes its exit status on.
	Wrap []string
}

// Daemon is one running `skc-supervisor serve`.
type Daemon struct {
	*Home
	cmd       *exec.Cmd
	logPath   string
	done      chan struct{}
	state     *os.ProcessState
	stopped   bool // Stop or Kill was called: cleanup has nothing to assert
	startedAt time.Time
	wrapped   bool // cmd is DaemonOpts.Wrap, serve its child
}

// StartDaemon starts a fresh home and a daemon in it.
func StartDaemon(t testing.TB, opts DaemonOpts) *Daemon {
	t.Helper()
	return NewHome(t).Start(t, opts)
}

// Start starts `serve` in h and waits until GET /v1/ping answers.
func (h *Home) Start(t testing.TB, opts DaemonOpts) *Daemon {
	t.Helper()
	bin := needBinary(t)
	logf, err := os.CreateTemp("", "skcdaemon-*.log")
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{Home: h, logPath: logf.Name(), done: make(chan struct{}), startedAt: time.Now(),
		wrapped: len(opts.Wrap) > 0}
	env := opts.Env
	if opts.Fault != "" {
		env = append(env, "SKC_FAULT="+opts.Fault)
	}
	argv := append(append(append([]string{}, opts.Wrap...), bin, "serve"), opts.Args...)
	d.cmd = exec.Command(argv[0], argv[1:]...)
	d.cmd.Env = h.Env(env...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("starting serve: %v", err)
	}
	logf.Close()
	go func() {
		d.cmd.Wait()
		d.state = d.cmd.ProcessState
		close(d.done)
	}()
	t.Cleanup(func() { d.cleanup(t) })
	if !opts.NoWait {
		d.waitReady(t)
	}
	return d
}

// PID is the daemon's pid (in this test's pid namespace). Under a wrapper it
// is the wrapper's one child; until that child exists, or once it is gone,
// the wrapper's own pid.
func (d *Daemon) PID() int {
	if d.wrapped {
		if c := children(d.cmd.Process.Pid); len(c) == 1 {
			return c[0]
		}
	}
	return d.cmd.Process.Pid
}

// signal sends sig to the daemon (the wrapper's child under a wrapper: the
// wrapper, nsenter, passes no signal on, only the child's exit status).
func (d *Daemon) signal(sig syscall.Signal) {
	_ = syscall.Kill(d.PID(), sig)
}

// Log is everything the daemon wrote so far.
func (d *Daemon) Log() string {
	b, _ := os.ReadFile(d.logPath)
	return string(b)
}

// Exited reports whether the daemon process has ended.
func (d *Daemon) Exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

func (d *Daemon) waitReady(t testing.TB) {
	t.Helper()
	WaitFor(t, startDeadline, "daemon ready (GET /v1/ping)", func() error {
		if d.Exited() {
			t.Fatalf("daemon exited before it was ready: %v\n%s", d.state, clip(d.Log()))
		}
		status, body, err := tryGet(d.Home, "/v1/ping")
		if err != nil {
			return err
		}
		var ping struct {
			OK bool `json:"ok"`
		}
		if status != 200 || json.Unmarshal(body, &ping) != nil || !ping.OK {
			return fmt.Errorf("ping: %d %s", status, body)
		}
		return nil
	})
}

// Stop is MustCleanShutdown: SIGTERM, then the daemon must exit 0 within a
// generous deadline, with no data race reported.
func (d *Daemon) Stop(t testing.TB) {
	t.Helper()
	d.StopWith(t, syscall.SIGTERM)
}

// StopWith is Stop with another signal (CONTRACT: SIGTERM or SIGINT).
func (d *Daemon) StopWith(t testing.TB, sig syscall.Signal) {
	t.Helper()
	d.stopped = true
	if d.Exited() {
		t.Fatalf("daemon had already exited: %v\n%s", d.state, clip(d.Log()))
	}
	d.signal(sig)
	st := d.wait(t, stopDeadline)
	if st == nil {
		d.signal(syscall.SIGKILL)
		<-d.done
		t.Fatalf("daemon did not exit within %v of %v\n%s", stopDeadline, sig, clip(d.Log()))
	}
	if !st.Success() {
		t.Errorf("daemon exit after %v: %v, want exit 0\n%s", sig, st, clip(d.Log()))
	}
	d.checkRace(t)
}

// Kill sends SIGKILL and waits for the process to end.
func (d *Daemon) Kill(t testing.TB) {
	t.Helper()
	d.stopped = true
	if !d.Exited() {
		d.signal(syscall.SIGKILL)
	}
	<-d.done
}

// WaitExit waits for the daemon to end on its own and returns its state (nil
// when it did not end within timeout).
func (d *Daemon) WaitExit(t testing.TB, timeout time.Duration) *os.ProcessState {
	t.Helper()
	st := d.wait(t, timeout)
	if st != nil {
		d.stopped = true
		d.checkRace(t)
	}
	return st
}

func (d *Daemon) wait(t testing.TB, timeout time.Duration) *os.ProcessState {
	select {
	case <-d.done:
		return d.state
	case <-time.After(timeout):
		return nil
	}
}

func (d *Daemon) checkRace(t testing.TB) {
	t.Helper()
	log := d.Log()
	if strings.Contains(log, "WARNING: DATA RACE") {
		t.Errorf("data race in the daemon:\n%s", raceReports(log))
	}
	if strings.Contains(log, "leaked exec.Cmd") {
		t.Errorf("the daemon leaked a child process (GODEBUG=execwait=2):\n%s", clip(log))
	}
}

// cleanup stops a daemon the test left running; it must still shut down cleanly.
func (d *Daemon) cleanup(t testing.TB) {
	defer os.Remove(d.logPath)
	if t.Failed() || os.Getenv("SKC_IT_LOGS") != "" {
		t.Logf("daemon log (%s, pid %d):\n%s", d.Dir, d.PID(), clip(d.Log()))
	}
	if d.stopped || d.Exited() {
		return
	}
	d.Stop(t)
}

// signalOf returns the signal that ended a process, or 0.
func signalOf(st *os.ProcessState) syscall.Signal {
	if st == nil {
		return 0
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0
	}
	return ws.Signal()
}

// terminate ends a process we own by pid: SIGTERM, then SIGKILL if it lingers.
func terminate(pid int) {
	syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
}

// alive reports whether pid is a live, non-zombie process.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	return !isZombie(pid)
}

func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

func envHas(pid int, kv string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return false
	}
	for _, e := range strings.Split(string(b), "\x00") {
		if e == kv {
			return true
		}
	}
	return false
}

// children lists the direct children of pid.
func children(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, f := range strings.Fields(string(b)) {
			var c int
			if _, err := fmt.Sscanf(f, "%d", &c); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// descendantNamed returns pid itself or a descendant of pid whose comm is
// name, or 0. A pane's pid is its agent's once the pane helper has exec'd it.
func descendantNamed(pid int, name string) int {
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == name {
		return pid
	}
	return descendantOnly(pid, name)
}

func descendantOnly(pid int, name string) int {
	for _, c := range children(pid) {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c))
		if strings.TrimSpace(string(comm)) == name {
			return c
		}
		if d := descendantOnly(c, name); d != 0 {
			return d
		}
	}
	return 0
}

// raceReports cuts the race detector's reports out of a log, whole.
func raceReports(log string) string {
	var b strings.Builder
	for {
		i := strings.Index(log, "WARNING: DATA RACE")
		if i < 0 {
			return b.String()
		}
		log = log[i:]
		end := strings.Index(log, "\n==================")
		if end < 0 {
			end = len(log)
		}
		b.WriteString(log[:end] + "\n")
		log = log[end:]
	}
}
