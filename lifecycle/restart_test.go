package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
	"github.com/skc-supervisor/skc-supervisor/proctree"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// agentsWith lists the live (not zombie) processes whose command line
// contains token as one word: the agents of one identity, counted in /proc
// whatever tmux or the fence say.
func agentsWith(token string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(b), "\x00agent\x00") || !strings.Contains(string(b), "\x00"+token+"\x00") {
			continue
		}
		if liveNonZombie(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// restartSpec is the identity name's spec with policy, its first command
// (argv after the test binary) and, for every later start, `agent mark
// FILE` (FILE returned: one line per start of a resumed agent).
func (e *env) restartSpec(name, policy string, delay time.Duration, burst int, argv ...string) (fence.Identity, fence.Spec, string) {
	id, spec := e.identity(name)
	marks := filepath.Join(id.StateDir, "marks")
	spec.Argv = append([]string{spec.Argv[0]}, argv...)
	spec.Restart, spec.RestartDelayMS, spec.RestartBurst, spec.RestartIntervalS = policy, delay.Milliseconds(), burst, 300
	spec.ResumeArgv = []string{spec.Argv[0], "agent", "mark", marks}
	return id, spec, marks
}

// waitingIdentity creates an identity under on-failure whose agent exits 2
// at once, and waits until it waits out its (hour-long) restart delay in its
// kept session.
func (e *env) waitingIdentity(t *testing.T, name string) (fence.Identity, CreateResult) {
	t.Helper()
	id, spec, _ := e.restartSpec(name, fence.RestartOnFailure, time.Hour, 5, "agent", "exit", "2")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "waiting out the delay", func() bool {
		v, err := e.m.Show(context.Background(), Ref{Name: res.Session.Name})
		return err == nil && v.Session != nil && v.Session.State == StateExited
	})
	return id, res
}

func lines(path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "\n")
}

func (e *env) published(id fence.Identity) fence.Published {
	p, _, err := e.store.PublishedFor(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func withReason(recs []verdict.Record, v, reason string) []verdict.Record {
	var out []verdict.Record
	for _, r := range recs {
		if r.Verdict == v && r.Reason == reason {
			out = append(out, r)
		}
	}
	return out
}

// TestRestartOnFailureSameSession: an agent that fails is restarted as the
// next generation in the same session (same $id and name) with resume_argv,
// after its ended verdict; one agent runs; kill stops it for good.
func TestRestartOnFailureSameSession(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec, marks := e.restartSpec("onfail", fence.RestartOnFailure, 10*time.Millisecond, 5, "agent", "exit", "3")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "generation 2 running", func() bool {
		p := e.published(id)
		return p.Generation >= 2 && p.Restart.Restarts == 1 && !p.Ended && len(agentsWith(marks)) == 1 && lines(marks) >= 1
	})
	p := e.published(id)
	if p.TmuxID != res.Session.ID || p.SessionName != res.Session.Name || p.Restart.Restarts != 1 {
		t.Fatalf("generation 2 in %s %s (restarts %d), want the session %s %s", p.TmuxID, p.SessionName,
			p.Restart.Restarts, res.Session.ID, res.Session.Name)
	}
	recs := e.verdicts(id)
	ended := withReason(recs, verdict.VerdictEnded, verdict.ReasonAgentExited)
	restarted := withReason(recs, verdict.VerdictPublished, verdict.ReasonRestart)
	if len(ended) != 1 || ended[0].Exit == nil || ended[0].Exit.Status == nil || *ended[0].Exit.Status != 3 ||
		len(restarted) != 1 || restarted[0].Restart == nil || restarted[0].Restart.Count != 1 ||
		restarted[0].Sequence < ended[0].Sequence || restarted[0].Session.ID != res.Session.ID {
		t.Fatalf("verdicts: %v", verdictNames(recs))
	}
	// ls and show follow the census, which sees the respawned pane within a
	// second (its subscription).
	waitFor(t, "show: running, restarts 1", func() bool {
		v, err := e.m.Show(context.Background(), Ref{Identity: &id})
		return err == nil && v.Session != nil && v.Session.State == StateRunning && v.Session.Restarts == 1 &&
			v.Session.Restart == fence.RestartOnFailure && v.Session.Generation >= 2 && v.Session.Authoritative
	})
	if _, err := e.m.Kill(context.Background(), Ref{Identity: &id}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "agent gone", func() bool { return len(agentsWith(marks)) == 0 })
	if p := e.published(id); !p.Ended || p.Restart.State != fence.RestartStopped || p.Generation != 2 {
		t.Fatalf("after kill: gen %d ended %v state %q", p.Generation, p.Ended, p.Restart.State)
	}
	if n := lines(marks); n != 1 {
		t.Fatalf("%d resumed starts, want 1", n)
	}
}

// TestRestartGivesUpAndDelaysDouble: an agent that always fails is started
// burst times, with delays that double (read from the restart verdicts and
// the ended verdicts' times), then one gave_up verdict; a create starts it
// again.
func TestRestartGivesUpAndDelaysDouble(t *testing.T) {
	e := startEnv(t, "", "", false)
	exe, _ := os.Executable()
	id, spec, marks := e.restartSpec("always", fence.RestartAlways, 20*time.Millisecond, 4, "agent", "exit", "1")
	spec.ResumeArgv = []string{exe, "agent", "markexit", marks, "1"}
	if _, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "gave_up", func() bool { return count(e.verdicts(id), verdict.VerdictGaveUp) == 1 })
	recs := e.verdicts(id)
	starts := withReason(recs, verdict.VerdictPublished, verdict.ReasonRestart)
	if len(starts) != 3 || count(recs, verdict.VerdictPublished) != 4 || count(recs, verdict.VerdictEnded) != 4 {
		t.Fatalf("want 4 starts (3 restarts), 4 ends: %v", verdictNames(recs))
	}
	for i, want := range []int64{20, 40, 80} {
		got, _ := starts[i].Evidence["delay_ms"].(json.Number)
		if got.String() != strconv.FormatInt(want, 10) {
			t.Fatalf("restart %d: delay_ms %v, want %d", i+1, starts[i].Evidence["delay_ms"], want)
		}
		if starts[i].Restart == nil || starts[i].Restart.Count != i+1 {
			t.Fatalf("restart %d: count %+v", i+1, starts[i].Restart)
		}
	}
	p := e.published(id)
	if p.Restart.State != fence.RestartGaveUp || p.Restart.Failures != 4 {
		t.Fatalf("fence after giving up: %+v", p.Restart)
	}
	time.Sleep(100 * time.Millisecond) // nothing may start after gave_up (a bound, not a measurement)
	if n := count(e.verdicts(id), verdict.VerdictPublished); n != 4 || lines(marks) != 3 {
		t.Fatalf("started after gave_up: %d published, %d marks", n, lines(marks))
	}
	spec.Argv = []string{exe, "agent", "sleep"}
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil || res.Status != verdict.VerdictPublished || res.Session.Restarts != 0 {
		t.Fatalf("create after gave_up: %+v %v", res, err)
	}
}

// TestRestartVerb: restart ends the running agent (the proven stop) and
// starts the next generation now in the same session, whatever the policy;
// its verdicts say manual_restart.
func TestRestartVerb(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec, marks := e.restartSpec("manual", fence.RestartNever, time.Hour, 5, "agent", "sleep")
	spec.Restart = ""
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	first := 0
	waitFor(t, "first agent", func() bool { first = agentPID(res.Session.PanePID); return first != 0 })
	v, err := e.m.Restart(boundedCtx(t), Ref{Name: res.Session.Name})
	if err != nil || v.Generation != 2 || v.ID != res.Session.ID || v.Name != res.Session.Name {
		t.Fatalf("restart: %+v %v", v, err)
	}
	if liveNonZombie(first) {
		t.Fatalf("first agent %d alive after the restart", first)
	}
	// The agent is counted once it runs; its mark once it wrote it.
	waitFor(t, "resumed agent", func() bool { return len(agentsWith(marks)) == 1 && lines(marks) == 1 })
	recs := e.verdicts(id)
	if len(withReason(recs, verdict.VerdictEnded, verdict.ReasonManualRestart)) != 1 ||
		len(withReason(recs, verdict.VerdictPublished, verdict.ReasonManualRestart)) != 1 {
		t.Fatalf("verdicts: %v", verdictNames(recs))
	}
}

// TestRestartVerbAgentExitsAtOnce: a manual restart whose new agent exits at
// once (its policy's next start an hour away) is answered by the generation
// it started — published, and ended since — not by a later one, and not as a
// failure; with a start limit of 1 its give-up is not a spawn_failed either.
func TestRestartVerbAgentExitsAtOnce(t *testing.T) {
	e := startEnv(t, "", "", false)
	for _, burst := range []int{5, 1} {
		exe, _ := os.Executable()
		id, spec, marks := e.restartSpec(fmt.Sprintf("quick%d", burst), fence.RestartOnFailure, time.Hour, burst, "agent", "exit", "2")
		spec.ResumeArgv = []string{exe, "agent", "markexit", marks, "2"}
		res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "generation 1 ended", func() bool { return count(e.verdicts(id), verdict.VerdictEnded) == 1 })
		v, err := e.m.Restart(boundedCtx(t), Ref{Identity: &id})
		// With a limit of 1, generation 1's end gave up and its session went:
		// the restart starts generation 2 in a new one.
		if err != nil || v.Generation != 2 || (burst > 1 && v.ID != res.Session.ID) {
			t.Fatalf("burst %d: restart: %+v %v, want generation 2 (in %s)", burst, v, err, res.Session.ID)
		}
		waitFor(t, "generation 2 ended", func() bool { return count(e.verdicts(id), verdict.VerdictEnded) == 2 })
		if p := e.published(id); p.Generation != 2 {
			t.Fatalf("burst %d: generation %d published after the restart, want 2 (the next start is an hour away)", burst, p.Generation)
		}
	}
}

// boundedCtx is a request's context for a test: a call that should answer
// at once but waits instead fails the test (with what it waited for) after
// two minutes rather than hanging the package until its timeout.
func boundedCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// serverPID is the private tmux server's pid.
func (e *env) serverPID(t *testing.T) int {
	info, ok := e.census.Info()
	if !ok {
		t.Fatal("census has no server")
	}
	return info.PID
}

// startMany creates n on-failure identities named prefix-i running `agent
// sleep`, resumed as `agent mark FILE`, and returns them with their mark files.
func (e *env) startMany(t *testing.T, prefix string, n int, policy string) ([]fence.Identity, []string, []CreateResult) {
	var ids []fence.Identity
	var marks []string
	var res []CreateResult
	for i := 0; i < n; i++ {
		id, spec, mk := e.restartSpec(prefix+strconv.Itoa(i), policy, 10*time.Millisecond, 5, "agent", "sleep")
		r, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
		for try := 0; err != nil && verdict.CodeOf(err) == verdict.CodeFenceUnavailable && try < 5; try++ {
			// A fence busy beyond its bound on a loaded machine: a client retries.
			r, err = e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
		}
		if err != nil {
			t.Fatal(err)
		}
		ids, marks, res = append(ids, id), append(marks, mk), append(res, r)
	}
	return ids, marks, res
}

// checkServerRestarted: every identity runs generation 2 in a new session,
// started once (one mark, one agent, one server_restart verdict).
func (e *env) checkServerRestarted(t *testing.T, ids []fence.Identity, marks []string, old []CreateResult) {
	for i, id := range ids {
		deadline := time.Now().Add(25 * time.Second)
		waitFor(t, "restarted "+id.SessionID, func() bool {
			if time.Now().After(deadline) {
				deadline = deadline.Add(time.Hour)
				t.Logf("%s: fence %+v restart %+v stopping %+v; agents %v; verdicts %v", id.SessionID, e.published(id),
					e.published(id).Restart, e.published(id).Stopping, agentsWith(marks[i]), verdictNames(e.verdicts(id)))
			}
			p := e.published(id) // an attempt undone under load consumes a generation number
			return p.Generation >= 2 && p.Restart.Restarts == 1 && !p.Ended && len(agentsWith(marks[i])) == 1 && lines(marks[i]) >= 1
		})
	}
	for i, id := range ids {
		recs := e.verdicts(id)
		pub := withReason(recs, verdict.VerdictPublished, verdict.ReasonServerRestart)
		if len(pub) != 1 || lines(marks[i]) != 1 || len(agentsWith(marks[i])) != 1 {
			t.Fatalf("%s: %d server_restart verdicts, %d starts, %d agents: %v", id.SessionID, len(pub),
				lines(marks[i]), len(agentsWith(marks[i])), verdictNames(recs))
		}
		if p := e.published(id); p.SessionName == old[i].Session.Name {
			t.Fatalf("%s: restarted in a session named like the old one", id.SessionID)
		}
	}
}

// TestServerDeathRestarts: kill -9 of the tmux server with 20 running
// on-failure identities: all 20 come back once, in new sessions, with
// resume_argv; a never identity does not.
func TestServerDeathRestarts(t *testing.T) {
	e := startEnv(t, "", "", false)
	ids, marks, old := e.startMany(t, "srv", 20, fence.RestartOnFailure)
	nid, _, _ := e.startMany(t, "never", 1, fence.RestartNever)
	if err := syscall.Kill(e.serverPID(t), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.checkServerRestarted(t, ids, marks, old)
	waitFor(t, "never identity ended", func() bool { return e.published(nid[0]).Ended })
	if p := e.published(nid[0]); p.Generation != 1 || p.Restart.State != "" {
		t.Fatalf("never identity: generation %d, restart state %q", p.Generation, p.Restart.State)
	}
}

// TestRestartAfterDaemonDown: an agent that exits while the daemon is down
// is restarted when the daemon returns, once.
func TestRestartAfterDaemonDown(t *testing.T) {
	e := startEnv(t, "", "", false)
	ids, marks, res := e.startMany(t, "down", 1, fence.RestartOnFailure)
	agent := 0
	waitFor(t, "agent", func() bool { agent = agentPID(res[0].Session.PanePID); return agent != 0 })
	e.close()
	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil { // killed by a signal: a failure
		t.Fatal(err)
	}
	waitFor(t, "agent dead", func() bool { return !liveNonZombie(agent) })
	e2 := startEnv(t, e.home, "", false)
	if err := e2.m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "restarted", func() bool {
		p := e2.published(ids[0])
		return p.Generation >= 2 && p.Restart.Restarts == 1 && !p.Ended && len(agentsWith(marks[0])) == 1 && lines(marks[0]) >= 1
	})
	p := e2.published(ids[0])
	recs := e2.verdicts(ids[0])
	if p.TmuxID != res[0].Session.ID || lines(marks[0]) != 1 || count(recs, verdict.VerdictPublished) != 2 {
		t.Fatalf("after the daemon's return: %s (was %s), %d starts: %v", p.TmuxID, res[0].Session.ID,
			lines(marks[0]), verdictNames(recs))
	}
}

// TestRebootRestarts: a reboot, simulated with the boot id seam (the daemon
// returns on "another boot": its recorded generations' processes are gone
// by definition) and the tmux server and its sessions gone: every running
// on-failure identity comes back once in a new session with resume_argv, a
// never identity does not.
func TestRebootRestarts(t *testing.T) {
	e := startEnv(t, "", "", false)
	ids, marks, old := e.startMany(t, "boot", 5, fence.RestartOnFailure)
	nid, _, _ := e.startMany(t, "bootnever", 1, fence.RestartNever)
	// Each agent has exec'd before the server dies: a hangup racing its exec
	// can still be lost in the exec's last microseconds (agent.go,
	// ttyHungUp), and this test's reboot is not one, so nothing would end an
	// agent that missed it.
	for _, r := range old {
		waitFor(t, "agent exec'd", func() bool { return execedAgent(r.Session.PanePID) })
	}
	e.close()
	// The host goes down: the server and every pane with it.
	if out, err := tmuxtestKill(e); err != nil {
		t.Fatalf("kill-server: %v %s", err, out)
	}
	for _, r := range append(old, CreateResult{}) {
		if r.Session.PanePID != 0 {
			looks := 0
			waitFor(t, "pane process gone", func() bool {
				if !liveNonZombie(r.Session.PanePID) {
					return true
				}
				if looks++; looks == 500 { // ~10 s: say what is left, once
					b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.Session.PanePID))
					t.Logf("pane process %d still there: %q", r.Session.PanePID, b)
				}
				return false
			})
		}
	}
	boot := filepath.Join(e.home, "boot_id")
	if err := os.WriteFile(boot, []byte("00000000-0000-4000-8000-000000000001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(proctreeBootEnv, boot)
	e2 := startEnv(t, e.home, "", false)
	if err := e2.m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	e2.checkServerRestarted(t, ids, marks, old)
	for _, id := range ids {
		var ended *verdict.Record
		for _, r := range e2.verdicts(id) {
			if r.Verdict == verdict.VerdictEnded && r.Session.Generation == 1 {
				ended = &r
			}
		}
		if ended == nil || ended.Reason != verdict.ReasonServerExited || ended.Evidence["proof"] != "another boot" {
			t.Fatalf("%s: ended verdict of generation 1: %+v", id.SessionID, ended)
		}
	}
	waitFor(t, "never identity ended", func() bool { return e2.published(nid[0]).Ended })
	if p := e2.published(nid[0]); p.Generation != 1 {
		t.Fatalf("never identity restarted: generation %d", p.Generation)
	}
}

const proctreeBootEnv = proctree.BootIDFileEnv

func tmuxtestKill(e *env) ([]byte, error) {
	return tmuxtest.Command("-S", e.socket, "kill-server").CombinedOutput()
}

// TestKeptSessionKilledByHand: while an identity waits out its delay, its
// kept session (the dead pane) is listed as exited with the next start; a
// human killing it is a stop: no restart.
func TestKeptSessionKilledByHand(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec, marks := e.restartSpec("byhand", fence.RestartOnFailure, time.Hour, 5, "agent", "exit", "2")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "waiting out the delay", func() bool {
		v, err := e.m.Show(context.Background(), Ref{Name: res.Session.Name})
		return err == nil && v.Session != nil && v.Session.State == StateExited && v.Session.NextStartAt != nil
	})
	// By identity it is the same session (it said "no live session").
	if v, err := e.m.Show(context.Background(), Ref{Identity: &id}); err != nil || v.Session == nil ||
		v.Session.ID != res.Session.ID || v.Session.State != StateExited || v.Session.NextStartAt == nil {
		t.Fatalf("show by identity while waiting: %+v %v", v.Session, err)
	}
	if out, err := execTmux(e, "kill-session", "-t", res.Session.ID); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	waitFor(t, "stopped", func() bool { return e.published(id).Restart.State == fence.RestartStopped })
	if e.published(id).Generation != 1 || lines(marks) != 0 {
		t.Fatal("restarted after its kept session was killed by hand")
	}
	// The cancelled restart is a verdict of its own, after the generation's end.
	if st := withReason(e.verdicts(id), verdict.VerdictStopped, verdict.ReasonTmuxSessionMissing); len(st) != 1 ||
		st[0].Action != verdict.ActionEnd || st[0].Session == nil || st[0].Session.Generation != 1 {
		t.Fatalf("verdicts: %v", verdictNames(e.verdicts(id)))
	}
}

// TestKillWaitingWritesStopped: a kill of an identity waiting out its delay
// stops it for good and says so in a stopped verdict (killed_by_request,
// action kill) — the feed showed only the generation's end before, which
// announced a next start that never came.
func TestKillWaitingWritesStopped(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec, _ := e.restartSpec("killwait", fence.RestartOnFailure, time.Hour, 5, "agent", "exit", "2")
	if _, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "waiting out the delay", func() bool { p := e.published(id); return p.Ended && p.Restart.State == fence.RestartExited })
	kr, err := e.m.Kill(context.Background(), Ref{Identity: &id})
	if err != nil {
		t.Fatal(err)
	}
	recs := e.verdicts(id)
	st := withReason(recs, verdict.VerdictStopped, verdict.ReasonKilledByRequest)
	if len(st) != 1 || st[0].Action != verdict.ActionKill || st[0].Sequence == 0 || e.published(id).Restart.State != fence.RestartStopped {
		t.Fatalf("verdicts: %v", verdictNames(recs))
	}
	if kr.Verdict.Sequence != st[0].Sequence || kr.Verdict.Verdict != verdict.VerdictStopped {
		t.Fatalf("kill answered %s %d, want the stopped verdict %d", kr.Verdict.Verdict, kr.Verdict.Sequence, st[0].Sequence)
	}
}

// TestWaitingListedAfterServerDeath: an identity waiting out its restart
// delay whose kept session went with its server still holds the identity:
// ls, show by name and show by identity list it as exited with its next start
// (it vanished from both until it restarted).
func TestWaitingListedAfterServerDeath(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec, _ := e.restartSpec("gonewait", fence.RestartOnFailure, time.Hour, 5, "agent", "exit", "2")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "waiting out the delay", func() bool { p := e.published(id); return p.Ended && p.Restart.State == fence.RestartExited })
	old := e.serverPID(t)
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the next server's census", func() bool {
		info, ok := e.census.Info()
		return ok && info.PID != old && e.census.Synced()
	})
	other, ospec := e.identity("gonewait-other")
	if _, err := e.m.Create(context.Background(), CreateRequest{Identity: other, Spec: ospec, Wait: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	check := func(what string, v *View) {
		t.Helper()
		if v == nil || v.Name != res.Session.Name || v.State != StateExited || v.NextStartAt == nil || v.Generation != 1 {
			t.Fatalf("%s: %+v, want generation 1 exited with its next start", what, v)
		}
	}
	l, err := e.m.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var listed *View
	for i := range l.Sessions {
		if l.Sessions[i].Name == res.Session.Name {
			listed = &l.Sessions[i]
		}
	}
	check("ls", listed)
	for _, ref := range []Ref{{Name: res.Session.Name}, {Identity: &id}} {
		sh, err := e.m.Show(context.Background(), ref)
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("show %+v", ref), sh.Session)
	}
}

// TestDelaySurvivesDaemonRestart: the next start's due time is in the fence:
// a daemon stopped while an identity waits out its delay leaves no restarter
// behind (Shutdown waits for them), and the next daemon's start schedules it
// at the recorded time, in the kept session.
func TestDelaySurvivesDaemonRestart(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec, marks := e.restartSpec("delay", fence.RestartOnFailure, 1500*time.Millisecond, 5, "agent", "exit", "4")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "waiting", func() bool { return e.published(id).Restart.State == fence.RestartExited })
	due := e.published(id).Restart.Due
	e.close()
	e.m.mu.Lock()
	left := len(e.m.restarters)
	e.m.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d restarters left after Shutdown", left)
	}
	e2 := startEnv(t, e.home, "", false)
	if p := e2.published(id); p.Restart.State != fence.RestartExited || !p.Restart.Due.Equal(due) {
		t.Fatalf("after the restart the fence says %+v, want due %v", p.Restart, due)
	}
	if err := e2.m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "restarted", func() bool {
		p := e2.published(id)
		return p.Generation >= 2 && p.Restart.Restarts == 1 && !p.Ended && len(agentsWith(marks)) == 1 && lines(marks) >= 1
	})
	if p := e2.published(id); p.PublishedAt.Before(due) || p.TmuxID != res.Session.ID {
		t.Fatalf("started at %v (due %v) in %s (kept %s)", p.PublishedAt, due, p.TmuxID, res.Session.ID)
	}
}

// TestInputWhileRestartWaits: a session kept by a restart that waits out its
// delay exists, but its agent does not: input is refused agent_not_running
// (details.restarting), not not_found, and nothing is typed into it.
func TestInputWhileRestartWaits(t *testing.T) {
	e := startEnv(t, "", "", false)
	_, res := e.waitingIdentity(t, "waitinput")
	err := e.m.Input(context.Background(), Ref{Name: res.Session.Name}, Input{Text: "hello"})
	if verdict.CodeOf(err) != verdict.CodeAgentNotRunning {
		t.Fatalf("input while the restart waits: %v, want agent_not_running", err)
	}
}

// TestCreateWhileRestartWaitsReusesKeptSession: a create of an identity that
// waits out its restart delay starts the next generation in the kept
// session (respawn-pane, as the restart would), never in a second session
// beside it (model/saga.pml, -DBUILT_SESSIONS); the wait is over.
func TestCreateWhileRestartWaitsReusesKeptSession(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec, marks := e.restartSpec("createwaits", fence.RestartOnFailure, time.Hour, 5, "agent", "exit", "2")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "waiting out the delay", func() bool { return e.published(id).Restart.State == fence.RestartExited })
	again := spec
	again.Argv = spec.ResumeArgv
	res2, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: again, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Status != verdict.VerdictPublished || res2.Session.ID != res.Session.ID || res2.Session.Name != res.Session.Name {
		t.Fatalf("create while waiting: %s in %s %q, want published in the kept %s %q",
			res2.Status, res2.Session.ID, res2.Session.Name, res.Session.ID, res.Session.Name)
	}
	out, err := execTmux(e, "list-sessions", "-F", "#{@skc-identity}")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if n := strings.Count(string(out), id.Digest()); n != 1 {
		t.Fatalf("%d sessions carry the identity, want 1:\n%s", n, out)
	}
	waitFor(t, "the create's agent runs", func() bool { return len(agentsWith(marks)) == 1 && lines(marks) == 1 })
	if p := e.published(id); p.Ended || p.Generation != 2 || p.TmuxID != res.Session.ID {
		t.Fatalf("after the create the fence says %+v", p)
	}
}

// TestViewCensusBehindNextGeneration: the next generation was published in
// the kept session and the census has not re-read its tags yet (they still
// name the ended one): the session is shown as the new generation, running,
// with its policy — not as a managed session of no state (ls showed state
// null and restart null in that window).
func TestViewCensusBehindNextGeneration(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec, marks := e.restartSpec("behind", fence.RestartOnFailure, 10*time.Millisecond, 5, "agent", "exit", "2")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the restarted agent", func() bool { return lines(marks) == 1 && e.published(id).Restart.Restarts == 1 })
	p := e.published(id)
	s, ok := e.census.ByID(res.Session.ID)
	if !ok || p.Ended || p.TmuxID != res.Session.ID {
		t.Fatalf("census %v, published %+v", ok, p)
	}
	s.Tags = map[string]string{TagIdentity: id.Digest(), TagGeneration: "1"} // as before the restart's tags
	v := e.m.viewOf(&s, &p)
	if v.State != StateRunning || v.Generation != p.Generation || !v.Authoritative || v.Restart != fence.RestartOnFailure || v.Restarts != 1 {
		t.Fatalf("view %+v, want generation %d running, on-failure, restarts 1", v, p.Generation)
	}
}

// TestGiveUpOnFailedStartsRemovesKept: an identity that gives up because its
// next start fails each time (its resume argv cannot start) has its kept
// session removed, as one that gives up at an agent's end does — it was
// left dead in ls, and kill then called it not supervised.
func TestGiveUpOnFailedStartsRemovesKept(t *testing.T) {
	e := startEnv(t, "", "", false)
	// The resume command exists at the create (which checks it) and is
	// removed before the first restart is due (a second later).
	id, spec, _ := e.restartSpec("giveupkept", fence.RestartOnFailure, time.Second, 2, "agent", "exit", "2")
	resume := filepath.Join(t.TempDir(), "resume-agent")
	must(t, os.WriteFile(resume, []byte("#!/bin/sh\nexit 0\n"), 0o700))
	spec.ResumeArgv = []string{resume}
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	must(t, os.Remove(resume))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "gave up", func() bool { return e.published(id).Restart.State == fence.RestartGaveUp })
	waitFor(t, "the kept session removed", func() bool { _, ok := e.census.ByID(res.Session.ID); return !ok })
	recs := e.verdicts(id)
	if n := len(withReason(recs, verdict.VerdictGaveUp, verdict.ReasonStartLimit)); n != 1 {
		t.Fatalf("verdicts: %v", verdictNames(recs))
	}
	// Each refused start is tied to its restart sequence and names the
	// field that could not start.
	failed := 0
	for _, r := range recs {
		if r.Verdict != verdict.VerdictFailed {
			continue
		}
		failed++
		if r.Restart == nil || r.Session == nil || r.Evidence["field"] != "resume_argv" {
			t.Fatalf("failed start %+v: want skc.restart, a session and field resume_argv", r)
		}
	}
	if failed == 0 {
		t.Fatalf("no failed start: %v", verdictNames(recs))
	}
}

// TestKillGaveUpWithKeptSession: a gave-up identity whose session is still
// there (left by an older daemon) is stopped by kill: the session removed,
// a stopped verdict (no next_start_due: no start was announced), and the
// answer is that verdict — not not_found "not supervised".
func TestKillGaveUpWithKeptSession(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec, _ := e.restartSpec("killgaveup", fence.RestartOnFailure, time.Hour, 5, "agent", "exit", "2")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "waiting out the delay", func() bool { p := e.published(id); return p.Ended && p.Restart.State == fence.RestartExited })
	p := e.published(id)
	gaveUp := fence.RestartNext{State: fence.RestartGaveUp, Failures: 5}
	if ok, err := e.store.SetRestart(context.Background(), id, p.Generation, fence.RestartExited, gaveUp, nil); !ok || err != nil {
		t.Fatalf("set gave_up: %v %v", ok, err)
	}
	kr, err := e.m.Kill(context.Background(), Ref{Name: res.Session.Name})
	if err != nil || kr.Verdict.Verdict != verdict.VerdictStopped || kr.Verdict.Evidence["next_start_due"] != nil {
		t.Fatalf("kill: %+v %v, want the stopped verdict without next_start_due", kr, err)
	}
	waitFor(t, "the kept session removed", func() bool { _, ok := e.census.ByID(res.Session.ID); return !ok })
	if st := e.published(id).Restart.State; st != fence.RestartStopped {
		t.Fatalf("restart state %q, want stopped", st)
	}
}

// TestRestartTailIsOwn: a generation restarted in its kept session has only
// its own output in its ended verdict's tail: the previous generation's
// lines stayed in the pane's history across respawn-pane, so a silent
// second run's end quoted the first run.
func TestRestartTailIsOwn(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec, _ := e.restartSpec("owntail", fence.RestartOnFailure, 10*time.Millisecond, 2, "agent", "exit", "2")
	spec.Argv = []string{"/bin/sh", "-c", "echo FROM-GEN-ONE; sleep 0.2; exit 3"}
	spec.ResumeArgv = []string{"/bin/sh", "-c", "sleep 0.2; exit 4"}
	if _, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "gave up", func() bool { return e.published(id).Restart.State == fence.RestartGaveUp })
	tails := map[uint64]string{}
	for _, r := range e.verdicts(id) {
		if r.Verdict == verdict.VerdictEnded && r.Session != nil {
			tails[r.Session.Generation] = r.OutputTail
		}
	}
	if len(tails) != 2 || !strings.Contains(tails[1], "FROM-GEN-ONE") {
		t.Fatalf("ended tails %v: want generation 1's with its line", tails)
	}
	for g, tail := range tails {
		if g != 1 && strings.Contains(tail, "FROM-GEN-ONE") {
			t.Fatalf("generation %d's tail %q quotes generation 1", g, tail)
		}
	}
}

// TestRestartVerbStartFails: a restart request whose next start fails (its
// command was removed since the create) is answered by that failure at once
// — spawn_failed with the start's own reason and when the policy tries
// again — not after the policy's later tries; once the command is back, the
// next request starts it.
func TestRestartVerbStartFails(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec, _ := e.restartSpec("gone", fence.RestartOnFailure, time.Minute, 5)
	script, write := exitScript(t, id)
	spec.Argv, spec.ResumeArgv = []string{script}, nil
	if _, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "generation 1 ended", func() bool { return count(e.verdicts(id), verdict.VerdictEnded) == 1 })
	if err := os.Remove(script); err != nil {
		t.Fatal(err)
	}
	// Bounded: a request waiting for the policy's next try (a minute
	// away, then doubled) fails here instead of hanging the suite.
	ctx := boundedCtx(t)
	_, err := e.m.Restart(ctx, Ref{Identity: &id})
	ve := verdict.AsError(err)
	if ve == nil || ve.Code != verdict.CodeSpawnFailed || ve.Details["reason"] != SpawnExecutableNotFound ||
		ve.Details["next_start_at"] == nil || ve.Details["generation"] != uint64(1) {
		t.Fatalf("restart of a removed command: %v %+v", err, ve)
	}
	if p := e.published(id); p.Restart.State != fence.RestartExited || p.Restart.Failures != 1 {
		t.Fatalf("after the failed start: %+v, want exited with one failure", p.Restart)
	}
	write()
	v, err := e.m.Restart(ctx, Ref{Identity: &id})
	if err != nil || v.Generation <= 1 {
		t.Fatalf("restart with the command back: %+v %v", v, err)
	}
}

// TestLateRemovalKeepsRestartRequest: the end of an agent that gives up
// removes its session, and end detection may handle that removal only after
// a restart request has made the identity wait for its next start again. The
// late change is still our removal (killmarks.go): it must not stop the
// identity as a kept session killed by hand — the race that left a CI run's
// TestRestartVerbAgentExitsAtOnce waiting for a start that never came.
func TestLateRemovalKeepsRestartRequest(t *testing.T) {
	t.Cleanup(func() { removedHook = nil }) // after the env's close: cleanups run last first
	e := startEnv(t, "", "", false)
	id, spec, _ := e.restartSpec("late", fence.RestartOnFailure, time.Hour, 1, "agent", "exit", "2")
	prefix := "skc-" + id.Digest()[:12] + "-"
	hold, held := make(chan struct{}), make(chan struct{}, 1)
	var once sync.Once
	removedHook = func(ch census.Change) {
		if strings.HasPrefix(ch.Session.Name, prefix) {
			once.Do(func() { held <- struct{}{}; <-hold })
		}
	}
	if _, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "generation 1 gave up", func() bool { return count(e.verdicts(id), verdict.VerdictGaveUp) == 1 })
	<-held // its session is gone; end detection has not handled that yet
	p := e.published(id)
	due := fence.RestartNext{State: fence.RestartExited, Reason: verdict.ReasonManualRestart}
	if ok, err := e.store.SetRestart(context.Background(), id, p.Generation, fence.RestartGaveUp, due, nil); !ok || err != nil {
		t.Fatalf("restart request's due start: %v %v", ok, err)
	}
	close(hold)
	// The held change handled, the identity still waits for that start.
	waitFor(t, "the removal handled", func() bool {
		_, marked := e.m.killingReason(e.m.lifeOf(p.ServerPID, p.ServerStart), p.TmuxID)
		return !marked
	})
	if p := e.published(id); p.Restart.State != fence.RestartExited || count(e.verdicts(id), verdict.VerdictStopped) != 0 {
		t.Fatalf("after the late removal: %+v, verdicts %v", p.Restart, verdictNames(e.verdicts(id)))
	}
}
