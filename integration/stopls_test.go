package integration

import (
	"strings"
	"testing"
)

// TestStopListsGoneSession: a session killed by hand whose agent ignores the
// hangup leaves its generation stopping without a session. `ls --json` lists
// it with state stopping (from its published record, as `show` does), the
// human `ls` says so, and neither lists it once its processes are gone and its
// ended verdict is written.
func TestStopListsGoneSession(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	_, s, agent := ignoringGeneration(t, d, "lsgone", "5m")
	if _, err := d.Tmux("kill-session", "-t", s.ID); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, waitDeadline, "ls --json to list the stopping generation", func() error {
		for _, ls := range d.List(t).Sessions {
			if ls.Name == s.Name && ls.State == "stopping" && ls.ID == s.ID && ls.Managed &&
				ls.Generation == s.Generation && ls.PaneDead {
				return nil
			}
		}
		return errorf("not listed stopping")
	})
	if _, err := d.Tmux("has-session", "-t", s.ID); err == nil {
		t.Fatalf("session %s still in tmux: the test needs it gone", s.ID)
	}
	r := d.CLI(t, "ls")
	if r.Code != 0 || !strings.Contains(r.Stdout, "STATE") {
		t.Fatalf("ls: %s", r)
	}
	var line string
	for _, l := range strings.Split(r.Stdout, "\n") {
		if strings.HasPrefix(l, s.Name+" ") {
			line = l
		}
	}
	if f := strings.Fields(line); len(f) < 4 || f[3] != "stopping" {
		t.Fatalf("ls line for %s: %q\n%s", s.Name, line, r)
	}
	// End it: the agent and its helper are this test's processes.
	agent.kill()
	if s.PanePID != agent.pid {
		markProc{pid: s.PanePID, mark: agent.mark}.kill()
	}
	d.WaitVerdict(t, "ended verdict of "+s.Name, endedFor(s.Name))
	WaitFor(t, waitDeadline, "ls to drop the ended generation", func() error {
		for _, ls := range d.List(t).Sessions {
			if ls.Name == s.Name {
				return errorf("still listed: %+v", ls)
			}
		}
		return nil
	})
}
