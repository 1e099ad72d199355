package integration

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// needSoak skips t unless SKC_SOAK is set (make soak).
func needSoak(t *testing.T) {
	t.Helper()
	if os.Getenv("SKC_SOAK") == "" {
		t.Skip("SKC_SOAK=1 runs the soak tests (make soak)")
	}
}

// TestTmuxServerDeath: the supervised tmux server dies under live sessions — by
// SIGKILL, then by a human's kill-server. The daemon stays up, writes exactly one
// ended verdict per published session (server_exited / owner_lost), and the next
// create starts a new server and succeeds.
func TestTmuxServerDeath(t *testing.T) {
	t.Parallel()
	testTmuxServerDeath(t, 3)
}

// TestSoakTmuxServerDeath is TestTmuxServerDeath under 50 live sessions.
func TestSoakTmuxServerDeath(t *testing.T) {
	needSoak(t)
	testTmuxServerDeath(t, 50)
}

func testTmuxServerDeath(t *testing.T, n int) {
	d := StartDaemon(t, DaemonOpts{})
	for round, how := range []string{"SIGKILL", "kill-server"} {
		var sess []Session
		for i := range n {
			sess = append(sess, d.MustCreate(t, NewSpec(t, fmt.Sprintf("death-%d-%d", round, i)), "published"))
		}
		old := d.List(t).Census.ServerPID
		if how == "SIGKILL" {
			if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		} else if _, err := d.Tmux("kill-server"); err != nil {
			t.Fatal(err)
		}
		for _, s := range sess {
			v := d.WaitVerdict(t, how+": ended verdict of "+s.Name, endedFor(s.Name))
			if v.Event.Reason != "server_exited" && v.SKC.ExitKind != "owner_lost" {
				t.Errorf("%s: ended verdict %s: want reason server_exited or exit_kind owner_lost", how, v)
			}
		}
		if d.Exited() {
			t.Fatalf("%s: the daemon died with the tmux server: %v", how, d.state)
		}
		next := d.MustCreate(t, NewSpec(t, fmt.Sprintf("after-death-%d", round)), "published")
		if pid := d.List(t).Census.ServerPID; pid == old || pid == 0 {
			t.Errorf("%s: server pid after re-create %d, want a new server (old %d)", how, pid, old)
		}
		for _, s := range sess {
			WaitFor(t, waitDeadline, "old pane process to end", func() error {
				if alive(s.PanePID) {
					return errorf("pid %d alive", s.PanePID)
				}
				return nil
			})
		}
		vs := d.Verdicts(t)
		for _, s := range sess {
			if c := countVerdicts(vs, endedFor(s.Name)); c != 1 {
				t.Errorf("%s: %d ended verdicts for %s, want exactly 1", how, c, s.Name)
			}
		}
		d.CLI(t, "kill", next.Name)
	}
	checkOneControlClient(t, d.Home)
}

// TestControlClientChurn: the control client is detached, its session killed and
// its process killed, repeatedly; the daemon reconnects every time and exactly
// one control client exists afterwards.
func TestControlClientChurn(t *testing.T) {
	t.Parallel()
	testControlClientChurn(t, 2)
}

// TestSoakControlClientChurn is TestControlClientChurn 50 times in a row.
func TestSoakControlClientChurn(t *testing.T) {
	needSoak(t)
	testControlClientChurn(t, 50)
}

func testControlClientChurn(t *testing.T, rounds int) {
	d := StartDaemon(t, DaemonOpts{})
	s := d.MustCreate(t, NewSpec(t, "churn"), "published")
	for i := range rounds {
		for _, how := range []string{"detach", "kill-session", "kill-process"} {
			pid := controlClientPID(t, d.Home)
			switch how {
			case "detach":
				d.Tmux("detach-client", "-t", controlClientTTY(t, d.Home))
			case "kill-session":
				d.Tmux("kill-session", "-t", controlSessionName(t, d.Home))
			case "kill-process":
				syscall.Kill(pid, syscall.SIGKILL)
			}
			WaitFor(t, waitDeadline, fmt.Sprintf("round %d %s: a new control client", i, how), func() error {
				out, _ := d.Tmux("list-clients", "-F", "#{client_control_mode} #{client_pid}")
				var pids []string
				for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
					if strings.HasPrefix(l, "1 ") {
						pids = append(pids, strings.TrimPrefix(l, "1 "))
					}
				}
				if len(pids) != 1 || pids[0] == strconv.Itoa(pid) {
					return errorf("control clients %v (old %d)", pids, pid)
				}
				return nil
			})
		}
	}
	// The supervised session was never touched, and the daemon still serves it.
	again := d.MustCreate(t, NewSpec(t, "churn-new"), "published")
	var found bool
	for _, l := range d.List(t).Sessions {
		found = found || l.Name == s.Name
	}
	if !found || again.Name == "" {
		t.Errorf("after churn ls does not list %s", s.Name)
	}
	checkOneControlClient(t, d.Home)
}

func controlClientPID(t testing.TB, h *Home) int {
	t.Helper()
	out, err := h.Tmux("list-clients", "-F", "#{client_control_mode} #{client_pid}")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if pid, ok := strings.CutPrefix(l, "1 "); ok {
			p, _ := strconv.Atoi(pid)
			return p
		}
	}
	t.Fatalf("no control client:\n%s", out)
	return 0
}

func controlClientTTY(t testing.TB, h *Home) string {
	t.Helper()
	out, _ := h.Tmux("list-clients", "-F", "#{client_control_mode} #{client_name}")
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if name, ok := strings.CutPrefix(l, "1 "); ok {
			return name
		}
	}
	t.Fatalf("no control client:\n%s", out)
	return ""
}

func controlSessionName(t testing.TB, h *Home) string {
	t.Helper()
	for _, s := range h.TmuxSessions(t) {
		if s.Control != "" {
			return s.Name
		}
	}
	t.Fatal("no control session")
	return ""
}
