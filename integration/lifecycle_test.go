package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func endedFor(name string) func(Verdict) bool {
	return func(v Verdict) bool { return v.SKC.Verdict == "ended" && v.SessionName() == name }
}

// TestEndExitStatus: an agent that exits 7 ends in one ended verdict with
// exit_kind exit and exit.status 7; the identity can then be created again.
func TestEndExitStatus(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	spec := NewSpec(t, "exit-7")
	spec.Argv = []string{"/bin/sh", "-c", "exit 7"}
	s := d.MustCreate(t, spec, "published")
	v := d.WaitVerdict(t, "ended verdict of "+s.Name, endedFor(s.Name))
	if v.SKC.ExitKind != "exit" || v.SKC.Exit == nil || v.SKC.Exit.Status == nil ||
		*v.SKC.Exit.Status != 7 || v.SKC.Exit.Signal != "" || v.SKC.Session.Generation != s.Generation {
		t.Errorf("ended verdict %s: want exit_kind exit, exit.status 7, signal \"\", generation %d", v, s.Generation)
	}
	spec.Argv = []string{"sleep", "1000"}
	again := d.MustCreate(t, spec, "published")
	if again.Generation != s.Generation+1 || again.Name == s.Name {
		t.Errorf("re-create after the end: %+v, want a new session with generation %d", again, s.Generation+1)
	}
	if n := countVerdicts(d.Verdicts(t), endedFor(s.Name)); n != 1 {
		t.Errorf("%d ended verdicts for %s, want exactly 1", n, s.Name)
	}
}

// TestEndSignal: an agent killed by SIGKILL ends with exit.signal SIGKILL.
func TestEndSignal(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	spec := NewSpec(t, "sig-kill")
	s := d.MustCreate(t, spec, "published")
	agent := waitAgent(t, s.PanePID, "sleep")
	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	v := d.WaitVerdict(t, "ended verdict of "+s.Name, endedFor(s.Name))
	if v.SKC.ExitKind != "exit" || v.SKC.Exit == nil || v.SKC.Exit.Signal != "SIGKILL" || v.SKC.Exit.Status != nil {
		t.Errorf("ended verdict %s: want exit_kind exit, exit.signal SIGKILL, exit.status null", v)
	}
}

// waitAgent waits until the pane runs the agent (the pane's process itself
// once the helper has exec'd it, or a descendant named comm) and returns its pid.
func waitAgent(t testing.TB, panePID int, comm string) int {
	t.Helper()
	var pid int
	WaitFor(t, waitDeadline, "the agent "+comm+" in pane pid", func() error {
		if pid = descendantNamed(panePID, comm); pid == 0 {
			return errorf("no %s at or under %d", comm, panePID)
		}
		return nil
	})
	return pid
}

// TestNoProcessOfOursInSession: once its agent runs, no process in a
// session's process tree runs our binary: the pane's process is the agent
// itself (the helper exec'd it, same pid), and the agent holds no descriptor
// of the fence. The tree is walked in /proc from the pane's pid, children
// recursively.
func TestNoProcessOfOursInSession(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	ours, err := os.Stat(needBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	started := filepath.Join(t.TempDir(), "started")
	spec := NewSpec(t, "no-helper")
	spec.Env = []string{"STARTED=" + started}
	spec.Argv = []string{"/bin/sh", "-c", `sleep 1000 & sleep 1000 & : > "$STARTED"; wait`}
	s := d.MustCreate(t, spec, "published")
	WaitFor(t, waitDeadline, "the agent to start", func() error {
		_, err := os.Stat(started)
		return err
	})
	tree := processTree(s.PanePID)
	if len(tree) < 3 {
		t.Fatalf("process tree of pane pid %d: %v, want the shell and its two sleeps", s.PanePID, tree)
	}
	for _, pid := range tree {
		exe, err := os.Stat(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil {
			t.Fatalf("pid %d of the session: %v", pid, err)
		}
		if os.SameFile(exe, ours) {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			t.Errorf("pid %d in the session runs our binary: %q", pid, cmd)
		}
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		for _, fd := range fds {
			if l, _ := os.Readlink(fd); strings.HasPrefix(l, d.Dir) {
				t.Errorf("pid %d in the session holds %s open (%s)", pid, l, fd)
			}
		}
	}
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", s.PanePID)); strings.TrimSpace(string(comm)) != "sh" {
		t.Errorf("pane pid %d runs %q, want the agent (sh) itself", s.PanePID, comm)
	}
}

// processTree is pid and all its descendants.
func processTree(pid int) []int {
	out := []int{pid}
	for _, c := range children(pid) {
		out = append(out, processTree(c)...)
	}
	return out
}

// TestEndWhileDaemonKilled: agents that end while the daemon is SIGKILLed —
// one exits 5, one dies of SIGUSR1 — leave their panes dead (remain-on-exit)
// with that status and that signal; the next daemon writes both into their
// ended verdicts (exit_kind process_postmortem) and removes the sessions.
func TestEndWhileDaemonKilled(t *testing.T) {
	t.Parallel()
	h := NewHome(t)
	d := h.Start(t, DaemonOpts{})
	dir := t.TempDir()
	started, goFile := filepath.Join(dir, "started"), filepath.Join(dir, "go")
	exits := NewSpec(t, "down-exit")
	exits.Env = []string{"STARTED=" + started, "GO_FILE=" + goFile}
	exits.Argv = []string{"/bin/sh", "-c", `: > "$STARTED"; while [ ! -e "$GO_FILE" ]; do sleep 0.05; done; exit 5`}
	se := d.MustCreate(t, exits, "published")
	signalled := NewSpec(t, "down-signal")
	signalled.Argv = []string{"sleep", "1000"}
	ss := d.MustCreate(t, signalled, "published")
	WaitFor(t, waitDeadline, "the first agent to start", func() error {
		_, err := os.Stat(started)
		return err
	})
	agent := waitAgent(t, ss.PanePID, "sleep")
	if agent != ss.PanePID {
		t.Fatalf("agent pid %d, want the pane's pid %d (the helper execs it)", agent, ss.PanePID)
	}
	d.Kill(t)
	if err := os.WriteFile(goFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(agent, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{se.PanePID, ss.PanePID} {
		WaitFor(t, waitDeadline, "the agent to end", func() error {
			if alive(pid) {
				return errorf("pane pid %d alive", pid)
			}
			return nil
		})
	}
	d2 := h.Start(t, DaemonOpts{})
	v := d2.WaitVerdict(t, "ended verdict of "+se.Name, endedFor(se.Name))
	if v.SKC.ExitKind != "process_postmortem" || v.SKC.Exit == nil || v.SKC.Exit.Status == nil ||
		*v.SKC.Exit.Status != 5 || v.SKC.Exit.Signal != "" {
		t.Errorf("ended verdict %s: want exit_kind process_postmortem, exit.status 5", v)
	}
	v = d2.WaitVerdict(t, "ended verdict of "+ss.Name, endedFor(ss.Name))
	if v.SKC.ExitKind != "process_postmortem" || v.SKC.Exit == nil || v.SKC.Exit.Status != nil ||
		v.SKC.Exit.Signal != "SIGUSR1" {
		t.Errorf("ended verdict %s: want exit_kind process_postmortem, exit.signal SIGUSR1, status null", v)
	}
	WaitFor(t, waitDeadline, "the ended sessions removed", func() error {
		for _, ls := range d2.List(t).Sessions {
			if ls.Name == se.Name || ls.Name == ss.Name {
				return errorf("ls still lists the ended session %+v", ls)
			}
		}
		return nil
	})
}

// TestRestartAdoption: sessions survive SIGTERM of the daemon; a new daemon lists
// them as managed and authoritative, answers existing, and the verdict sequence
// continues by one across the restart.
func TestRestartAdoption(t *testing.T) {
	t.Parallel()
	h := NewHome(t)
	d := h.Start(t, DaemonOpts{})
	specs := []Spec{NewSpec(t, "adopt-a"), NewSpec(t, "adopt-b")}
	var sess []Session
	for _, sp := range specs {
		sess = append(sess, d.MustCreate(t, sp, "published"))
	}
	d.Stop(t)
	for _, s := range sess {
		if !alive(s.PanePID) {
			t.Errorf("session %s's pane process %d died with the daemon", s.Name, s.PanePID)
		}
	}
	if n := len(h.AgentSessions(t)); n != 2 {
		t.Errorf("tmux has %d agent sessions after the daemon stopped, want 2", n)
	}

	d2 := h.Start(t, DaemonOpts{})
	// Ready means the census has synced: the first ls already lists them.
	l := d2.List(t)
	if !l.Census.Synced {
		t.Errorf("ls right after ready: census not synced")
	}
	listed := map[string]Session{}
	for _, s := range l.Sessions {
		listed[s.Name] = s
	}
	for i, s := range sess {
		got, ok := listed[s.Name]
		if !ok || !got.Managed || !got.Authoritative || got.ID != s.ID || got.Generation != s.Generation ||
			got.StateDir != specs[i].StateDir || got.SessionID != specs[i].SessionID {
			t.Errorf("after restart ls has %+v (listed %v), want managed authoritative %+v", got, ok, s)
		}
		again := d2.MustCreate(t, specs[i], "existing")
		if again.Name != s.Name || again.Generation != s.Generation {
			t.Errorf("create after restart: %+v, want existing %+v", again, s)
		}
	}
	checkOneControlClient(t, h)
	if r := d2.CLI(t, "kill", "--json", sess[1].Name); r.Code != 0 {
		t.Errorf("kill of an adopted session: want exit 0\n%s", r)
	}
	checkVerdictStream(t, d2.Verdicts(t))
}

// checkOneControlClient: exactly one control-mode client on the supervised server.
func checkOneControlClient(t testing.TB, h *Home) {
	t.Helper()
	out, err := h.Tmux("list-clients", "-F", "#{client_control_mode} #{client_pid}")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "1 ") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d control clients, want exactly 1:\n%s", n, out)
	}
}
