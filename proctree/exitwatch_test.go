package proctree

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// startSleeper starts the test binary as a child that sleeps until killed
// and returns it with its start time.
func startSleeper(t *testing.T) (*exec.Cmd, uint64) {
	t.Helper()
	return startChild(t, "sleeper")
}

// startChild starts the test binary in mode (TestMain) and returns it with
// its start time.
func startChild(t *testing.T, mode string) (*exec.Cmd, uint64) {
	t.Helper()
	exe, _ := os.Executable()
	c := exec.Command(exe, mode)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	st, err := readStat(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return c, st.start
}

func newWatch(t *testing.T) *ExitWatch {
	t.Helper()
	w, err := NewExitWatch()
	if err != nil {
		t.Skipf("no exit watch here: %v", err)
	}
	return w
}

// recv waits for one exit, failing only after a generous deadline.
func recv(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case k := <-ch:
		return k
	case <-time.After(30 * time.Second):
		t.Fatal("no exit reported")
	}
	return ""
}

// TestExitWatchSIGKILL: a watched child killed by SIGKILL is reported while
// it is an unreaped zombie (Reaped false), then reaped (Reaped true once its
// parent waits), and the watch's fd is released after the callback.
func TestExitWatchSIGKILL(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	w := newWatch(t)
	defer w.Close()
	c, start := startSleeper(t)
	base := openFDs(t) // after the start: os.Process holds a pidfd of its own
	fired := make(chan string, 1)
	reapedBefore, reapedAfter := make(chan bool, 1), make(chan bool, 1)
	reap := make(chan struct{})
	err := w.Watch("a", c.Process.Pid, start, func(e Exit) {
		reapedBefore <- e.Reaped()
		fired <- e.Key
		<-reap
		for !e.Reaped() { // Wait below has returned: the pid is free
			time.Sleep(time.Millisecond)
		}
		reapedAfter <- true
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := w.Len(); n != 1 {
		t.Fatalf("Len = %d, want 1", n)
	}
	if got := openFDs(t) - base; got != 1 {
		t.Fatalf("one watch holds %d fds, want 1", got)
	}
	if err := unix.Kill(c.Process.Pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if k := recv(t, fired); k != "a" {
		t.Fatalf("key %q", k)
	}
	if <-reapedBefore {
		t.Fatal("Reaped true before the parent waited")
	}
	_ = c.Wait()       // also closes os.Process's own pidfd, if it has one
	held := openFDs(t) // the epoll fd, the eventfd, and the exit's pidfd (its callback still runs)
	close(reap)
	<-reapedAfter
	if n := w.Len(); n != 0 {
		t.Fatalf("Len after the exit = %d", n)
	}
	w.Close() // waits for the callback: its pidfd is closed by then
	if got := held - openFDs(t); got != 3 {
		t.Fatalf("Close gave back %d fds, want 3 (epoll, eventfd, the exit's pidfd)", got)
	}
}

// TestExitWatchRelease: released and replaced watches never fire, and every
// fd is given back (one per watch while held, none after).
func TestExitWatchRelease(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const n = 5
	var kids []*exec.Cmd
	var starts []uint64
	for i := 0; i < n; i++ {
		c, start := startSleeper(t)
		kids, starts = append(kids, c), append(starts, start)
	}
	w := newWatch(t)
	withWatch := openFDs(t)
	fired := make(chan string, 8)
	fn := func(e Exit) { fired <- e.Key }
	for i, c := range kids {
		if err := w.Watch(string(rune('a'+i)), c.Process.Pid, starts[i], fn); err != nil {
			t.Fatal(err)
		}
	}
	if got := openFDs(t) - withWatch; got != n {
		t.Fatalf("%d watches hold %d fds, want %d", n, got, n)
	}
	// Replacing a key keeps one fd for it.
	if err := w.Watch("a", kids[1].Process.Pid, starts[1], fn); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		w.Release(string(rune('a' + i)))
	}
	if got := openFDs(t) - withWatch; got != 0 || w.Len() != 0 {
		t.Fatalf("after release: %d fds, Len %d", got, w.Len())
	}
	for _, c := range kids {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	base := openFDs(t) // the watch's epoll fd and eventfd, no pidfd
	// A watch made after the kills proves the loop is alive and has read
	// every event there was: the released ones must not have fired.
	c, start := startSleeper(t)
	if err := w.Watch("z", c.Process.Pid, start, fn); err != nil {
		t.Fatal(err)
	}
	_ = c.Process.Kill()
	if k := recv(t, fired); k != "z" {
		t.Fatalf("a released watch fired: %q", k)
	}
	_ = c.Wait()
	w.Close()
	if got := base - openFDs(t); got != 2 {
		t.Fatalf("Close gave back %d fds, want 2 (epoll, eventfd): a pidfd is left", got)
	}
	if err := w.Watch("y", os.Getpid(), mustStart(t, os.Getpid()), fn); err != ErrWatchClosed {
		t.Fatalf("Watch after Close: %v", err)
	}
}

// TestExitWatchGoneAtWatch: a process of another start time (the pid reused)
// or no process at all is reported at once, as reaped.
func TestExitWatchGoneAtWatch(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	w := newWatch(t)
	defer w.Close()
	reaped := make(chan bool, 2)
	fn := func(e Exit) { reaped <- e.Reaped() }
	if err := w.Watch("other", os.Getpid(), mustStart(t, os.Getpid())+1, fn); err != nil {
		t.Fatal(err)
	}
	if !<-reaped {
		t.Fatal("another incarnation not reported as reaped")
	}
	c, start := startSleeper(t)
	pid := c.Process.Pid
	_ = c.Process.Kill()
	_ = c.Wait()
	if err := w.Watch("gone", pid, start, fn); err != nil {
		t.Fatal(err)
	}
	if !<-reaped {
		t.Fatal("a reaped process not reported as reaped")
	}
	if w.Len() != 0 {
		t.Fatalf("Len = %d", w.Len())
	}
}

func mustStart(t *testing.T, pid int) uint64 {
	t.Helper()
	st, err := readStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	return st.start
}

// TestExitWatchCap: watches stop at the cap the open-files limit leaves
// (ErrWatchFull, no fd kept), a replaced key does not count twice, and a
// released watch makes room again.
func TestExitWatchCap(t *testing.T) {
	if got := watchCap(); got <= 0 {
		t.Fatalf("watchCap %d here", got)
	}
	a, startA := startSleeper(t)
	b, startB := startSleeper(t)
	w := newWatch(t)
	defer w.Close()
	w.max = 1
	fn := func(Exit) {}
	if err := w.Watch("a", a.Process.Pid, startA, fn); err != nil {
		t.Fatal(err)
	}
	before := openFDs(t)
	if err := w.Watch("b", b.Process.Pid, startB, fn); err != ErrWatchFull {
		t.Fatalf("a watch past the cap: %v", err)
	}
	if openFDs(t) != before {
		t.Fatal("a refused watch kept its pidfd")
	}
	if err := w.Watch("a", b.Process.Pid, startB, fn); err != nil {
		t.Fatalf("replacing a key at the cap: %v", err)
	}
	w.Release("a")
	if err := w.Watch("b", b.Process.Pid, startB, fn); err != nil {
		t.Fatalf("after a release: %v", err)
	}
}
