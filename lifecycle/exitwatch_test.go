package lifecycle

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// pidfds counts this process's open pidfds (the daemon is the test binary).
func pidfds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && l == "anon_inode:[pidfd]" {
			n++
		}
	}
	return n
}

// startAgents creates n sessions (agent `sleep`) and returns their
// identities and agents' pids once each helper has exec'd its agent.
func (e *env) startAgents(t *testing.T, prefix string, n int) ([]fence.Identity, []int) {
	t.Helper()
	var ids []fence.Identity
	var agents []int
	for i := 0; i < n; i++ {
		id, res := e.create(t, prefix+string(rune('a'+i)))
		var agent int
		waitFor(t, "agent start", func() bool { agent = agentPID(res.Session.PanePID); return agent != 0 })
		ids, agents = append(ids, id), append(agents, agent)
	}
	return ids, agents
}

// endedBySIGKILL checks an ended verdict of an agent's own death by SIGKILL,
// seen while it ran (not a postmortem).
func endedBySIGKILL(t *testing.T, rec verdict.Record) {
	t.Helper()
	if rec.ExitKind != verdict.ExitKindExit || rec.Reason != verdict.ReasonAgentExited ||
		rec.Exit == nil || rec.Exit.Signal != "SIGKILL" {
		t.Fatalf("ended %+v exit %+v", rec, rec.Exit)
	}
}

// TestSIGKILLEndedByExitWatch: agents killed by SIGKILL are ended through the
// exit watch alone — the census has no subscription and no pane-died hook,
// its reconcile is an hour away, and tmux sends no notification for a pane's
// death under remain-on-exit, so without the watch no verdict could come.
// Every wait is for a condition (generous deadline), none is timed. The
// watches hold one pidfd each while the agents run, and every one is given
// back once they ended; nothing is left running after the Manager stops.
func TestSIGKILLEndedByExitWatch(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	e := startEnvWith(t, &env{exitOnly: true}, "", false)
	base := pidfds(t)
	const n = 3
	ids, agents := e.startAgents(t, "xw", n)
	if got := e.m.ExitWatches(); got != n {
		t.Fatalf("%d watches for %d live agents", got, n)
	}
	waitFor(t, "one pidfd per watched agent", func() bool { return pidfds(t) == base+n })
	for _, pid := range agents {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		endedBySIGKILL(t, e.ended(t, id))
	}
	waitFor(t, "every watch released", func() bool { return e.m.ExitWatches() == 0 })
	waitFor(t, "every pidfd closed", func() bool { return pidfds(t) == base })
	e.close()
	goleak.VerifyNone(t, leaks)
}

// TestExitWatchRearmedAtRecover: a daemon restarted while its agents run
// watches them again (Recover adopts them), so an agent killed afterwards is
// ended through the watch alone, as above; a generation ended otherwise (a
// kill request) has its watch released too.
func TestExitWatchRearmedAtRecover(t *testing.T) {
	home := newHome(t)
	e := startEnvWith(t, &env{home: home, exitOnly: true}, "", false)
	ids, agents := e.startAgents(t, "rw", 2)
	e.close()
	if e.m.ExitWatches() != 0 {
		t.Fatalf("%d watches left after Shutdown", e.m.ExitWatches())
	}
	e2 := startEnvWith(t, &env{home: home, exitOnly: true}, "", false)
	if err := e2.m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e2.m.ExitWatches(); got != 2 {
		t.Fatalf("%d watches after Recover, want 2", got)
	}
	if err := syscall.Kill(agents[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	endedBySIGKILL(t, e2.ended(t, ids[0]))
	if _, err := e2.m.Kill(context.Background(), Ref{Identity: &ids[1]}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every watch released", func() bool { return e2.m.ExitWatches() == 0 })
}

// TestUnwatchedSessionMarkedForHook: a generation whose pane process cannot
// be watched (here: no watcher, as where pidfds are missing) has its session
// tagged census.TagUnwatched, so the census's pane-died hook tells its end;
// a watched one is not tagged (the hook skips it). Both agents, killed, end.
func TestUnwatchedSessionMarkedForHook(t *testing.T) {
	e := startEnv(t, "", "", false)
	tagOf := func(id string) string {
		out, _ := execTmux(e, "show-options", "-qv", "-t", id, census.TagUnwatched)
		return strings.TrimSpace(out)
	}
	watchedID, watched := e.create(t, "watched")
	e.m.mu.Lock()
	e.m.exits.failed = true // no new watcher: the next generation is unwatched
	w := e.m.exits.w
	e.m.exits.w = nil
	e.m.mu.Unlock()
	unwatchedID, unwatched := e.create(t, "unwatched")
	if got := tagOf(watched.Session.ID); got != "" {
		t.Fatalf("watched session tagged %s=%q", census.TagUnwatched, got)
	}
	if got := tagOf(unwatched.Session.ID); got != "1" {
		t.Fatalf("unwatched session: %s=%q, want 1", census.TagUnwatched, got)
	}
	e.m.mu.Lock()
	e.m.exits.w = w // the watched generation's watch, for its end and Shutdown
	e.m.mu.Unlock()
	for _, res := range []CreateResult{watched, unwatched} {
		var agent int
		waitFor(t, "agent start", func() bool { agent = agentPID(res.Session.PanePID); return agent != 0 })
		if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	endedBySIGKILL(t, e.ended(t, watchedID))
	endedBySIGKILL(t, e.ended(t, unwatchedID))
}

// TestExitReadFromProcessBeforeTmuxReaps: an agent's end starts from its own
// exit, without waiting for tmux. The tmux server is stopped (SIGSTOP: it can
// neither reap the agent nor answer, as a server busy over thousands of
// sessions is late to), the agent is killed, and the generation is stopping
// all the same — its exit read from the exited process (exit_read
// "process"); once tmux runs again the session is removed and the verdict
// says the agent's signal. Census subscription and hook are off, as above.
func TestExitReadFromProcessBeforeTmuxReaps(t *testing.T) {
	e := startEnvWith(t, &env{exitOnly: true}, "", false)
	ids, agents := e.startAgents(t, "fz", 1)
	info, ok := e.census.Info()
	if !ok {
		t.Fatal("census not connected")
	}
	if err := syscall.Kill(info.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cont := func() { _ = syscall.Kill(info.PID, syscall.SIGCONT) }
	t.Cleanup(cont)
	if err := syscall.Kill(agents[0], syscall.SIGTERM); err != nil {
		cont()
		t.Fatal(err)
	}
	waitFor(t, "the generation stopping while tmux is stopped", func() bool { return e.published(ids[0]).Stopping != nil })
	cont()
	rec := e.ended(t, ids[0])
	if rec.Reason != verdict.ReasonAgentExited || rec.ExitKind != verdict.ExitKindExit || rec.Exit == nil ||
		rec.Exit.Signal != "SIGTERM" || rec.Evidence["exit_read"] != "process" || rec.Evidence["exit_source"] != "pane_dead_status" {
		t.Fatalf("ended %+v exit %+v", rec, rec.Exit)
	}
	if out, err := execTmux(e, "has-session", "-t", rec.Session.ID); err == nil {
		t.Fatalf("session %s still there after its ended verdict (%q)", rec.Session.ID, out)
	}
}
