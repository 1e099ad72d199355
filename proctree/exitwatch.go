package proctree

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// ExitWatch tells, at once, when a watched process exits: one pidfd per
// process, all in one epoll set read by one goroutine. A pidfd becomes
// readable when its process exits (a zombie is exited), whatever its parent
// does: the tmux server that is the pane process's parent may notice its
// SIGCHLD late (tmux 3.3a with utempter can miss one), and this does not
// depend on it. It costs one fd per watched process and nothing per exit
// beyond the callback; nothing is polled.
//
// A watch is one-shot: it is released when its process exits (after the
// callback returns), by Release, or by Close.
type ExitWatch struct {
	epfd   int
	wakefd int // an eventfd: Close wakes the loop with it

	// max bounds the watches held, one fd each (watchCap): a daemon at its
	// open-files limit could accept no API connection, open no cgroup file
	// for a stop's proof, and answered nothing at all.
	max int

	mu     sync.Mutex
	byKey  map[string]*watch
	byID   map[uint64]*watch // by the id in the epoll event: never reused, unlike fd numbers
	nextID uint64
	closed bool

	loop sync.WaitGroup // the epoll goroutine
	cbs  sync.WaitGroup // callbacks running
}

// watch is one watched process.
type watch struct {
	key   string
	id    uint64
	fd    int // -1 when the process was gone (and reaped) at Watch
	pid   int
	start uint64
	fn    func(Exit)
}

// Exit is what a callback is told of the exit it was called for.
type Exit struct {
	// Key is the key the watch was made with.
	Key   string
	fd    int
	pid   int
	start uint64
}

// Reaped reports whether the exited process has been reaped by its parent
// (waited for: its pid is free), as opposed to an unreaped zombie. It is
// valid only while the callback runs: its pidfd is closed when it returns.
// tmux fills in a dead pane's exit status when it reaps, so a caller that
// wants the status waits for this first.
func (e Exit) Reaped() bool {
	if e.fd < 0 {
		return true // its pid was free (or another process's) at Watch
	}
	// Signal 0 through the pidfd checks existence only: it succeeds on a
	// zombie (the task still exists) and fails with ESRCH once it is reaped.
	return errors.Is(unix.PidfdSendSignal(e.fd, 0, nil, 0), unix.ESRCH)
}

// NewExitWatch starts a watcher. It fails where the kernel has no epoll or
// eventfd; pidfds themselves (Linux 5.3) are tried per Watch.
func NewExitWatch() (*ExitWatch, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("proctree: epoll: %w", err)
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("proctree: eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN} // id 0: the wake fd
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		unix.Close(wakefd)
		unix.Close(epfd)
		return nil, fmt.Errorf("proctree: epoll add: %w", err)
	}
	w := &ExitWatch{epfd: epfd, wakefd: wakefd, max: watchCap(), byKey: map[string]*watch{}, byID: map[uint64]*watch{}}
	w.loop.Add(1)
	go w.run()
	return w, nil
}

// ErrWatchClosed is returned by Watch after Close.
var ErrWatchClosed = errors.New("proctree: exit watch closed")

// ErrWatchFull is returned by Watch when the watches would take the
// process's file descriptors past watchCap: the process is not watched.
var ErrWatchFull = errors.New("proctree: exit watches at their cap (the open-files limit keeps a reserve for everything else)")

// watchCap is how many watches the open-files limit (RLIMIT_NOFILE, which
// Go raised to the hard limit at start) leaves room for: a quarter of it,
// at least 32 and at most 1,024, is kept for everything else — the API's
// connections, the fence's files, tmux's clients, the proof's cgroup reads.
func watchCap() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 1 << 30
	}
	limit := int(rl.Cur)
	return max(limit-min(max(32, limit/4), 1024), 0)
}

// Watch calls fn (on a goroutine of its own) when the process pid, of start
// time start (field 22 of /proc/PID/stat, as a Hold records it), exits. The
// pidfd is opened first and the start time checked after, so the watch is on
// that very process: a pidfd pins its process, and a pid number freed and
// reused meanwhile shows another start time. A process already gone — no
// such pid, another start time — is reported at once (fn runs as for an
// exit), and one that exited but is not yet reaped by the first epoll wait. A watch with the same key is replaced. It fails only when no
// pidfd can be had (ENOSYS before Linux 5.3, EMFILE, EPERM), and then fn is
// never called: the caller's other paths must cover that process.
func (w *ExitWatch) Watch(key string, pid int, start uint64, fn func(Exit)) error {
	if pid <= 0 || start == 0 {
		return fmt.Errorf("proctree: no process to watch (pid %d, start %d)", pid, start)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("proctree: pidfd of %d: %w", pid, err)
	}
	gone := err != nil
	if !gone {
		if st, serr := readStat(pid); serr != nil || st.start != start {
			// Reaped between the list and the open (the pidfd is another
			// process's, or of one gone since): its pid is free.
			unix.Close(fd)
			fd, gone = -1, true
		}
		// A zombie here is not taken for an exit: the main thread of a
		// process whose other thread is exec'ing (a Go helper exec'ing its
		// agent from any thread) shows as one for a moment. The pidfd tells:
		// epoll reports an exit that already happened at once, and only the
		// whole process's.
	} else {
		fd = -1
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		if fd >= 0 {
			unix.Close(fd)
		}
		return ErrWatchClosed
	}
	w.releaseLocked(key)
	if !gone && len(w.byKey) >= w.max {
		unix.Close(fd)
		return ErrWatchFull
	}
	w.nextID++
	wt := &watch{key: key, id: w.nextID, fd: fd, pid: pid, start: start, fn: fn}
	if gone {
		w.fireLocked(wt)
		return nil
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(uint32(wt.id)), Pad: int32(uint32(wt.id >> 32))}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		return fmt.Errorf("proctree: epoll add pidfd: %w", err)
	}
	w.byKey[key], w.byID[wt.id] = wt, wt
	return nil
}

// Release drops key's watch, if any, without calling its callback.
func (w *ExitWatch) Release(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.releaseLocked(key)
}

// Len returns how many processes are watched (one fd each).
func (w *ExitWatch) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byKey)
}

// Close releases every watch, stops the goroutine and waits for callbacks
// that are running. Callbacks not yet started are not started.
func (w *ExitWatch) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	for k := range w.byKey {
		w.releaseLocked(k)
	}
	w.mu.Unlock()
	var one [8]byte
	one[0] = 1 // eventfd counters are host-endian; any non-zero value wakes
	_, _ = unix.Write(w.wakefd, one[:])
	w.loop.Wait()
	w.cbs.Wait()
	unix.Close(w.wakefd)
	unix.Close(w.epfd)
}

// releaseLocked removes key's watch and closes its pidfd. w.mu is held.
func (w *ExitWatch) releaseLocked(key string) {
	wt, ok := w.byKey[key]
	if !ok {
		return
	}
	delete(w.byKey, key)
	delete(w.byID, wt.id)
	_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, wt.fd, nil)
	unix.Close(wt.fd)
}

// fireLocked runs wt's callback on a goroutine of its own, then closes its
// pidfd (already out of the maps and the epoll set). w.mu is held.
func (w *ExitWatch) fireLocked(wt *watch) {
	w.cbs.Add(1)
	go func() {
		defer w.cbs.Done()
		wt.fn(Exit{Key: wt.key, fd: wt.fd, pid: wt.pid, start: wt.start})
		if wt.fd >= 0 {
			unix.Close(wt.fd)
		}
	}()
}

// run reads the epoll set until Close: every readable pidfd is an exit.
func (w *ExitWatch) run() {
	defer w.loop.Done()
	evs := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(w.epfd, evs, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return // EBADF and the like: nothing more can be read
		}
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return
		}
		for _, ev := range evs[:n] {
			wt, ok := w.byID[uint64(uint32(ev.Fd))|uint64(uint32(ev.Pad))<<32]
			if !ok {
				continue // the wake fd (id 0), or released meanwhile
			}
			delete(w.byID, wt.id)
			delete(w.byKey, wt.key)
			_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, wt.fd, nil)
			w.fireLocked(wt)
		}
		w.mu.Unlock()
	}
}
