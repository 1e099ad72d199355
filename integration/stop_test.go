package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The agents of these tests are this test binary (SKC_IT_HELPER=stopagent),
// argv: ROLE TAG MARK BEHAVIOUR [ARG]. ROLE is "agent" or "child", TAG names
// the generation ("g1", "g2"), MARK the test. Behaviours:
//   - slowhup MS: on SIGHUP or SIGTERM, ignore further ones, save state for MS
//     milliseconds and exit 0 (what a real agent does on a hangup);
//   - ignore: ignore SIGHUP and SIGTERM, run until SIGKILLed;
//   - child-pgrp / child-setsid: slowhup 3000, and first start a child that
//     ignores SIGHUP and SIGTERM in a process group (or session) of its own.
func runStopAgent(args []string) int {
	if len(args) < 4 {
		return 2
	}
	role, tag, mark, behaviour := args[0], args[1], args[2], args[3]
	sigs := make(chan os.Signal, 4)
	switch behaviour {
	case "ignore":
		signal.Ignore(syscall.SIGHUP, syscall.SIGTERM)
		markReady()
		for {
			time.Sleep(time.Hour) // not select {}: the runtime would call that a deadlock and exit
		}
	case "child-pgrp", "child-setsid":
		exe, _ := os.Executable()
		c := exec.Command(exe, "child", tag, mark, "ignore")
		c.Env = os.Environ()
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: behaviour == "child-pgrp", Setsid: behaviour == "child-setsid"}
		if err := c.Start(); err != nil {
			return 3
		}
		_ = c.Process.Release() // it outlives us on purpose
		args = []string{role, tag, mark, "slowhup", "3000"}
	}
	ms := 3000
	if len(args) > 4 {
		ms, _ = strconv.Atoi(args[4])
	}
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM)
	markReady()
	<-sigs
	signal.Ignore(syscall.SIGHUP, syscall.SIGTERM)
	time.Sleep(time.Duration(ms) * time.Millisecond) // "saving state": the agent's own time, not a test wait
	return 0
}

// readyComm is the name an agent gives itself once its signal handling is in
// place: before that a hangup would kill it by the default action, and a test
// that signals it must wait for it (the name is visible in /proc/PID/comm).
const readyComm = "stopagent-ready"

// markReady renames the process's main thread (any thread of a group may
// rename another through /proc/self/task/TID/comm).
func markReady() {
	_ = os.WriteFile(fmt.Sprintf("/proc/self/task/%d/comm", os.Getpid()), []byte(readyComm), 0)
}

// isReady reports whether pid has marked itself ready.
func isReady(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.TrimSpace(string(b)) == readyComm
}

// markProc is one live process of a test's agents, as the sampler sees it.
type markProc struct {
	pid             int
	role, tag, mark string
}

// kill sends SIGKILL to p if it still is p: a pid whose process ended may
// already be another test's process (pid_max is 32768 here, and a parallel
// run wraps it), so the argv must still carry the test's unique mark.
func (p markProc) kill() {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pid))
	if err != nil || !bytes.Contains(b, []byte(p.mark)) {
		return
	}
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
}

// markProcs lists the live (non-zombie) processes whose argv carries mark.
func markProcs(mark string) []markProc {
	ents, _ := os.ReadDir("/proc")
	var out []markProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(b, []byte(mark)) {
			continue
		}
		f := strings.Split(string(b), "\x00")
		if len(f) < 5 || f[3] != mark || isZombie(pid) {
			continue
		}
		out = append(out, markProc{pid: pid, role: f[1], tag: f[2], mark: mark})
	}
	return out
}

// sampler watches /proc until stopped and records every moment at which
// processes of two generations of the test's identity were alive at once: the central promise, checked on processes, not verdicts.
type sampler struct {
	mark string
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	bad  []string
	seen map[string]bool // tags seen alive
}

func startSampler(t *testing.T, mark string) *sampler {
	s := &sampler{mark: mark, stop: make(chan struct{}), done: make(chan struct{}), seen: map[string]bool{}}
	go s.run()
	t.Cleanup(s.halt)
	return s
}

func (s *sampler) run() {
	defer close(s.done)
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		ps := markProcs(s.mark)
		tags := map[string]bool{}
		for _, p := range ps {
			tags[p.tag] = true
		}
		s.mu.Lock()
		for tg := range tags {
			s.seen[tg] = true
		}
		// Two agent processes of one tag are a fork about to exec its child
		// (the child has the parent's argv until then): only generations count.
		if len(tags) > 1 {
			s.bad = append(s.bad, fmt.Sprintf("%v", ps))
		}
		s.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
}

func (s *sampler) halt() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// check stops the sampler and fails t if two generations ever overlapped.
func (s *sampler) check(t *testing.T) {
	t.Helper()
	// The test saw generation 2 run; let the sampler catch up with it (it
	// samples in its own time) before it stops.
	WaitFor(t, waitDeadline, "the sampler to see generation 2", func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.seen["g2"] {
			return errorf("not yet")
		}
		return nil
	})
	s.halt()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.bad) > 0 {
		t.Errorf("%d samples with two generations (or agents) alive at once, first: %s", len(s.bad), s.bad[0])
	}
	if !s.seen["g1"] || !s.seen["g2"] {
		t.Errorf("the sampler saw generations %v, want g1 and g2", s.seen)
	}
}

// stopSpec is a spec whose agent is this test binary with behaviour.
func stopSpec(t *testing.T, id, tag, mark string, behaviour ...string) Spec {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := NewSpec(t, id)
	s.Env = []string{"SKC_IT_HELPER=stopagent"}
	s.Argv = append([]string{exe, "agent", tag, mark}, behaviour...)
	s.Wait = "90s"
	return s
}

// waitTag waits until a process of generation tag runs, with its signal
// handling in place, and returns it.
func waitTag(t *testing.T, mark, tag, role string) markProc {
	t.Helper()
	var got markProc
	WaitFor(t, waitDeadline, tag+" "+role+" running", func() error {
		for _, p := range markProcs(mark) {
			if p.tag == tag && p.role == role && isReady(p.pid) {
				got = p
				return nil
			}
		}
		return errorf("no %s %s", tag, role)
	})
	return got
}

// secondGeneration creates generation 2 of spec's identity (a new argv tag) and
// checks that generation 1's processes were gone when it was answered.
// A generation 2 that ignores the hangup is given a short grace (flags) and
// killed at the end, so the test leaves nothing behind.
func secondGeneration(t *testing.T, d *Daemon, spec Spec, mark string, flags ...string) Session {
	t.Helper()
	spec.Argv[2] = "g2"
	s := createWith(t, d, spec, flags...)
	if len(flags) > 0 {
		t.Cleanup(func() { d.CLI(t, "kill", s.Name) })
	}
	for _, p := range markProcs(mark) {
		if p.tag == "g1" {
			t.Errorf("generation 2 published while generation 1's %s %d is alive", p.role, p.pid)
		}
	}
	waitTag(t, mark, "g2", "agent")
	return s
}

func stopMark(t *testing.T) string {
	return "MARK-" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()) + "-" + strconv.Itoa(os.Getpid())
}

// TestStopKilledByHand: a session killed by hand whose agent takes 3 s to obey
// the hangup stays stopping; the next create waits for the agent to be gone.
func TestStopKilledByHand(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	mark := stopMark(t)
	smp := startSampler(t, mark)
	spec := stopSpec(t, "byhand", "g1", mark, "slowhup", "3000")
	s := d.MustCreate(t, spec, "published")
	waitTag(t, mark, "g1", "agent")
	if _, err := d.Tmux("kill-session", "-t", s.ID); err != nil {
		t.Fatal(err)
	}
	secondGeneration(t, d, spec, mark)
	smp.check(t)
	v := d.WaitVerdict(t, "ended verdict of "+s.Name, endedFor(s.Name))
	// The agent saved and exited 0, but its session was gone by then: only
	// tmux could wait for it (the pane's process is the agent, tmux's child),
	// and tmux keeps no status for a pane it no longer has.
	if v.Event.Reason != "tmux_session_missing" || v.SKC.ExitKind != "owner_lost" || v.SKC.Exit == nil ||
		v.SKC.Exit.Status != nil || v.SKC.Exit.Signal != "" {
		t.Errorf("ended verdict %s: want tmux_session_missing, owner_lost, exit unknown", v)
	}
}

// TestStopByKillVerb: `kill` sends SIGTERM, returns only once the agent is gone,
// with the agent's exit in its verdict.
func TestStopByKillVerb(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	mark := stopMark(t)
	smp := startSampler(t, mark)
	spec := stopSpec(t, "bykill", "g1", mark, "slowhup", "2000")
	s := d.MustCreate(t, spec, "published")
	agent := waitTag(t, mark, "g1", "agent")
	r := d.CLI(t, "kill", "--json", s.Name)
	if r.Code != 0 {
		t.Fatalf("kill: want exit 0\n%s", r)
	}
	if alive(agent.pid) {
		t.Errorf("kill returned while the agent %d is alive", agent.pid)
	}
	var kr struct {
		Status  string  `json:"status"`
		Verdict Verdict `json:"verdict"`
	}
	mustJSON(t, r, &kr)
	v := kr.Verdict
	if v.Event.Reason != "killed_by_request" || v.SKC.ExitKind != "cleanup" || v.SKC.Exit == nil ||
		v.SKC.Exit.Status == nil || *v.SKC.Exit.Status != 0 {
		t.Errorf("kill verdict %s: want killed_by_request, cleanup, skc.exit.status 0", r.Stdout)
	}
	secondGeneration(t, d, spec, mark)
	smp.check(t)
}

// TestStopServerDeath: kill -9 of the tmux server hangs up every pane; the
// next create (on a new server) waits for generation 1's agent.
func TestStopServerDeath(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	mark := stopMark(t)
	smp := startSampler(t, mark)
	spec := stopSpec(t, "srvdeath", "g1", mark, "slowhup", "3000")
	s := d.MustCreate(t, spec, "published")
	waitTag(t, mark, "g1", "agent")
	pid, ok := d.liveServerPID()
	if !ok {
		t.Fatal("no tmux server")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	secondGeneration(t, d, spec, mark)
	smp.check(t)
	v := d.WaitVerdict(t, "ended verdict of "+s.Name, endedFor(s.Name))
	if v.Event.Reason != "server_exited" {
		t.Errorf("ended verdict %s: want server_exited", v)
	}
}

// TestStopDaemonKilledDuringGrace: the daemon is SIGKILLed while it waits out
// the grace of an agent that ignores the hangup; the next daemon continues the
// stop (SIGKILL at the recorded deadline) and only then lets generation 2 start.
func TestStopDaemonKilledDuringGrace(t *testing.T) {
	t.Parallel()
	h := NewHome(t)
	d := h.Start(t, DaemonOpts{})
	mark := stopMark(t)
	smp := startSampler(t, mark)
	spec := stopSpec(t, "grace", "g1", mark, "ignore")
	s := createWith(t, d, spec, "--stop-timeout", "4s")
	waitTag(t, mark, "g1", "agent")
	if _, err := d.Tmux("kill-session", "-t", s.ID); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, waitDeadline, "the generation stopping in the fence", func() error {
		if !fenceStopping(t, d, spec) {
			return errorf("not stopping yet")
		}
		return nil
	})
	d.Kill(t)
	if len(markProcs(mark)) == 0 {
		t.Fatal("the agent is gone already: the daemon was not killed during the grace")
	}
	d2 := h.Start(t, DaemonOpts{})
	secondGeneration(t, d2, spec, mark, "--stop-timeout", "100ms")
	smp.check(t)
	v := d2.WaitVerdict(t, "ended verdict of "+s.Name, endedFor(s.Name))
	if v.SKC.Evidence["sigkill_sent"] != true {
		t.Errorf("ended verdict %s: want sigkill_sent (the agent ignores the hangup)", v)
	}
}

// TestStopFoundByRestartedDaemon: the session is killed by hand while no daemon
// runs; the restarted daemon finds it gone while its agent still saves state,
// and generation 2 waits for it.
func TestStopFoundByRestartedDaemon(t *testing.T) {
	t.Parallel()
	h := NewHome(t)
	d := h.Start(t, DaemonOpts{})
	mark := stopMark(t)
	smp := startSampler(t, mark)
	spec := stopSpec(t, "restarted", "g1", mark, "slowhup", "4000")
	s := d.MustCreate(t, spec, "published")
	waitTag(t, mark, "g1", "agent")
	d.Stop(t)
	if _, err := h.Tmux("kill-session", "-t", s.ID); err != nil {
		t.Fatal(err)
	}
	d2 := h.Start(t, DaemonOpts{})
	secondGeneration(t, d2, spec, mark)
	smp.check(t)
}

// TestStopIgnoringAgentIsKilled: an agent that ignores SIGHUP and SIGTERM is
// SIGKILLed once stop_timeout_ms has passed; `kill` then answers with it.
func TestStopIgnoringAgentIsKilled(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	mark := stopMark(t)
	smp := startSampler(t, mark)
	spec := stopSpec(t, "ignorer", "g1", mark, "ignore")
	s := createWith(t, d, spec, "--stop-timeout", "500ms")
	if s.StopTimeoutMS != 500 || s.State != "running" {
		t.Errorf("created session %+v: want stop_timeout_ms 500, state running", s)
	}
	waitTag(t, mark, "g1", "agent")
	r := d.CLI(t, "kill", "--json", s.Name)
	if r.Code != 0 {
		t.Fatalf("kill: want exit 0\n%s", r)
	}
	var kr struct{ Verdict Verdict }
	mustJSON(t, r, &kr)
	v := kr.Verdict
	if v.SKC.Evidence["sigkill_sent"] != true || v.SKC.Exit == nil || v.SKC.Exit.Signal != "SIGKILL" {
		t.Errorf("kill verdict %s: want sigkill_sent and exit.signal SIGKILL", r.Stdout)
	}
	since, _ := v.SKC.Evidence["stop_since"].(string)
	at, err2 := time.Parse(time.RFC3339Nano, v.Timestamp)
	if st, err := time.Parse(time.RFC3339Nano, since); err != nil || err2 != nil || !st.Before(at) {
		t.Errorf("kill verdict %s: the stop must begin before the verdict", r.Stdout)
	}
	secondGeneration(t, d, spec, mark, "--stop-timeout", "100ms")
	smp.check(t)
}

// TestStopChildLeavesGroup and TestStopChildLeavesSession: a child of the agent
// in a process group, or a session, of its own (ignoring every polite signal)
// is no less generation 1's: none is alive when generation 2 starts.
func TestStopChildLeavesGroup(t *testing.T)   { testStopChild(t, "child-pgrp") }
func TestStopChildLeavesSession(t *testing.T) { testStopChild(t, "child-setsid") }

func testStopChild(t *testing.T, behaviour string) {
	t.Parallel()
	if behaviour == "child-setsid" && !cgroupsHere() {
		t.Skip("no writable cgroup v2 here: a descendant that leaves its session escapes (docs/architecture.md)")
	}
	d := StartDaemon(t, DaemonOpts{})
	mark := stopMark(t)
	smp := startSampler(t, mark)
	spec := stopSpec(t, behaviour, "g1", mark, behaviour)
	s := createWith(t, d, spec, "--stop-timeout", "2s")
	waitTag(t, mark, "g1", "child")
	if _, err := d.Tmux("kill-session", "-t", s.ID); err != nil {
		t.Fatal(err)
	}
	secondGeneration(t, d, spec, mark, "--stop-timeout", "100ms")
	smp.check(t)
}

// TestAgentExitedWithRemainOnExitOff: with a server config that turns
// remain-on-exit off globally, an agent's own exit is still agent_exited, and
// the dead session is removed.
func TestAgentExitedWithRemainOnExitOff(t *testing.T) {
	t.Parallel()
	conf := filepath.Join(t.TempDir(), "tmux.conf")
	if err := os.WriteFile(conf, []byte("set -g remain-on-exit off\nset -gw remain-on-exit off\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := StartDaemon(t, DaemonOpts{Env: []string{"SKC_TMUX_CONFIG=" + conf}})
	spec := NewSpec(t, "exits")
	spec.Argv = []string{"/bin/sh", "-c", "exit 3"}
	s := d.MustCreate(t, spec, "published")
	v := d.WaitVerdict(t, "ended verdict of "+s.Name, endedFor(s.Name))
	if v.Event.Reason != "agent_exited" || v.SKC.ExitKind != "exit" || v.SKC.Exit == nil ||
		v.SKC.Exit.Status == nil || *v.SKC.Exit.Status != 3 {
		t.Errorf("ended verdict %s: want agent_exited, exit, status 3", v)
	}
	WaitFor(t, waitDeadline, "the dead session removed", func() error {
		for _, ts := range d.TmuxSessions(t) {
			if ts.ID == s.ID {
				return errorf("session %s still there", s.ID)
			}
		}
		return nil
	})
}

// createWith creates spec with extra create flags (before the --).
func createWith(t *testing.T, d *Daemon, spec Spec, flags ...string) Session {
	t.Helper()
	r := d.CLI(t, withFlags(spec.Args(), flags...)...)
	var a Answer
	mustJSON(t, r, &a)
	if r.Code != 0 || a.Status != "published" || a.Session == nil {
		t.Fatalf("create: want published\n%s", r)
	}
	d.NoteSession(t)
	return *a.Session
}

// ignoringGeneration creates identity id whose agent ignores the hangup and
// SIGTERM, with the given --stop-timeout, and waits for its agent: a
// generation whose stop waits out its grace.
func ignoringGeneration(t *testing.T, d *Daemon, id, stopTimeout string) (Spec, Session, markProc) {
	t.Helper()
	mark := stopMark(t)
	spec := stopSpec(t, id, "g1", mark, "ignore")
	s := createWith(t, d, spec, "--stop-timeout", stopTimeout)
	return spec, s, waitTag(t, mark, "g1", "agent")
}

// withFlags puts flags into create arguments, before the "--".
func withFlags(args []string, flags ...string) []string {
	i := 0
	for i < len(args) && args[i] != "--" {
		i++
	}
	return append(append(append([]string{}, args[:i]...), flags...), args[i:]...)
}

// fenceStopping reports whether `fence --json` shows spec's identity stopping.
func fenceStopping(t *testing.T, d *Daemon, spec Spec) bool {
	r := d.CLI(t, "fence", "--json")
	var f struct {
		Identities []struct {
			SessionID string          `json:"session_id"`
			Stopping  json.RawMessage `json:"stopping"`
		} `json:"identities"`
	}
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &f) != nil {
		return false
	}
	for _, id := range f.Identities {
		if id.SessionID == spec.SessionID && len(id.Stopping) > 0 && string(id.Stopping) != "null" {
			return true
		}
	}
	return false
}

// cgroupsHere: a cgroup v2 hierarchy this (root) test can write, as the
// daemon's detection would find it.
func cgroupsHere() bool {
	for _, m := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(m, "cgroup.procs")); err == nil && syscall.Access(m, 2) == nil {
			if _, err := os.Stat(filepath.Join(m, "cgroup.subtree_control")); err == nil {
				return true
			}
		}
	}
	return false
}

// TestStopFlagsAndFenceReleaseCLI: --stop-timeout's bounds, and `fence release`
// refusing a running generation (exit 3), an unknown id (exit 4) and a missing
// flag (exit 2).
func TestStopFlagsAndFenceReleaseCLI(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	spec := NewSpec(t, "flags")
	for _, bad := range []string{"0s", "6m"} {
		r := d.CLI(t, withFlags(spec.Args(), "--stop-timeout", bad)...)
		var a Answer
		mustJSON(t, r, &a)
		if r.Code != 2 || a.Field() != "stop_timeout_ms" {
			t.Errorf("create --stop-timeout %s: want exit 2, field stop_timeout_ms\n%s", bad, r)
		}
	}
	s := createWith(t, d, spec, "--stop-timeout", "2s")
	if s.StopTimeoutMS != 2000 || s.State != "running" {
		t.Errorf("session %+v: want stop_timeout_ms 2000, state running", s)
	}
	r := d.CLI(t, "fence", "--json")
	var f struct {
		Identities []struct {
			SessionID     string `json:"session_id"`
			ReservationID string `json:"reservation_id"`
			StopTimeoutMS int64  `json:"stop_timeout_ms"`
		} `json:"identities"`
	}
	mustJSON(t, r, &f)
	var resID string
	for _, id := range f.Identities {
		if id.SessionID == spec.SessionID {
			resID = id.ReservationID
		}
	}
	if resID == "" {
		t.Fatalf("no identity in fence --json\n%s", r)
	}
	if r := d.CLI(t, "fence", "release", "--json", "--reservation", resID); r.Code != 3 ||
		!strings.Contains(r.Stdout, "identity_reserved_live") {
		t.Errorf("release of a running generation: want exit 3 identity_reserved_live\n%s", r)
	}
	if r := d.CLI(t, "fence", "release", "--json", "--reservation", strings.Repeat("0", 32)); r.Code != 4 {
		t.Errorf("release of an unknown reservation: want exit 4\n%s", r)
	}
	if r := d.CLI(t, "fence", "release", "--json"); r.Code != 2 {
		t.Errorf("release without --reservation: want exit 2\n%s", r)
	}
	if r := d.CLI(t, "kill", s.Name); r.Code != 0 {
		t.Errorf("kill: %s", r)
	}
}

// TestAttachStoppingAfterServerDeath: a generation left stopping by its
// server's death is shown with the tmux id it had, which the new server may
// give another identity's session: attach refuses it (not_found, exit 4)
// instead of putting a person in that other agent's terminal.
func TestAttachStoppingAfterServerDeath(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	spec, s, agent := ignoringGeneration(t, d, "attachstop", "120s")
	defer agent.kill() // the stop would wait 120 s for it
	pid, ok := d.liveServerPID()
	if !ok {
		t.Fatal("no tmux server")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, waitDeadline, "the generation stopping in the fence", func() error {
		if !fenceStopping(t, d, spec) {
			return errorf("not stopping yet")
		}
		return nil
	})
	other := NewSpec(t, "attachstop-other")
	other.Argv = []string{"sleep", "1000"}
	o := d.CreateAfterServerDeath(t, other) // on the new server; its id may be s.ID
	t.Logf("stopping generation's id %s, the new session's %s", s.ID, o.ID)
	for _, args := range [][]string{{"attach", s.Name}, {"attach", "--state-dir", spec.StateDir, "--session-id", spec.SessionID}} {
		r := d.CLI(t, args...)
		if r.Code != 4 || !strings.Contains(r.Stderr, "stopping") {
			t.Errorf("%v: want exit 4 (not_found) saying the generation is stopping\n%s", args, r)
		}
	}
}

// TestAttachWaitingAfterServerDeath: an identity waiting out its restart
// delay whose kept session went with its server is listed as exited with the
// tmux id it had; attach refuses it (exit 4) rather than follow that id to
// whatever session a newer server gave it.
func TestAttachWaitingAfterServerDeath(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	spec := NewSpec(t, "attachwait")
	spec.Argv = []string{"/bin/sh", "-c", "exit 2"}
	s := createWith(t, d, spec, "--restart", "on-failure", "--restart-delay", "60s")
	WaitFor(t, waitDeadline, "the identity waiting for its restart", func() error {
		if r := d.CLI(t, "show", "--json", s.Name); !strings.Contains(r.Stdout, `"state":"exited"`) {
			return errorf("not exited yet: %s", r.Stdout)
		}
		return nil
	})
	pid, ok := d.liveServerPID()
	if !ok {
		t.Fatal("no tmux server")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	other := NewSpec(t, "attachwait-other")
	other.Argv = []string{"sleep", "1000"}
	o := d.CreateAfterServerDeath(t, other)
	t.Logf("waiting generation's id %s, the new session's %s", s.ID, o.ID)
	if r := d.CLI(t, "show", "--json", s.Name); r.Code != 0 || !strings.Contains(r.Stdout, `"state":"exited"`) {
		t.Errorf("show of the waiting identity after its server died: want it exited\n%s", r)
	}
	if r := d.CLI(t, "attach", s.Name); r.Code != 4 || !strings.Contains(r.Stderr, "is gone") {
		t.Errorf("attach: want exit 4 (not_found) saying its session is gone\n%s", r)
	}
}

// TestAttachStoppingSessionKilledByHand: a generation stopping after its
// session was killed by hand (its agent ignores the hangup) is named by the
// id ls shows, but has nothing to attach to: attach by that id, by name and
// by identity is not_found (4) saying it is stopping — never tmux's own
// "can't find session".
func TestAttachStoppingSessionKilledByHand(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	spec, s, agent := ignoringGeneration(t, d, "attachhand", "120s")
	defer agent.kill() // the stop would wait 120 s for it
	if out, err := d.Tmux("kill-session", "-t", s.ID); err != nil {
		t.Fatalf("kill-session: %v %s", err, out)
	}
	WaitFor(t, waitDeadline, "the generation stopping in the fence", func() error {
		if !fenceStopping(t, d, spec) {
			return errorf("not stopping yet")
		}
		return nil
	})
	if r := d.CLI(t, "show", "--json", s.ID); r.Code != 0 || !strings.Contains(r.Stdout, `"state":"stopping"`) {
		t.Errorf("show %s: want the stopping generation\n%s", s.ID, r)
	}
	for _, args := range [][]string{{"attach", s.ID}, {"attach", s.Name}, {"attach", "--state-dir", spec.StateDir, "--session-id", spec.SessionID}} {
		r := d.CLI(t, args...)
		if r.Code != 4 || !strings.Contains(r.Stderr, "stopping") {
			t.Errorf("%v: want exit 4 (not_found) saying the generation is stopping\n%s", args, r)
		}
	}
}
