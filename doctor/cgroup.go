package doctor

import (
	"context"

	"github.com/skc-supervisor/skc-supervisor/proctree"
)

// checkCgroups says what will hold each generation's processes on this host
// (docs/architecture.md, "Stopping"): a cgroup v2 per generation, or only the
// pane's session, from which a descendant that calls setsid escapes. Both work;
// the message says which guarantee applies. It only reads.
func checkCgroups(_ context.Context, _ Config) []Result {
	dir, err := proctree.ProbeCgroups()
	if err != nil {
		return []Result{{Check: "process_hold", Status: OK,
			Message: "generations are held by their pane's session only (" + err.Error() + "); " +
				"a descendant that leaves its session (setsid) can outlive its generation — " +
				"run as root with cgroup v2, or as a systemd user service with Delegate=yes, to hold the whole tree"}}
	}
	return []Result{{Check: "process_hold", Status: OK,
		Message: "generations are held by a cgroup v2 each, under " + dir}}
}
