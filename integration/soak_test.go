package integration

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// procFigures reads a process's resident memory (kB), open fds and threads.
func procFigures(pid int) (rssKB, fds, threads int) {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			fmt.Sscanf(strings.TrimSpace(v), "%d", &rssKB)
		}
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			fmt.Sscanf(strings.TrimSpace(v), "%d", &threads)
		}
	}
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return rssKB, len(ents), threads
}

// TestSoakCreateKill (SKC_SOAK=1): 1,000 creates and kills in a loop. Open fds
// must come back to where they started; memory and threads are reported as
// figures for BENCHMARKS.md, not asserted against a time or size budget.
func TestSoakCreateKill(t *testing.T) {
	needSoak(t)
	d := StartDaemon(t, DaemonOpts{})
	warm := d.MustCreate(t, NewSpec(t, "soak-warm"), "published")
	d.CLI(t, "kill", warm.Name)
	rss0, fds0, thr0 := procFigures(d.PID())
	for i := range 1000 {
		s := d.MustCreate(t, NewSpec(t, fmt.Sprintf("soak-%d", i)), "published")
		if r := d.CLI(t, "kill", "--json", s.Name); r.Code != 0 {
			t.Fatalf("round %d: kill\n%s", i, r)
		}
		if (i+1)%250 == 0 {
			rss, fds, thr := procFigures(d.PID())
			t.Logf("after %4d create+kill: rss %d kB, fds %d, threads %d", i+1, rss, fds, thr)
		}
	}
	rss1, fds1, thr1 := procFigures(d.PID())
	t.Logf("daemon after 1000 create+kill: rss %d→%d kB, fds %d→%d, threads %d→%d", rss0, rss1, fds0, fds1, thr0, thr1)
	if fds1 > fds0+4 {
		t.Errorf("open fds grew from %d to %d over 1000 create+kill", fds0, fds1)
	}
	if n := len(d.AgentSessions(t)); n != 0 {
		t.Errorf("%d agent sessions left", n)
	}
	checkVerdictStream(t, d.Verdicts(t))
}
