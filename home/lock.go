package home

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Lock is the single-instance lock of one SKC_HOME: an flock on
// supervisor.lock, held for the life of the daemon. The kernel drops it when
// the process dies, however it dies, so a stale lock file never blocks a
// restart; the pid written into it only names the holder for a human.
type Lock struct {
	f *os.File
}

// holderWait bounds how long a refused caller waits for the holder to have
// written its pid: the holder takes the lock first and writes the pid second.
const holderWait = 2 * time.Second

// Acquire takes the lock at path without blocking. When another process holds
// it, the error has code busy (exit 75) and details.holder_pid names that
// process (0 when it did not write its pid in time).
func Acquire(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, verdict.Errorf(verdict.CodeInternal, map[string]any{"path": path},
			"cannot open the instance lock %s: %w", path, err)
	}
	if err := flockNB(f); err != nil {
		defer f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, verdict.Errorf(verdict.CodeInternal, map[string]any{"path": path},
				"cannot lock %s: %w", path, err)
		}
		pid := readHolder(f)
		return nil, verdict.Errorf(verdict.CodeBusy, map[string]any{"holder_pid": pid, "path": path},
			"another skc-supervisor (pid %d) is serving this SKC_HOME; it holds %s", pid, path)
	}
	if err := writePID(f); err != nil {
		f.Close()
		return nil, verdict.Errorf(verdict.CodeInternal, map[string]any{"path": path},
			"cannot record our pid in %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

func flockNB(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

func writePID(f *os.File) error {
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}

// readHolder reads the holder's pid, waiting briefly for a holder that has the
// lock but has not written its pid yet.
func readHolder(f *os.File) int {
	deadline := time.Now().Add(holderWait)
	for {
		b, err := io.ReadAll(io.NewSectionReader(f, 0, 64))
		if err == nil {
			if pid, err := strconv.Atoi(string(bytes.TrimSpace(b))); err == nil && pid > 0 {
				return pid
			}
		}
		if time.Now().After(deadline) {
			return 0
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PID returns the pid recorded in the lock file (ours while we hold it).
func (l *Lock) PID() int { return readHolder(l.f) }

// Release drops the lock. The file stays: removing it would race with a new
// holder that has already opened it.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	if err != nil {
		return fmt.Errorf("release instance lock: %w", err)
	}
	return nil
}

// Holder reports whether a process holds the instance lock at path, and its
// pid, without taking the lock — a probe that flocked it, even shared and for
// an instant, could make a daemon starting in that instant refuse to start.
// It reads the kernel's table of locks (/proc/locks) for an flock on the
// file's inode; false when the file or the table cannot be read.
func Holder(path string) (pid int, held bool) {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil {
		return 0, false
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return 0, false
	}
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)), st.Ino)
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := strings.Fields(string(line))
		// "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF"; a blocked
		// waiter's line has "->" after the number.
		if len(f) >= 6 && f[1] == "FLOCK" && f[5] == want {
			pid, _ = strconv.Atoi(f[4])
			return pid, true
		}
	}
	return 0, false
}
