package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestPersonsPaneIsNotTheAgent: a person attached to an agent's session opens
// a pane of their own (split-window: the active pane now) whose command exits
// with 5. remain-on-exit keeps it dead, and the census, which lists a
// session's active pane, shows the session's pane dead: that is not the
// agent's end — the agent keeps running, shown with its own pane pid — and
// when the agent does exit, its ended verdict carries the agent's own exit
// and pid, not the person's.
func TestPersonsPaneIsNotTheAgent(t *testing.T) {
	e := startEnv(t, "", "", false)
	gofile := filepath.Join(e.home, "person.go")
	id, res := e.create(t, "person", "agent", "linesexit", "3", gofile)
	out, err := tmuxtest.Command("-S", e.socket, "split-window", "-P", "-F", "#{pane_id}", "-t", res.Session.ID+":",
		"sh", "-c", "exit 5").CombinedOutput()
	if err != nil {
		t.Fatalf("split-window: %v %s", err, out)
	}
	pane := strings.TrimSpace(string(out))
	waitFor(t, "the census sees the person's pane dead", func() bool {
		s, ok := e.census.ByID(res.Session.ID)
		return ok && s.PaneID == pane && s.PaneDead
	})
	ctx := context.Background()
	if !e.m.reconcile(ctx) { // decides now what end detection decides on its own
		t.Fatal("reconcile incomplete")
	}
	p, _, err := e.store.PublishedFor(ctx, id)
	if err != nil || p.Ended || p.Stopping != nil {
		t.Fatalf("the agent's generation after a person's pane died: %+v %v", p, err)
	}
	sh, err := e.m.Show(ctx, Ref{Name: res.Session.Name})
	if err != nil || sh.Session == nil || sh.Session.PanePID != res.Session.PanePID || sh.Session.PaneDead || sh.Session.State != StateRunning {
		t.Fatalf("show: %+v %v", sh.Session, err)
	}
	_ = os.WriteFile(gofile, nil, 0o600) // the agent exits 0
	rec := e.ended(t, id)
	if rec.Reason != verdict.ReasonAgentExited || rec.Exit == nil || rec.Exit.Status == nil || *rec.Exit.Status != 0 ||
		fmt.Sprint(rec.Evidence["agent_pid"]) != fmt.Sprint(res.Session.PanePID) || !strings.Contains(rec.OutputTail, "line 3") {
		t.Fatalf("ended verdict %+v exit %+v: want the agent's own exit, pid and tail", rec, rec.Exit)
	}
}

// TestRestartRespawnsTheAgentsPane: a restart of an identity whose session
// has a person's pane as its active one respawns the agent's own pane; the
// person's pane and its process stay as they were, and the new generation's
// agent runs in the agent's pane.
func TestRestartRespawnsTheAgentsPane(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec, marks := e.restartSpec("personrestart", fence.RestartOnFailure, time.Millisecond, 5, "agent", "sleep")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	out, err := tmuxtest.Command("-S", e.socket, "split-window", "-P", "-F", "#{pane_id} #{pane_pid}", "-t", res.Session.ID+":",
		"sleep", "1000").CombinedOutput()
	if err != nil {
		t.Fatalf("split-window: %v %s", err, out)
	}
	var pane string
	var personPID int
	if _, err := fmt.Sscan(string(out), &pane, &personPID); err != nil {
		t.Fatalf("split-window said %q", out)
	}
	t.Cleanup(func() { _ = syscall.Kill(personPID, syscall.SIGKILL) })
	waitFor(t, "the census lists the person's pane", func() bool {
		s, ok := e.census.ByID(res.Session.ID)
		return ok && s.PaneID == pane
	})
	v, err := e.m.Restart(boundedCtx(t), Ref{Name: res.Session.Name})
	if err != nil || v.ID != res.Session.ID || v.Generation != 2 {
		t.Fatalf("restart: %+v %v", v, err)
	}
	waitFor(t, "the resumed agent", func() bool { return lines(marks) == 1 })
	if err := syscall.Kill(personPID, 0); err != nil {
		t.Fatalf("the person's process %d: %v", personPID, err)
	}
	p := e.published(id)
	if p.PanePID == personPID || p.PanePID == res.Session.PanePID {
		t.Fatalf("generation 2's pane pid %d (person's %d, generation 1's %d)", p.PanePID, personPID, res.Session.PanePID)
	}
	panes, _ := tmuxtest.Command("-S", e.socket, "list-panes", "-s", "-t", res.Session.ID, "-F", "#{pane_id} #{pane_pid} #{pane_dead}").CombinedOutput()
	want := fmt.Sprintf("%s %d 0", pane, personPID)
	if !strings.Contains(string(panes), want) || !strings.Contains(string(panes), fmt.Sprintf(" %d 0", p.PanePID)) {
		t.Fatalf("panes %q: want the person's %q and the agent's pid %d, both alive", panes, want, p.PanePID)
	}
}

// TestAgentsPaneGoneByHand: the agent's own pane killed by hand (after a
// person split the session) or respawned by hand with a person's command
// ends the generation — agent_pane_missing, a stop whatever the policy —
// and its session goes with it: left alone, the session went on showing a
// running agent whose input reached the person's process, and no verdict
// was ever written.
func TestAgentsPaneGoneByHand(t *testing.T) {
	for _, how := range []string{"kill-pane", "respawn-pane"} {
		t.Run(how, func(t *testing.T) {
			e := startEnv(t, "", "", false)
			id, spec, _ := e.restartSpec("byhand-"+how, fence.RestartAlways, time.Millisecond, 5, "agent", "sleep")
			res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the agent runs", func() bool { // the helper exec'd it
				cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", res.Session.PanePID))
				return strings.Contains(string(cmd), "agent\x00sleep")
			})
			out, err := tmuxtest.Command("-S", e.socket, "display-message", "-p", "-t", res.Session.ID, "#{pane_id}").Output()
			if err != nil {
				t.Fatal(err)
			}
			agent := strings.TrimSpace(string(out))
			var args []string
			if how == "kill-pane" {
				out, err := tmuxtest.Command("-S", e.socket, "split-window", "-d", "-P", "-F", "#{pane_pid}", "-t", res.Session.ID+":",
					"sleep", "1000").CombinedOutput()
				if err != nil {
					t.Fatalf("split-window: %v %s", err, out)
				}
				args = []string{"kill-pane", "-t", agent}
			} else {
				args = []string{"respawn-pane", "-k", "-t", agent, "sleep", "1000"}
			}
			if out, err := tmuxtest.Command(append([]string{"-S", e.socket}, args...)...).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v %s", how, err, out)
			}
			rec := e.ended(t, id)
			if rec.Reason != verdict.ReasonAgentPaneMissing || rec.ExitKind == verdict.ExitKindExit && rec.Exit.Signal != "SIGHUP" {
				t.Fatalf("ended verdict %+v exit %+v: want reason %s (hung up, when the exit is known)", rec, rec.Exit, verdict.ReasonAgentPaneMissing)
			}
			waitFor(t, "the session removed", func() bool {
				return tmuxtest.Command("-S", e.socket, "has-session", "-t", res.Session.ID).Run() != nil
			})
			waitFor(t, "stopped", func() bool { return e.published(id).Restart.State == fence.RestartStopped })
			if sh, err := e.m.Show(context.Background(), Ref{Identity: &id}); err != nil || sh.Session != nil && sh.Session.State == StateRunning {
				t.Fatalf("show after the end: %+v %v", sh.Session, err)
			}
		})
	}
}

// TestAgentsPaneGoneByHandAgentLives: as TestAgentsPaneGoneByHand, with an
// agent that ignores the hangup (and SIGTERM), so that its exit tells
// nothing: it lives on in no pane. Its pane killed by hand beside a person's
// is seen from the census's change of the session's pane; its pane respawned
// by hand (tmux tells no one) at the next talk to it, which is refused, the
// person's program getting none of it, or at the census's next reconcile
// (respawn-quiet). All end agent_pane_missing, the agent SIGKILLed after
// its grace.
func TestAgentsPaneGoneByHandAgentLives(t *testing.T) {
	for _, how := range []string{"kill-pane", "respawn-pane", "respawn-quiet"} {
		t.Run(how, func(t *testing.T) {
			var every time.Duration // the default, 30 s: only a talk or the change tells
			if how == "respawn-quiet" {
				every = 200 * time.Millisecond
			}
			e := startEnvWith(t, &env{reconcile: every}, "", false)
			id, spec, _ := e.restartSpec("lives-"+how, fence.RestartAlways, time.Millisecond, 5, "agent", "ignore")
			spec.StopTimeoutMS = 200
			res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the agent ready", func() bool { return isReady(res.Session.PanePID) })
			out, err := tmuxtest.Command("-S", e.socket, "display-message", "-p", "-t", res.Session.ID, "#{pane_id}").Output()
			if err != nil {
				t.Fatal(err)
			}
			agent := strings.TrimSpace(string(out))
			typed := filepath.Join(t.TempDir(), "typed")
			person := []string{"sh", "-c", "exec cat > " + typed}
			var args []string
			if how == "kill-pane" {
				split := append([]string{"-S", e.socket, "split-window", "-d", "-t", res.Session.ID + ":"}, person...)
				if out, err := tmuxtest.Command(split...).CombinedOutput(); err != nil {
					t.Fatalf("split-window: %v %s", err, out)
				}
				args = []string{"kill-pane", "-t", agent}
			} else {
				args = append([]string{"respawn-pane", "-k", "-t", agent}, person...)
			}
			if out, err := tmuxtest.Command(append([]string{"-S", e.socket}, args...)...).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v %s", how, err, out)
			}
			if how == "respawn-pane" {
				err := e.m.Input(context.Background(), Ref{Name: res.Session.Name}, Input{Text: "for the agent", Enter: true})
				if ve := verdict.AsError(err); ve == nil || ve.Code != verdict.CodeAgentNotRunning ||
					ve.Details["reason"] != verdict.ReasonAgentPaneMissing {
					t.Fatalf("input to a pane respawned by hand: %v", err)
				}
			}
			rec := e.ended(t, id)
			if rec.Reason != verdict.ReasonAgentPaneMissing || rec.Evidence["sigkill_sent"] != true {
				t.Fatalf("ended verdict %+v exit %+v: want reason %s, the agent SIGKILLed", rec, rec.Exit, verdict.ReasonAgentPaneMissing)
			}
			if liveNonZombie(res.Session.PanePID) {
				t.Fatal("ended while the agent lives")
			}
			if b, _ := os.ReadFile(typed); len(b) != 0 {
				t.Fatalf("the person's program got %q", b)
			}
		})
	}
}
