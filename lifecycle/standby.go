package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

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
	for {
		h, err := readHandoff(path)
		if err == nil {
			_ = os.Remove(path)
			if h.panePID != os.Getpid() {
				fmt.Fprintln(os.Stderr, "skc-supervisor helper: hand-off names another pane; not starting an agent")
				return helperGaveUp, false
			}
			a.resID, a.generation, a.cgroup, a.ownPane = h.resID, h.generation, h.cgroup, true
			return 0, true
		}
		t.Reset(helperPoll)
		select {
		case <-a.wake:
		case <-t.C:
		}
	}
}
