package proctree

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// statusCase is what one watched child's callback saw.
type statusCase struct {
	before, after ExitStatus
	okBefore      bool // Status while the child was an unreaped zombie
	okAfter       bool // Status once its parent (this test) had reaped it
}

// watchStatus watches c (started, with its start time) and returns what
// Status said in the callback before and after the test reaped c.
func watchStatus(t *testing.T, w *ExitWatch, c *exec.Cmd, start uint64, end func()) statusCase {
	t.Helper()
	seen := make(chan statusCase, 1)
	checked, reaped := make(chan struct{}), make(chan struct{})
	err := w.Watch("k", c.Process.Pid, start, func(e Exit) {
		var sc statusCase
		sc.before, sc.okBefore = e.Status()
		close(checked) // only now may the test reap it
		<-reaped
		sc.after, sc.okAfter = e.Status()
		seen <- sc
	})
	if err != nil {
		t.Skipf("no pidfd here: %v", err)
	}
	end()
	<-checked
	_ = c.Wait()
	close(reaped)
	return <-seen
}

// TestExitStatus: the exit of a watched process is read from the process
// itself while it is an unreaped zombie — an exit status, or the signal that
// killed it — and not at all once its parent has reaped it (its pid may then
// be another process's).
func TestExitStatus(t *testing.T) {
	defer goleak.VerifyNone(t)
	if _, err := os.ReadFile("/proc/self/io"); err != nil {
		t.Skipf("no /proc/PID/io here (no I/O accounting): %v", err)
	}
	w := newWatch(t)
	defer w.Close()
	exe, _ := os.Executable()

	c := exec.Command(exe, "exiter", "7")
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	st, err := readStat(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	got := watchStatus(t, w, c, st.start, func() { _ = in.Close() })
	if !got.okBefore || got.before != (ExitStatus{Code: 7}) {
		t.Errorf("exit 7: Status = %+v, %v; want code 7", got.before, got.okBefore)
	}
	if got.okAfter {
		t.Errorf("exit 7: Status after the reap = %+v, want none", got.after)
	}

	s, start := startSleeper(t)
	got = watchStatus(t, w, s, start, func() { _ = s.Process.Signal(syscall.SIGTERM) })
	if !got.okBefore || got.before != (ExitStatus{Code: -1, Signal: int(syscall.SIGTERM)}) {
		t.Errorf("SIGTERM: Status = %+v, %v; want signal %d", got.before, got.okBefore, syscall.SIGTERM)
	}
	if got.okAfter {
		t.Errorf("SIGTERM: Status after the reap = %+v, want none", got.after)
	}
}

// TestExitStatusOfAnotherProcess: a watch whose start time is not the
// process's (the pid was reused) reads no status from it.
func TestExitStatusOfAnotherProcess(t *testing.T) {
	e := Exit{Key: "k", fd: -1, pid: os.Getpid(), start: 1}
	if st, ok := e.Status(); ok {
		t.Fatalf("Status without a pidfd = %+v, want none", st)
	}
}

// TestWatchAcrossExec: a process whose non-main thread execs (as the pane
// helper, a Go program, execs its agent) has a zombie main thread for a
// moment, with an exit code of its own (on a loaded machine, for
// milliseconds: until the exec'ing thread runs again). Children doing so are
// watched over and over through their exec (each Watch replaces the last):
// no watch fires and no status is read until the exec'd program is killed,
// and then its own signal is.
func TestWatchAcrossExec(t *testing.T) {
	if _, err := os.ReadFile("/proc/self/io"); err != nil {
		t.Skipf("no /proc/PID/io here (no I/O accounting): %v", err)
	}
	w := newWatch(t)
	defer w.Close()
	type fired struct {
		st ExitStatus
		ok bool
	}
	for i := 0; i < 20; i++ {
		c, start := startChild(t, "threadexec")
		ch := make(chan fired, 1)
		watch := func() {
			if err := w.Watch("k", c.Process.Pid, start, func(e Exit) {
				s, ok := e.Status()
				ch <- fired{s, ok}
			}); err != nil {
				t.Skipf("no pidfd here: %v", err)
			}
		}
		for !execd(c.Process.Pid) {
			watch()
			select {
			case f := <-ch:
				t.Fatalf("child %d: watch fired (status %+v, %v) while it exec'd", i, f.st, f.ok)
			default:
			}
		}
		watch()
		_ = c.Process.Signal(syscall.SIGTERM)
		f := <-ch
		if !f.ok || f.st != (ExitStatus{Code: -1, Signal: int(syscall.SIGTERM)}) {
			t.Fatalf("child %d: status %+v, %v; want SIGTERM", i, f.st, f.ok)
		}
		_ = c.Wait()
	}
}

// execd reports whether pid has exec'd the sleeper and shows as running
// (its exec'ing thread took the main thread's place).
func execd(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !strings.Contains(string(b), "sleeper") {
		return false
	}
	st, err := readStat(pid)
	return err == nil && !st.zombie()
}

// TestLifeRunning: a process killed but not yet reaped by its parent (as a
// standby tmux has not reaped) is not running, though kill(pid, 0) still
// succeeds on it; nor is a live process whose start time is not the one
// recorded (its pid was reused).
func TestLifeRunning(t *testing.T) {
	c, start := startSleeper(t)
	pid := c.Process.Pid
	if !LifeRunning(pid, start) || !LifeRunning(pid, 0) {
		t.Fatalf("a running sleeper is not running")
	}
	if LifeRunning(pid, start+1) {
		t.Fatalf("another start time (a reused pid) counts as running")
	}
	if err := c.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for { // until it is a zombie: we do not reap it yet
		if st, err := readStat(pid); err == nil && st.zombie() {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if syscall.Kill(pid, 0) != nil {
		t.Fatalf("kill(pid, 0) fails on an unreaped zombie: the case this guards is not shown")
	}
	if LifeRunning(pid, start) {
		t.Fatalf("an unreaped zombie counts as running")
	}
	_ = c.Wait()
	if LifeRunning(pid, start) || LifeRunning(-1, 0) || LifeRunning(0, 0) {
		t.Fatalf("a reaped process (or no pid) counts as running")
	}
}
