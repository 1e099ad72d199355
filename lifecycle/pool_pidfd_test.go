package lifecycle

import (
	"os/exec"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skc-supervisor/skc-supervisor/proctree"
)

// TestStandbyRunningByPidfd: a standby's liveness is asked of the pidfd
// opened at its spawn, and a standby that exited is not running while it is
// still a zombie its parent (tmux) has not reaped — the case kill(pid, 0)
// gets wrong, which would publish a generation whose agent never starts.
func TestStandbyRunningByPidfd(t *testing.T) {
	c := exec.Command("sleep", "1000")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pid := c.Process.Pid
	start, err := proctree.ChildStartTime(pid, syscall.Getpid())
	if err != nil || start == 0 {
		t.Fatalf("start time of %d: %d %v", pid, start, err)
	}
	sb := standby{panePID: pid, paneStart: start, pidfd: openPidfd(pid, start)}
	if sb.pidfd == nil {
		t.Skip("no pidfds on this kernel")
	}
	defer sb.closePidfd()
	if !sb.running() {
		t.Fatal("a live standby is not running")
	}
	if openPidfd(pid, start+1) != nil {
		t.Fatal("a pidfd was kept for another start time (a reused pid)")
	}
	_ = c.Process.Signal(syscall.SIGKILL)
	// Wait for the exit without reaping it: the pidfd turns readable.
	fds := []unix.PollFd{{Fd: int32(sb.pidfd.Fd()), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != syscall.EINTR {
			break
		}
	}
	if sb.running() {
		t.Fatal("an exited (zombie) standby is running")
	}
	_ = c.Wait()
	if sb.running() {
		t.Fatal("a reaped standby is running")
	}
}
