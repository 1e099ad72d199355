package lifecycle

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestKillDuringPolicyStop: a kill that meets the stop of a generation whose
// agent exited under a restart policy (a child of it holds the generation
// for its grace) waits for that stop and then stops the identity for good:
// no next start, its answer the stopped verdict.
func TestKillDuringPolicyStop(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec, marks := e.restartSpec("killstop", fence.RestartOnFailure, time.Millisecond, 5, "agent", "childexit", "1")
	spec.StopTimeoutMS = 1000
	if _, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the generation stopping", func() bool { return e.published(id).Stopping != nil })
	kr, err := e.m.Kill(boundedCtx(t), Ref{Identity: &id})
	if err != nil {
		t.Fatal(err)
	}
	p := e.published(id)
	if p.Generation != 1 || !p.Ended || p.Restart.State != fence.RestartStopped {
		t.Fatalf("after the kill: generation %d ended %v restart %q", p.Generation, p.Ended, p.Restart.State)
	}
	// The kill answers the generation's end or, when that end had already
	// handed the identity to its next start, the stop it wrote; either way
	// one stopped verdict says which start it cancelled.
	if kr.Verdict.Verdict != verdict.VerdictStopped && kr.Verdict.Verdict != verdict.VerdictEnded {
		t.Fatalf("kill answered %s %s", kr.Verdict.Verdict, kr.Verdict.Reason)
	}
	if st := withReason(e.verdicts(id), verdict.VerdictStopped, verdict.ReasonKilledByRequest); len(st) != 1 {
		t.Fatalf("verdicts: %v", verdictNames(e.verdicts(id)))
	}
	if lines(marks) != 0 || len(agentsWith(marks)) != 0 {
		t.Fatal("a next generation started after the kill")
	}
}

// TestKillDuringRestartRequest: a kill that meets a restart request's stop
// (an agent that ignores SIGTERM: the stop waits out its grace) leaves the
// identity stopped — the restart's next generation never runs, or is killed
// in turn if it published first — and the restart request answers.
func TestKillDuringRestartRequest(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec, marks := e.restartSpec("killrestart", fence.RestartNever, time.Hour, 5, "agent", "ignore")
	spec.StopTimeoutMS = 1000
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Ignoring SIGTERM once it runs: a stop sent earlier would end it at once,
	// and the restart's stop would be over before the kill could meet it.
	waitFor(t, "agent start", func() bool { a := agentPID(res.Session.PanePID); return a != 0 && isReady(a) })
	restarted := make(chan error, 1)
	go func() {
		_, err := e.m.Restart(boundedCtx(t), Ref{Identity: &id})
		restarted <- err
	}()
	waitFor(t, "the restart's stop", func() bool { return e.published(id).Stopping != nil })
	if _, err := e.m.Kill(boundedCtx(t), Ref{Identity: &id}); err != nil {
		t.Fatal(err)
	}
	if err := <-restarted; err != nil && verdict.CodeOf(err) != verdict.CodeAgentNotRunning {
		t.Fatalf("restart request: %v", err)
	}
	p := e.published(id)
	if !p.Ended || p.Restart.State == fence.RestartExited {
		t.Fatalf("after the kill: generation %d ended %v restart %q", p.Generation, p.Ended, p.Restart.State)
	}
	waitFor(t, "no agent of the identity left", func() bool { return len(agentsWith(marks)) == 0 })
}

// TestRestartKeepsRenamedSession: a session renamed by hand is restarted in
// place — same $id, the name it was given by hand — as any kept session, by
// the restart verb and by the policy; the fence goes on naming it by the
// saga's name.
func TestRestartKeepsRenamedSession(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec, marks := e.restartSpec("renamed", fence.RestartOnFailure, time.Millisecond, 5, "agent", "sleep")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := tmuxtest.Command("-S", e.socket, "rename-session", "-t", res.Session.ID, "by hand").CombinedOutput(); err != nil {
		t.Fatalf("rename: %v %s", err, out)
	}
	waitFor(t, "the census reading the rename", func() bool {
		s, ok := e.census.ByID(res.Session.ID)
		return ok && s.Name == "by hand"
	})
	v, err := e.m.Restart(boundedCtx(t), Ref{Name: "by hand"})
	if err != nil || v.ID != res.Session.ID || v.Generation != 2 {
		t.Fatalf("restart: %+v %v", v, err)
	}
	waitFor(t, "the resumed agent", func() bool { return lines(marks) == 1 })
	// The policy's restart, after the resumed agent exits with a failure.
	for _, pid := range agentsWith(marks) {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	waitFor(t, "generation 3", func() bool { p := e.published(id); return p.Generation == 3 && !p.Ended })
	s, ok := e.census.ByID(res.Session.ID)
	if p := e.published(id); !ok || p.TmuxID != res.Session.ID || s.Name != "by hand" {
		t.Fatalf("generation 3 in %s (session %+v, listed %v), want the renamed %s", p.TmuxID, s, ok, res.Session.ID)
	}
	if recs := withReason(e.verdicts(id), verdict.VerdictPublished, verdict.ReasonRestart); len(recs) != 1 || recs[0].Evidence["same_session"] != true {
		t.Fatalf("verdicts: %v", verdictNames(e.verdicts(id)))
	}
}

// TestKeptSessionKilledWhileDaemonDown: a kept session killed by hand while
// no daemon runs is a stop too: the next daemon's start finds it gone from
// its server (which still runs) and writes stopped instead of starting it.
func TestKeptSessionKilledWhileDaemonDown(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec, marks := e.restartSpec("downhand", fence.RestartOnFailure, 2*time.Second, 5, "agent", "exit", "2")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "waiting", func() bool { return e.published(id).Restart.State == fence.RestartExited })
	e.close()
	if out, err := execTmux(e, "kill-session", "-t", res.Session.ID); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	e2 := startEnv(t, e.home, "", false)
	if err := e2.m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := e2.published(id); p.Restart.State != fence.RestartStopped || p.Generation != 1 {
		t.Fatalf("after the start: generation %d restart %+v, want stopped", p.Generation, p.Restart)
	}
	if st := withReason(e2.verdicts(id), verdict.VerdictStopped, verdict.ReasonTmuxSessionMissing); len(st) != 1 {
		t.Fatalf("verdicts: %v", verdictNames(e2.verdicts(id)))
	}
	if lines(marks) != 0 {
		t.Fatal("restarted after its kept session was killed by hand")
	}
}

// TestKillNeverClaimsAnUnprovenEnd: a state_dir whose missing directory
// became a symlink after the create is keyed otherwise by the fence now, and
// the kill cannot record the generation's end; it must say so
// (identity_reserved_unknown, details.stopping) rather than answer "killed"
// with an empty verdict while the agent runs on.
func TestKillNeverClaimsAnUnprovenEnd(t *testing.T) {
	e := startEnv(t, "", "", false)
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	_, spec := e.identity("moved")
	id := fence.Identity{StateDir: filepath.Join(base, "later", "x"), SessionID: "moved"}
	spec.StateFile = filepath.Join(real, "moved.jsonl")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(base, "later")); err != nil {
		t.Fatal(err)
	}
	kr, err := e.m.Kill(boundedCtx(t), Ref{Name: res.Session.Name})
	if err == nil && (kr.Status != "killed" || kr.Verdict.Verdict != verdict.VerdictEnded) {
		t.Fatalf("kill answered %+v without an ended verdict", kr)
	}
	if err != nil && codeOf(err) != verdict.CodeIdentityReservedUnknown {
		t.Fatalf("kill: %v", err)
	}
}

// TestKillDuringRestartStart: a kill that stops an identity while its
// restart's start is between the respawn and the tags removes the kept
// session from under it; the start's failed verdict is agent_not_running
// (cancelled), as when its publication is refused, not the tag_failed or
// tmux_unavailable of its tmux steps: nothing failed (found outside-in).
func TestKillDuringRestartStart(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec, _ := e.restartSpec("killstart", fence.RestartOnFailure, 10*time.Millisecond, 5, "agent", "exit", "2")
	var once sync.Once
	killed := make(chan error, 1)
	spawnedHook = func(a *attempt) {
		if a.restart == nil {
			return
		}
		once.Do(func() {
			go func() {
				_, err := e.m.Kill(context.Background(), Ref{Identity: &id})
				killed <- err
			}()
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				p, _, err := e.store.PublishedFor(context.Background(), id)
				gone := tmuxtest.Command("-S", e.socket, "has-session", "-t", a.tmuxID).Run() != nil
				if err == nil && p.Restart.State == fence.RestartStopped && gone {
					return
				}
			}
		})
	}
	t.Cleanup(func() { spawnedHook = nil })
	if _, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := <-killed; err != nil {
		t.Fatal(err)
	}
	var failed *verdict.Record
	waitFor(t, "the start's failed verdict", func() bool {
		for _, r := range e.verdicts(id) {
			if r.Verdict == verdict.VerdictFailed && r.Session != nil && r.Session.Generation == 2 {
				failed = &r
			}
		}
		return failed != nil
	})
	if failed.Code != verdict.CodeAgentNotRunning {
		t.Fatalf("the cancelled start's verdict: %s %s %v", failed.Code, failed.Reason, failed.Evidence)
	}
}
