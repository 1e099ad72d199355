package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// sleepers lists the live (not zombie) `sleep TOKEN` processes: an
// identity's agents, counted in /proc whatever tmux or the fence say.
func sleepers(token string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil || string(b) != "sleep\x00"+token+"\x00" {
			continue
		}
		if alive(pid) && !isZombie(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// restartArgs is `create` of spec with an on-failure policy, no delay and a
// start limit the test never reaches; the agent and its resume command are
// `sleep TOKEN`.
func restartArgs(spec Spec, token string) []string {
	a := []string{"create", "--json", "--state-dir", spec.StateDir, "--session-id", spec.SessionID,
		"--restart", "on-failure", "--restart-delay", "0s", "--restart-burst", "100", "--restart-interval", "1s",
		"--resume-arg", "sleep", "--resume-arg", token, "--wait", "20s"}
	return append(a, "--", "sleep", token)
}

// shown is what `show --json` of an identity says of its session.
type shown struct {
	Session *struct {
		ID         string `json:"id"`
		Name       string `json:"name"`
		Generation uint64 `json:"generation"`
		State      string `json:"state"`
		Restarts   int    `json:"restarts"`
	} `json:"session"`
}

func showIdentity(t testing.TB, h *Home, spec Spec) (shown, error) {
	r := h.CLI(t, "show", "--json", "--state-dir", spec.StateDir, "--session-id", spec.SessionID)
	var s shown
	if r.Code != 0 {
		return s, fmt.Errorf("show: %s", r)
	}
	return s, json.Unmarshal([]byte(r.Stdout), &s)
}

// waitOneRunning waits until the identity runs a generation after gen with
// exactly one agent, and returns it.
func waitOneRunning(t *testing.T, h *Home, spec Spec, token string, gen uint64) shown {
	var s shown
	WaitFor(t, stopDeadline, "one running agent", func() error {
		var err error
		if s, err = showIdentity(t, h, spec); err != nil {
			return err
		}
		if s.Session == nil || s.Session.State != "running" || s.Session.Generation <= gen {
			return fmt.Errorf("session %+v", s.Session)
		}
		if n := len(sleepers(token)); n != 1 {
			return fmt.Errorf("%d agents", n)
		}
		return nil
	})
	return s
}

// watchAgents samples /proc at the given interval until stop is closed and records
// the most agents of token seen alive at once.
func watchAgents(token string, stop chan struct{}, every time.Duration) *atomic.Int64 {
	var most atomic.Int64
	go func() {
		for {
			if n := int64(len(sleepers(token))); n > most.Load() {
				most.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(every):
			}
		}
	}()
	return &most
}

// TestRestartStorm: every round the agent exits (killed by a signal: a
// failure) while a create of the identity, a restart request, a SIGKILL of
// the daemon followed by a new daemon, and end detection race for it. Every
// round ends with exactly one next agent, and at no moment do two agents of
// the identity run (sampled from /proc throughout).
func TestRestartStorm(t *testing.T) {
	rounds := 50
	if testing.Short() {
		rounds = 10
	}
	h := NewHome(t)
	d := h.Start(t, DaemonOpts{})
	spec := NewSpec(t, "storm")
	token := strconv.Itoa(7000000 + os.Getpid()%1000000)
	if r := h.CLI(t, restartArgs(spec, token)...); r.Code != 0 {
		t.Fatalf("create: %s", r)
	}
	h.NoteSession(t)
	stop := make(chan struct{})
	most := watchAgents(token, stop, 2*time.Millisecond)
	defer close(stop)
	var gen uint64
	for i := 0; i < rounds; i++ {
		s := waitOneRunning(t, h, spec, token, gen)
		gen = s.Session.Generation
		agent := sleepers(token)[0]
		var wg sync.WaitGroup
		for _, f := range []func(){
			func() { _ = syscall.Kill(agent, syscall.SIGTERM) },
			func() { h.CLI(t, restartArgs(spec, token)...) },
			func() { h.CLI(t, "restart", "--json", "--state-dir", spec.StateDir, "--session-id", spec.SessionID) },
			func() { d.Kill(t) },
		} {
			wg.Add(1)
			go func() { defer wg.Done(); f() }()
		}
		wg.Wait()
		d = h.Start(t, DaemonOpts{})
		if m := most.Load(); m > 1 {
			t.Fatalf("round %d: %d agents of the identity ran at once", i, m)
		}
	}
	waitOneRunning(t, h, spec, token, gen)
	if m := most.Load(); m > 1 {
		t.Fatalf("%d agents of the identity ran at once", m)
	}
	if r := h.CLI(t, "kill", "--state-dir", spec.StateDir, "--session-id", spec.SessionID); r.Code != 0 {
		t.Fatalf("kill: %s", r)
	}
	WaitFor(t, stopDeadline, "no agent after kill", func() error {
		if n := len(sleepers(token)); n != 0 {
			return fmt.Errorf("%d agents", n)
		}
		return nil
	})
}

// TestRestartFaultPoints: the daemon is SIGKILLed at each fault point of a
// restart (the agent exits by itself; its first run fails), then restarted:
// one agent, one start after the first (restarts 1, one restart verdict; a
// crashed attempt's reserved generation number is not reused, so the
// generation may be above 2), and the session kept: where the daemon died
// inside the restart's saga (after:restart:<point> fires only there),
// recovery finds the abandoned attempt in the identity's kept session,
// clears its pane (the gated helper never ran an agent) and keeps the
// session; after publication the attempt's generation is preserved.
func TestRestartFaultPoints(t *testing.T) {
	points := []string{"restart-decided", "restart:reserved", "restart:helper_invoked", "respawned", "restart:new-session",
		"restart:spawned", "restart:tagged", "restart:publish", "restart:published"}
	for _, point := range points {
		fp := struct {
			point string
			kept  bool
		}{point, true}
		t.Run(strings.ReplaceAll(fp.point, ":", "_"), func(t *testing.T) {
			h := NewHome(t)
			d := h.Start(t, DaemonOpts{Fault: "after:" + fp.point})
			spec := NewSpec(t, "rfault")
			token := strconv.Itoa(8000000 + os.Getpid()%1000000)
			args := restartArgs(spec, token)
			args = append(args[:len(args)-2], "sh", "-c", "exit 3") // the first run fails at once
			r := h.CLI(t, args...)
			if r.Code != 0 {
				t.Fatalf("create: %s", r)
			}
			h.NoteSession(t)
			var first struct {
				Session struct{ ID, Name string }
			}
			mustJSON(t, r, &first)
			if st := d.WaitExit(t, stopDeadline); st == nil || signalOf(st) != syscall.SIGKILL {
				d.Kill(t)
				t.Fatalf("daemon did not die at after:%s: %v\n%s", fp.point, st, clip(d.Log()))
			}
			h.Start(t, DaemonOpts{})
			s := waitOneRunning(t, h, spec, token, 1)
			if s.Session.Generation < 2 || s.Session.Restarts != 1 {
				t.Fatalf("after the crash at %s: %+v, want restarts 1", fp.point, s.Session)
			}
			if kept := s.Session.ID == first.Session.ID && s.Session.Name == first.Session.Name; kept != fp.kept {
				t.Fatalf("after the crash at %s: session %s %s (first %s %s), kept %v, want %v", fp.point,
					s.Session.ID, s.Session.Name, first.Session.ID, first.Session.Name, kept, fp.kept)
			}
			if n := len(h.AgentSessions(t)); n != 1 {
				t.Fatalf("%d agent sessions, want 1", n)
			}
			if n := strings.Count(h.CLI(t, "verdicts").Stdout, `"reason":"restart"`); n != 1 {
				t.Fatalf("%d restart verdicts, want 1", n)
			}
		})
	}
}
