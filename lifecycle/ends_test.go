package lifecycle

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"

	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

// agentPID returns the pane's pid once its helper has exec'd the fake agent
// (the pane's process is the agent itself), 0 before.
func agentPID(pane int) int {
	cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pane) + "/cmdline")
	if strings.Contains(string(cmd), "\x00agent\x00") {
		return pane
	}
	return 0
}

// execedAgent: pid runs a fake agent (its helper's exec is done).
func execedAgent(pid int) bool { return agentPID(pid) == pid && pid > 0 }

func (e *env) create(t *testing.T, name string, argv ...string) (fence.Identity, CreateResult) {
	t.Helper()
	id, spec := e.identity(name)
	if len(argv) > 0 {
		spec.Argv = append([]string{spec.Argv[0]}, argv...)
	}
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return id, res
}

// ended waits for the identity's one ended verdict.
func (e *env) ended(t *testing.T, id fence.Identity) verdict.Record {
	t.Helper()
	var rec verdict.Record
	deadline := time.Now().Add(5 * time.Second)
	waitFor(t, "ended verdict", func() bool {
		if time.Now().After(deadline) && os.Getenv("SKC_TEST_LOG") != "" {
			deadline = deadline.Add(time.Hour)
			out, _ := tmuxtest.Command("-S", e.socket, "list-sessions", "-F", "#{session_id} #{session_name} #{pane_pid} #{pane_dead}").CombinedOutput()
			t.Logf("tmux: %s\ncensus: %+v\nverdicts %v", out, e.census.Snapshot(), verdictNames(e.verdicts(id)))
		}
		for _, r := range e.verdicts(id) {
			if r.Verdict == verdict.VerdictEnded {
				rec = r
				return true
			}
		}
		return false
	})
	if n := count(e.verdicts(id), verdict.VerdictEnded); n != 1 {
		t.Fatalf("%d ended verdicts", n)
	}
	return rec
}

func TestAgentExitStatus(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, _ := e.create(t, "exit7", "agent", "exit", "7")
	rec := e.ended(t, id)
	if rec.ExitKind != verdict.ExitKindExit || rec.Exit == nil || rec.Exit.Status == nil || *rec.Exit.Status != 7 {
		t.Fatalf("ended %+v exit %+v", rec, rec.Exit)
	}
	// The pane is kept dead (remain-on-exit, set by the saga whatever the
	// server's config says): an agent's own exit is agent_exited, and the
	// session is removed after the verdict.
	if rec.Reason != verdict.ReasonAgentExited {
		t.Fatalf("reason %q", rec.Reason)
	}
	waitFor(t, "the dead session removed", func() bool { return len(e.sessions(id.Digest())) == 0 })
	// The generation is ended: a new create gets a new generation.
	_, res := e.create(t, "exit7")
	if res.Status != "published" || res.Session.Generation != 2 {
		t.Fatalf("re-create %+v", res)
	}
}

func TestAgentKilledBySignal(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, res := e.create(t, "sigkill")
	var agent int
	waitFor(t, "agent start", func() bool { agent = agentPID(res.Session.PanePID); return agent != 0 })
	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	rec := e.ended(t, id)
	if rec.ExitKind != verdict.ExitKindExit || rec.Exit == nil || rec.Exit.Signal != "SIGKILL" || rec.Exit.Status != nil {
		t.Fatalf("ended %+v exit %+v", rec, rec.Exit)
	}
}

// TestEndWhileDaemonDownIsPostmortem: an agent killed while no daemon runs
// leaves its pane dead with the signal (remain-on-exit); the next daemon
// reads it into the ended verdict, process_postmortem.
func TestEndWhileDaemonDownIsPostmortem(t *testing.T) {
	home := newHome(t)
	e := startEnv(t, home, "", false)
	id, res := e.create(t, "down")
	var agent int
	waitFor(t, "agent start", func() bool { agent = agentPID(res.Session.PanePID); return agent != 0 })
	e.close()
	if err := syscall.Kill(agent, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The pane stays, dead (remain-on-exit), until a daemon ends the generation.
	waitFor(t, "the pane's death", func() bool {
		out, _ := tmuxtest.Command("-S", e.socket, "list-panes", "-a", "-F", "#{pane_pid} #{pane_dead}").Output()
		return strings.Contains(string(out), strconv.Itoa(res.Session.PanePID)+" 1")
	})
	e2 := startEnv(t, home, "", false)
	if err := e2.m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := e2.ended(t, id)
	if rec.ExitKind != verdict.ExitKindProcessPostmortem || rec.Exit == nil || rec.Exit.Signal != "SIGTERM" {
		t.Fatalf("ended %+v exit %+v", rec, rec.Exit)
	}
	// When it ended, from tmux's pane_dead_time (whole seconds), not when
	// the next daemon looked.
	if at, ok := rec.Evidence["ended_at"].(string); !ok || at == "" {
		t.Fatalf("ended verdict without evidence.ended_at: %+v", rec.Evidence)
	}
}

func TestKillIsCleanup(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, res := e.create(t, "kill")
	kr, err := e.m.Kill(context.Background(), Ref{Name: res.Session.Name})
	if err != nil {
		t.Fatal(err)
	}
	if kr.Status != "killed" || kr.Verdict.ExitKind != verdict.ExitKindCleanup || kr.Verdict.Reason != verdict.ReasonKilledByRequest {
		t.Fatalf("kill %+v", kr)
	}
	if s := e.sessions(id.Digest()); len(s) != 0 {
		t.Fatalf("sessions left %v", s)
	}
	if rec := e.ended(t, id); rec.Sequence != kr.Verdict.Sequence {
		t.Fatalf("ended %+v vs kill verdict %+v", rec, kr.Verdict)
	}
	if _, err := e.m.Kill(context.Background(), Ref{Identity: &id}); verdict.CodeOf(err) != verdict.CodeNotFound {
		t.Fatalf("second kill: %v", err)
	}
}

func TestManagerShutdownLeaksNothing(t *testing.T) {
	opts := goleak.IgnoreCurrent()
	e := startEnv(t, "", "", false)
	id, _ := e.create(t, "leak")
	if _, err := e.m.List(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Show(context.Background(), Ref{Identity: &id}); err != nil {
		t.Fatal(err)
	}
	e.close()
	goleak.VerifyNone(t, opts)
}
