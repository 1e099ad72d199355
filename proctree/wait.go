package proctree

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// rewatch bounds one wait between two probes. The proof is always a fresh
// probe; the wait in between is woken by the events that can change it (a
// member's pidfd becoming readable when it exits, cgroup.events modified when
// the cgroup empties), and rewatch only catches what those do not cover: a
// member forked after the probe, whose pidfd we do not hold yet.
const rewatch = 250 * time.Millisecond

// WaitGone probes h until it is Gone, the deadline passes or ctx ends, and
// returns the last probe. Unknown is returned as soon as it is found only when
// it persists to the deadline: a transient read failure is probed again.
func WaitGone(ctx context.Context, h Hold, deadline time.Time) Result {
	for {
		r := Probe(h)
		if r.State == Gone {
			return r
		}
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			return r
		}
		waitChange(h, r.PIDs, min(left, rewatch))
	}
}

// waitChange blocks until one of pids exits, the cgroup's events file changes,
// or d passes (WaitGone looks at ctx between waits).
func waitChange(h Hold, pids []int, d time.Duration) {
	var fds []unix.PollFd
	defer func() {
		for _, f := range fds {
			unix.Close(int(f.Fd))
		}
	}()
	for _, p := range pids {
		if fd, err := unix.PidfdOpen(p, 0); err == nil {
			fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		}
	}
	if h.Cgroup != "" {
		if fd, err := watchEvents(h.Cgroup); err == nil {
			fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		}
	}
	ms := int(d / time.Millisecond)
	if ms < 1 {
		ms = 1
	}
	for {
		_, err := unix.Poll(fds, ms)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// watchEvents returns an inotify fd watching dir/cgroup.events for
// modification (the kernel notifies it when "populated" changes).
func watchEvents(dir string) (int, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return -1, err
	}
	if _, err := unix.InotifyAddWatch(fd, filepath.Join(dir, "cgroup.events"), unix.IN_MODIFY); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
