package lifecycle

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// childrenOf lists pid's children.
func childrenOf(pid int) []int {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	var out []int
	for _, p := range tasks {
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

func liveNonZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

func (e *env) createSpec(t *testing.T, name string, wait time.Duration, stopTimeout time.Duration, argv ...string) (CreateResult, error) {
	t.Helper()
	id, spec := e.identity(name)
	spec.Argv = append([]string{spec.Argv[0]}, argv...)
	spec.StopTimeoutMS = stopTimeout.Milliseconds()
	return e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: wait})
}

// readyWithChild waits until the agent in pane pid pane and its first
// child are both ready, and returns their pids.
func readyWithChild(t *testing.T, pane int) (agent, child int) {
	t.Helper()
	waitFor(t, "agent and its child", func() bool {
		agent = agentPID(pane)
		if agent == 0 || !isReady(agent) {
			return false
		}
		if c := childrenOf(agent); len(c) > 0 && isReady(c[0]) {
			child = c[0]
			return true
		}
		return false
	})
	return agent, child
}

// TestStopSessionHoldWithoutCgroup: where no cgroup is used, the pane's session
// holds the generation. A session killed by hand whose agent and whose agent's
// child (in a process group of its own) ignore the hangup: both are SIGKILLed
// after the grace and proven gone before the next create publishes.
func TestStopSessionHoldWithoutCgroup(t *testing.T) {
	e := startEnvWith(t, &env{noCgroup: true}, "", false)
	res, err := e.createSpec(t, "sid", time.Second, 300*time.Millisecond, "agent", "childpgrp")
	if err != nil {
		t.Fatal(err)
	}
	agent, child := readyWithChild(t, res.Session.PanePID)
	if out, err := execTmux(e, "kill-session", "-t", res.Session.ID); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	again, err := e.createSpec(t, "sid", time.Minute, 300*time.Millisecond, "agent", "sleep")
	if err != nil || again.Status != verdict.VerdictPublished {
		t.Fatalf("second create: %+v %v", again, err)
	}
	for _, p := range []int{res.Session.PanePID, agent, child} {
		if liveNonZombie(p) {
			t.Errorf("generation 2 published while %d of generation 1 is alive", p)
		}
	}
	id, _ := e.identity("sid")
	var ended *verdict.Record
	for _, r := range e.verdicts(id) {
		if r.Verdict == verdict.VerdictEnded && r.Session.Generation == 1 {
			ended = &r
		}
	}
	if ended == nil || ended.Reason != verdict.ReasonTmuxSessionMissing || ended.Evidence["sigkill_sent"] != true {
		t.Fatalf("ended verdict of generation 1: %+v", ended)
	}
}

// TestCreateWhileStopping: a create that meets a stopping generation waits
// within its wait and is refused identity_reserved_live with details.stopping;
// meanwhile the session lists as stopping; a kill returns once it is gone.
func TestCreateWhileStopping(t *testing.T) {
	e := startEnv(t, "", "", false)
	res, err := e.createSpec(t, "stopping", time.Second, 3*time.Second, "agent", "ignore")
	if err != nil {
		t.Fatal(err)
	}
	if res.Session.StopTimeoutMS != 3000 || res.Session.State != StateRunning {
		t.Fatalf("created %+v", res.Session)
	}
	waitFor(t, "agent start", func() bool { a := agentPID(res.Session.PanePID); return a != 0 && isReady(a) })
	killed := make(chan KillResult, 1)
	go func() {
		kr, err := e.m.Kill(context.Background(), Ref{Name: res.Session.Name})
		if err != nil {
			t.Error(err)
		}
		killed <- kr
	}()
	waitFor(t, "ls to say stopping", func() bool {
		l, err := e.m.List(context.Background())
		if err != nil {
			return false
		}
		for _, s := range l.Sessions {
			if s.ID == res.Session.ID && s.State == StateStopping {
				return true
			}
		}
		return false
	})
	_, err = e.createSpec(t, "stopping", 10*time.Millisecond, time.Second, "agent", "sleep")
	ve := verdict.AsError(err)
	if ve == nil || ve.Code != verdict.CodeIdentityReservedLive || ve.Details["stopping"] != true {
		t.Fatalf("create while stopping: %v", err)
	}
	// The refusal says that the wait ran out (the timer's tick was once read
	// twice, and the message said "the request ended … (<nil>)").
	if !strings.Contains(ve.Message, "waited 10ms") || strings.Contains(ve.Message, "<nil>") {
		t.Fatalf("create while stopping: message %q", ve.Message)
	}
	kr := <-killed
	if kr.Verdict.Reason != verdict.ReasonKilledByRequest || kr.Verdict.Evidence["sigkill_sent"] != true ||
		kr.Verdict.Exit == nil || kr.Verdict.Exit.Signal != "SIGKILL" {
		t.Fatalf("kill verdict %+v exit %+v", kr.Verdict, kr.Verdict.Exit)
	}
	if liveNonZombie(res.Session.PanePID) {
		t.Fatal("kill returned while the pane's process is alive")
	}
	again, err := e.createSpec(t, "stopping", time.Second, time.Second, "agent", "sleep")
	if err != nil || again.Status != verdict.VerdictPublished || again.Session.Generation != 2 {
		t.Fatalf("create after the kill: %+v %v", again, err)
	}
}

// TestKillInterruptedByShutdown: a kill still waiting out its grace when the
// daemon shuts down is refused busy (retry later: the next daemon continues
// the stop), not fence_unavailable — nothing is wrong with the fence.
func TestKillInterruptedByShutdown(t *testing.T) {
	e := startEnv(t, "", "", false)
	res, err := e.createSpec(t, "interrupted", time.Second, 60*time.Second, "agent", "ignore")
	if err != nil {
		t.Fatal(err)
	}
	agent := 0
	waitFor(t, "agent start", func() bool { agent = agentPID(res.Session.PanePID); return agent != 0 && isReady(agent) })
	defer syscall.Kill(agent, syscall.SIGKILL) // the grace is 60 s; nobody waits it out
	killed := make(chan error, 1)
	go func() {
		_, err := e.m.Kill(context.Background(), Ref{Name: res.Session.Name})
		killed <- err
	}()
	waitFor(t, "the stop to begin", func() bool {
		id, _ := e.identity("interrupted")
		p, ok, err := e.store.PublishedFor(context.Background(), id)
		return err == nil && ok && p.Stopping != nil
	})
	e.close()
	ve := verdict.AsError(<-killed)
	if ve == nil || ve.Code != verdict.CodeBusy || ve.Details["stopping"] != true || !strings.Contains(ve.Message, "shutting down") {
		t.Fatalf("kill interrupted by shutdown: %v, want busy saying the supervisor is shutting down", ve)
	}
}

// TestUnprovableStopAndRelease: a generation whose processes cannot be proven
// gone (its cgroup.events unreadable) stays blocked with an unresolved verdict;
// `fence release` is refused while its processes are alive, and clears it
// once they are not proven alive.
func TestUnprovableStopAndRelease(t *testing.T) {
	old := killProofWait
	killProofWait = 200 * time.Millisecond
	t.Cleanup(func() { killProofWait = old })
	e := startEnvWith(t, &env{noCgroup: true}, "", false)
	res, err := e.createSpec(t, "stuck", time.Second, 100*time.Millisecond, "agent", "sleep")
	if err != nil {
		t.Fatal(err)
	}
	id, _ := e.identity("stuck")
	pub, _, _ := e.store.PublishedFor(context.Background(), id)
	if _, err := e.m.Release(context.Background(), pub.ReservationID); verdict.CodeOf(err) != verdict.CodeIdentityReservedLive {
		t.Fatalf("release of a running generation: %v", err)
	}
	// Point the hold at a cgroup whose events cannot be read: unknown.
	bad := filepath.Join(t.TempDir(), "cg")
	if err := os.MkdirAll(filepath.Join(bad, "cgroup.events"), 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(e.home, "fence.sqlite")+"?_pragma=busy_timeout(10000)") // the daemon writes too
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE identities SET cgroup = ?, pane_pid = 0, pane_start = 0`, bad); err != nil {
		t.Fatal(err)
	}
	db.Close()
	// The daemon's in-memory copy is refreshed by the next write it makes:
	// the stop reads the row itself (BeginStop).
	if _, err := execTmux(e, "kill-session", "-t", res.Session.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "unresolved verdict", func() bool {
		return count(e.verdicts(id), verdict.VerdictUnresolved) > 0
	})
	// Its session is gone, but show still names what holds the identity.
	if sr, err := e.m.Show(context.Background(), Ref{Identity: &id}); err != nil || sr.Session.State != StateStopping {
		t.Fatalf("show of the blocked identity: %+v %v", sr.Session, err)
	}
	// The create joins a new stop run (SIGKILL, killProofWait, fence writes):
	// a wait that outlasts it on a loaded machine, so that the answer is the
	// run's (unknown), not the wait's (live, "not proven gone yet").
	_, err = e.createSpec(t, "stuck", time.Minute, time.Second, "agent", "sleep")
	if ve := verdict.AsError(err); ve == nil || ve.Code != verdict.CodeIdentityReservedUnknown || ve.Details["stopping"] != true {
		t.Fatalf("create of a blocked identity: %v", err)
	}
	// A wait shorter than the retry's proof wait after SIGKILL: still the
	// unresolved refusal, not "not proven gone yet" (identity_reserved_live).
	_, err = e.createSpec(t, "stuck", 10*time.Millisecond, time.Second, "agent", "sleep")
	if ve := verdict.AsError(err); ve == nil || ve.Code != verdict.CodeIdentityReservedUnknown || ve.Details["stopping"] != true {
		t.Fatalf("create with a short wait of a blocked identity: %v", err)
	}
	rec, err := e.m.Release(context.Background(), pub.ReservationID)
	if err != nil || rec.Verdict != verdict.VerdictReleased || rec.Session == nil || rec.Session.Generation != 1 {
		t.Fatalf("release: %+v %v", rec, err)
	}
	again, err := e.createSpec(t, "stuck", time.Second, time.Second, "agent", "sleep")
	if err != nil || again.Status != verdict.VerdictPublished {
		t.Fatalf("create after release: %+v %v", again, err)
	}
}

// execTmux runs tmux on the env's private server.
func execTmux(e *env, args ...string) (string, error) {
	out, err := tmuxtest.Command(append([]string{"-S", e.socket}, args...)...).CombinedOutput()
	return string(out), err
}

// TestRecoveryAbsentWaitsForAgent: a creator that published and died before
// releasing leaves a row whose session is then killed by hand while its agent
// (which ignores the hangup) still runs. "Absent" must mean the session and the
// generation's processes are gone: the next create stops generation 1 (SIGKILL
// after its grace) before it reclaims the row (the model's recovery rule) —
// whether the create finds the row itself or the daemon's start saw it first
// (then the stop it began runs in the background, and the create joins it).
func TestRecoveryAbsentWaitsForAgent(t *testing.T) {
	for _, atStart := range []bool{false, true} {
		t.Run(fmt.Sprintf("recover_at_start=%v", atStart), func(t *testing.T) { testRecoveryAbsent(t, atStart) })
	}
}

func testRecoveryAbsent(t *testing.T, atStart bool) {
	home := newHome(t)
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "faultchild", home, FaultPublish, "absent", "agent", "ignore")
	cmd.Stderr = os.Stderr
	_ = cmd.Run()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("fault child did not die at %s", FaultPublish)
	}
	e := startEnv(t, home, "", false)
	id, _ := e.identity("absent")
	rows, err := e.store.Reservations(context.Background())
	if err != nil || len(rows) != 1 {
		t.Fatalf("rows after the crash: %+v %v", rows, err)
	}
	row := rows[0]
	var agent int
	waitFor(t, "generation 1's agent (its helper saw the publication)", func() bool {
		agent = agentPID(row.PanePID)
		return agent != 0 && isReady(agent)
	})
	if out, err := execTmux(e, "kill-session", "-t", row.TmuxID); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if atStart {
		if err := e.m.Recover(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	res, err := e.createSpec(t, "absent", time.Minute, time.Second, "agent", "sleep")
	if err != nil || res.Status != verdict.VerdictPublished || res.Session.Generation != 2 {
		t.Fatalf("create after the crash: %+v %v", res, err)
	}
	for _, p := range []int{row.PanePID, agent} {
		if liveNonZombie(p) {
			t.Errorf("generation 2 published while %d of generation 1 is alive", p)
		}
	}
	var ended, reclaimed bool
	for _, r := range e.verdicts(id) {
		ended = ended || (r.Verdict == verdict.VerdictEnded && r.Session.Generation == 1 && r.Evidence["sigkill_sent"] == true)
		reclaimed = reclaimed || r.Verdict == verdict.VerdictReclaimed
	}
	if !ended || !reclaimed {
		t.Fatalf("verdicts %v: want generation 1 ended after SIGKILL, then the row reclaimed", verdictNames(e.verdicts(id)))
	}
}

// TestRecoveryAtStartDecidesAfterStop: a daemon that starts while a dead
// creator's published generation is stopping (its session killed by hand, its
// agent ignoring the hangup) writes no unresolved verdict for the row — the
// stop is under way, not stuck — and, once the stop has proven the agent gone,
// reclaims and releases the row by itself, with no create needed.
func TestRecoveryAtStartDecidesAfterStop(t *testing.T) {
	home := newHome(t)
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "faultchild", home, FaultPublish, "later", "agent", "ignore")
	cmd.Stderr = os.Stderr
	_ = cmd.Run()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("fault child did not die at %s", FaultPublish)
	}
	e := startEnv(t, home, "", false)
	id, _ := e.identity("later")
	rows, err := e.store.Reservations(context.Background())
	if err != nil || len(rows) != 1 {
		t.Fatalf("rows after the crash: %+v %v", rows, err)
	}
	row := rows[0]
	var agent int
	waitFor(t, "generation 1's agent", func() bool { agent = agentPID(row.PanePID); return agent != 0 && isReady(agent) })
	if out, err := execTmux(e, "kill-session", "-t", row.TmuxID); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := e.m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the row decided after the stop", func() bool {
		rows, err := e.store.Reservations(context.Background())
		return err == nil && len(rows) == 0
	})
	if liveNonZombie(agent) {
		t.Fatalf("row released while generation 1's agent %d is alive", agent)
	}
	recs := e.verdicts(id)
	if count(recs, verdict.VerdictUnresolved) != 0 || count(recs, verdict.VerdictReclaimed) != 1 ||
		count(recs, verdict.VerdictEnded) != 1 {
		t.Fatalf("verdicts %v: want generation 1 ended, the row reclaimed, nothing unresolved", verdictNames(recs))
	}
}

// TestStoppingNamedByID: a generation stopping after its session was killed
// by hand is named by the tmux id `ls` lists it with, as by its name: show
// shows it stopping, kill waits for its stop.
func TestStoppingNamedByID(t *testing.T) {
	e := startEnv(t, "", "", false)
	res, err := e.createSpec(t, "byid", time.Second, time.Second, "agent", "ignore")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "agent start", func() bool { a := agentPID(res.Session.PanePID); return a != 0 && isReady(a) })
	if out, err := tmuxtest.Command("-S", e.socket, "kill-session", "-t", res.Session.ID).CombinedOutput(); err != nil {
		t.Fatalf("kill-session: %v %s", err, out)
	}
	waitFor(t, "the generation stopping, its session gone", func() bool {
		_, listed := e.census.ByID(res.Session.ID)
		id, _ := e.identity("byid")
		p, _, _ := e.store.PublishedFor(context.Background(), id)
		return !listed && p.Stopping != nil && !p.Ended
	})
	sh, err := e.m.Show(context.Background(), Ref{Name: res.Session.ID})
	if err != nil || sh.Session == nil || sh.Session.State != StateStopping || sh.Session.ID != res.Session.ID {
		t.Fatalf("show %s: %+v %v", res.Session.ID, sh.Session, err)
	}
	kr, err := e.m.Kill(boundedCtx(t), Ref{Name: res.Session.ID})
	if err != nil || kr.Verdict.Verdict != verdict.VerdictEnded {
		t.Fatalf("kill %s: %+v %v", res.Session.ID, kr, err)
	}
}

// TestLookupRefusedInputIsNotAnOutage: an identity the fence's own input
// rules refuse (a state_dir through a symlink that does not resolve) is
// invalid_request for every lookup, not fence_unavailable: the database is
// fine, and the caller's fix is its input.
func TestLookupRefusedInputIsNotAnOutage(t *testing.T) {
	e := startEnv(t, "", "", true)
	dangling := filepath.Join(t.TempDir(), "dangling")
	if err := os.Symlink(filepath.Join(t.TempDir(), "missing"), dangling); err != nil {
		t.Fatal(err)
	}
	ref := Ref{Identity: &fence.Identity{StateDir: filepath.Join(dangling, "x"), SessionID: "s"}}
	ctx := context.Background()
	if _, err := e.m.Show(ctx, ref); codeOf(err) != verdict.CodeInvalidRequest {
		t.Errorf("show: %v", err)
	}
	if _, err := e.m.Kill(ctx, ref); codeOf(err) != verdict.CodeInvalidRequest {
		t.Errorf("kill: %v", err)
	}
	if _, err := e.m.Resolve(ctx, ref); codeOf(err) != verdict.CodeInvalidRequest {
		t.Errorf("resolve: %v", err)
	}
}

// TestSIGKILLOfLeftoversIsNotTheAgents: a session killed by hand whose agent
// dies of the hangup at once but leaves a child that ignores it: the stop's
// SIGKILL after the grace reaches only the child, so the ended verdict says
// it was sent but does not give it as the agent's exit (which went with the
// pane: unknown).
func TestSIGKILLOfLeftoversIsNotTheAgents(t *testing.T) {
	e := startEnv(t, "", "", false)
	res, err := e.createSpec(t, "leftover", time.Second, 300*time.Millisecond, "agent", "childleft")
	if err != nil {
		t.Fatal(err)
	}
	_, child := readyWithChild(t, res.Session.PanePID)
	if out, err := execTmux(e, "kill-session", "-t", res.Session.ID); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	id, _ := e.identity("leftover")
	var ended *verdict.Record
	waitFor(t, "ended verdict", func() bool {
		for _, r := range e.verdicts(id) {
			if r.Verdict == verdict.VerdictEnded && r.Session.Generation == 1 {
				ended = &r
			}
		}
		return ended != nil
	})
	if liveNonZombie(child) {
		t.Fatal("ended while the agent's child lives")
	}
	if ended.Evidence["sigkill_sent"] != true || ended.Exit == nil || ended.Exit.Status != nil ||
		ended.Exit.Signal != "" || ended.Evidence["exit_source"] == "stop_sigkill" {
		t.Fatalf("ended verdict %+v exit %+v: the SIGKILL reached only the child", ended, ended.Exit)
	}
}
