package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skc-supervisor/skc-supervisor/fence"
)

// warmResID is a reservation id no reservation has (the fence hands out
// random ones): warmFence's reads find nothing.
const warmResID = "00000000000000000000000000000000"

// warmFence makes a standby's two reads after its hand-off (its spec, its
// publication) once while it waits, for nothing: a fresh fence connection
// parses the whole schema at its first statement, and that was ~1 ms of a
// woken standby's CPU, in the middle of a burst of creates. Errors do not
// matter here; the real reads report their own. Then it gives the heap its
// start-up left back to the OS: private memory of a waiting standby 3.1 ->
// 2.2-2.7 MB, and fewer pages for its exec to tear down.
func warmFence(st fence.Fence) {
	ctx, cancel := context.WithTimeout(context.Background(), helperReadyWait)
	defer cancel()
	_, _, _ = st.HelperSpec(ctx, warmResID)
	_, _, _ = st.PublishedByReservation(ctx, warmResID)
	debug.FreeOSMemory()
}

// awaitHandoff is a standby's wait (pool.go): it polls for its hand-off file,
// at once when the daemon wakes it and every helperPoll otherwise, and fills
// a with the reservation it was handed. A standby costs nothing but this wait
// and its open fence (RunHelper opens it first: descriptors, no lock held
// between transactions, closed before the agent is exec'd). It
// ends only with a hand-off, or when its session is killed (the hangup's
// default action). ok false: a file not meant for this process (its pane pid
// is another's), which the standby refuses to run.
func awaitHandoff(a *helperArgs) (code int, ok bool) {
	path := filepath.Join(a.home, "pool", a.standby)
	t := time.NewTimer(helperPoll)
	defer t.Stop()
	typed := false
	for {
		h, err := readHandoff(path)
		if err == nil {
			_ = os.Remove(path)
			if h.panePID != os.Getpid() {
				fmt.Fprintln(os.Stderr, "skc-supervisor helper: hand-off names another pane; not starting an agent")
				return helperGaveUp, false
			}
			a.resID, a.generation, a.cgroup, a.ownPane = h.resID, h.generation, h.cgroup, true
			if typed {
				clearEcho()
			}
			return 0, true
		}
		// Not handed out yet: what a person typed into this blank pane is
		// nobody's, and must not be the claiming agent's first input. Only
		// here, never once handed out: a frontend's input sent right after
		// publish is the agent's (the hand-off is written before publish, and
		// is looked for before each flush).
		typed = flushTyped() || typed
		t.Reset(helperPoll)
		select {
		case <-a.wake:
		case <-t.C:
		}
	}
}

// flushTyped discards the terminal input a standby holds (typed into it by a
// person who attached to it): no reader of it runs, so it would be what the
// agent that claims the pane reads first — a shell agent ran it as a command.
// It reports whether whole lines were waiting.
func flushTyped() bool {
	if _, err := unix.IoctlGetTermios(0, unix.TCGETS); err != nil {
		return false
	}
	n, _ := unix.IoctlGetInt(0, unix.TIOCINQ)
	_ = unix.IoctlSetInt(0, unix.TCFLSH, unix.TCIFLUSH)
	return n > 0
}

// clearEcho clears a handed-out standby's screen and history, which show the
// terminal's echo of what was typed into it: the claiming identity's screen
// and output tail start as its own. Its input is not flushed here: the
// standby may read its hand-off after publish, and what a frontend sent
// since is the agent's.
func clearEcho() {
	if _, err := unix.IoctlGetTermios(1, unix.TCGETS); err == nil {
		_, _ = os.Stdout.WriteString("\x1b[H\x1b[2J\x1b[3J")
	}
}
