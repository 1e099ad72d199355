package lifecycle

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

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
