package proctree

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ExitStatus is how an exited process ended, as its parent's wait would
// tell it: an exit status, or the signal that killed it.
type ExitStatus struct {
	// Code is the exit status (0–255) of a process that exited; -1 when a
	// signal killed it.
	Code int
	// Signal is the number of the signal that killed it; 0 when it exited.
	Signal int
}

// Status reads the exit of the process this Exit is for from the process
// itself, while it is an exited, unreaped zombie: the wait status the kernel
// keeps for its parent (/proc/PID/stat's exit_code). The pane's process is a
// child of the tmux server, which alone can wait for it and which, at
// thousands of sessions, reaps it tens of milliseconds after its exit (its
// one thread walks every window per event); this is there the moment the
// pidfd tells the exit. ok is false when it cannot be told for certain: the
// watch had no pidfd, the parent reaped it first, its start time is not the
// watched one's (the pid is another process's), or the reader may not trace
// it (the kernel then shows exit_code as 0 rather than refusing, so the
// permission is checked on /proc/PID/io, which refuses instead: EACCES under
// the same ptrace read check, and absent on kernels without I/O accounting,
// where nothing is read either).
//
// One shape it cannot tell apart: a process whose main thread ended by
// itself (pthread_exit) before another thread ended the process keeps the
// main thread's code here, where its parent's wait gets the last one.
func (e Exit) Status() (ExitStatus, bool) {
	if e.fd < 0 || e.pid <= 0 || !groupExited(e.fd) || e.Reaped() {
		return ExitStatus{}, false
	}
	if _, err := os.ReadFile("/proc/" + strconv.Itoa(e.pid) + "/io"); err != nil {
		return ExitStatus{}, false
	}
	st, err := readStat(e.pid)
	if err != nil || st.start != e.start || !st.zombie() || st.exitCode < 0 {
		return ExitStatus{}, false
	}
	ws := unix.WaitStatus(uint32(st.exitCode))
	switch {
	case ws.Exited():
		return ExitStatus{Code: ws.ExitStatus()}, true
	case ws.Signaled():
		return ExitStatus{Code: -1, Signal: int(ws.Signal())}, true
	}
	return ExitStatus{}, false
}

// groupExited reports whether the pidfd's process has exited as a whole: its
// pidfd polls readable. A zombie main thread alone is not that — the main
// thread of a process whose other thread execs shows as a zombie for a
// moment, with its own exit code — and neither is a process whose threads
// still run after its main thread ended.
func groupExited(fd int) bool {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, 0)
	return err == nil && n == 1 && p[0].Revents&unix.POLLIN != 0
}

// LifeRunning reports whether pid still names the process life that started at
// start (field 22 of /proc/PID/stat) and has not exited: not gone, not a
// zombie its parent has yet to reap, not a reused number. kill(pid, 0)
// answers yes to the first and the last of those.
func LifeRunning(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	st, err := readStat(pid)
	return err == nil && !st.zombie() && (start == 0 || st.start == start)
}

// Running reports whether pid names a process that has not exited (exists
// and is not a zombie). It tells whether a tmux server is still there when one
// of its panes' processes exits: a server that died closed its ptys, and the
// hangup that followed is what ended the pane's process.
func Running(pid int) bool {
	if pid <= 0 {
		return false
	}
	st, err := readStat(pid)
	return err == nil && !st.zombie()
}
