package integration

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

// runTmuxProxy is SKC_IT_HELPER=tmuxproxy: a stand-in for tmux (set as SKC_TMUX)
// that runs the real one (SKC_IT_REAL_TMUX) with the same arguments and stdin,
// and forwards its stdout — except while the file SKC_IT_FREEZE exists, when it
// holds everything back: a tmux that stops answering mid-command.
func runTmuxProxy() int {
	cmd := exec.Command(os.Getenv("SKC_IT_REAL_TMUX"), os.Args[1:]...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	out, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tmuxproxy:", err)
		return 1
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	freeze := os.Getenv("SKC_IT_FREEZE")
	buf := make([]byte, 32<<10)
	for {
		n, err := out.Read(buf)
		if n > 0 {
			for frozen(freeze) {
				time.Sleep(20 * time.Millisecond)
			}
			if _, werr := os.Stdout.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	cmd.Wait()
	return cmd.ProcessState.ExitCode()
}

func frozen(path string) bool {
	_, err := os.Stat(path)
	return path != "" && err == nil
}

// TestStuckTmux: tmux stops answering mid-command. The create fails with a clear
// error instead of hanging, the API stays responsive, a create of the same
// identity while tmux is stuck is never published on a guess, and once tmux
// answers again the identity ends with exactly one live session.
func TestStuckTmux(t *testing.T) {
	t.Parallel()
	d, freeze := startFreezable(t, NewHome(t))
	d.MustCreate(t, NewSpec(t, "before-freeze"), "published")

	if err := os.WriteFile(freeze, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	spec := NewSpec(t, "stuck")
	createWhileStuck(t, d, spec)
	os.Remove(freeze)
	t1 := time.Now()
	var s Session
	WaitFor(t, waitDeadline, "create to succeed once tmux answers", func() error {
		r, a := d.Create(t, spec)
		if r.Code != 0 || a.Session == nil {
			return errorf("%s", r)
		}
		s = *a.Session
		return nil
	})
	t.Logf("create succeeded %v after tmux answered again", time.Since(t1).Round(time.Millisecond))
	n := 0
	agents := d.AgentSessions(t)
	for _, ts := range agents {
		if ts.Name == s.Name {
			n++
		}
	}
	if n != 1 || len(agents) != 2 {
		t.Errorf("tmux has %+v, want the first session and exactly one for the stuck identity (%s)", agents, s.Name)
	}
}

// startFreezable starts a daemon in h whose tmux is the proxy stand-in; it
// stops answering while the returned file exists.
func startFreezable(t *testing.T, h *Home) (*Daemon, string) {
	t.Helper()
	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	tmuxtest.Need(t)
	realTmux := tmuxtest.Bin()
	freeze := h.Dir + "-freeze"
	d := h.Start(t, DaemonOpts{Env: []string{"SKC_TMUX=" + self, "SKC_IT_HELPER=tmuxproxy",
		"SKC_IT_REAL_TMUX=" + realTmux, "SKC_IT_FREEZE=" + freeze}})
	t.Cleanup(func() { os.Remove(freeze) }) // runs before the daemon's stop
	return d, freeze
}

// waitReservation waits until the fence shows a reservation for id.
func waitReservation(t *testing.T, d *Daemon, id string) {
	t.Helper()
	WaitFor(t, waitDeadline, "a reservation for "+id+" in the fence", func() error {
		r := d.CLI(t, "fence", "--json")
		var f struct {
			Reservations []map[string]any `json:"reservations"`
		}
		mustJSON(t, r, &f)
		for _, res := range f.Reservations {
			if res["session_id"] == id {
				return nil
			}
		}
		return errorf("no reservation yet: %s", r.Stdout)
	})
}

// TestShutdownDuringCreate: SIGTERM while a create waits on a stuck tmux; the
// daemon still exits 0 (finishing or compensating the create within a bound),
// and after a restart the identity ends with exactly one session.
func TestShutdownDuringCreate(t *testing.T) {
	t.Parallel()
	h := NewHome(t)
	d, freeze := startFreezable(t, h)
	d.MustCreate(t, NewSpec(t, "warm"), "published")
	os.WriteFile(freeze, nil, 0o600)
	spec := NewSpec(t, "interrupted")
	done := make(chan Result, 1)
	go func() {
		r, _ := d.runCLI(t, CLIOpts{}, spec.Args()...)
		done <- r
	}()
	waitReservation(t, d, spec.SessionID)
	d.Stop(t)
	r := <-done
	if r.Code == 0 {
		t.Errorf("the interrupted create answered success although tmux never answered\n%s", r)
	}
	os.Remove(freeze)
	d2, _ := startFreezable(t, h)
	s := d2.MustCreate(t, spec, "published")
	if agents := d2.AgentSessions(t); len(agents) != 2 {
		t.Errorf("tmux has %+v, want the warm session and %s only", agents, s.Name)
	}
}

// createWhileStuck: a create against the stuck tmux fails with a clear error
// while the API keeps answering, and a retry is not published on a guess.
func createWhileStuck(t *testing.T, d *Daemon, spec Spec) {
	done := make(chan Result, 1)
	go func() {
		r, err := d.runCLI(t, CLIOpts{}, spec.Args()...)
		if err != nil {
			t.Errorf("%s\n%v", r, err)
		}
		done <- r
	}()
	// The API answers while a create waits on the stuck tmux.
	WaitFor(t, waitDeadline, "ping while tmux is stuck", func() error {
		status, _, err := tryGet(d.Home, "/v1/ping")
		if err != nil || status != 200 {
			return errorf("ping: %d %v", status, err)
		}
		return nil
	})
	if r := d.CLI(t, "ls", "--json"); r.Code != 0 {
		t.Errorf("ls while tmux is stuck: want exit 0 (census may be unsynced)\n%s", r)
	}
	// While that create is in flight, another one with --wait 0s is refused at
	// once by the live reservation.
	waitReservation(t, d, spec.SessionID)
	impatient := spec
	impatient.Wait = "0s"
	expectError(t, d.CLI(t, impatient.Args()...), 3, "refused", "identity_reserved_live", "")
	t0 := time.Now()
	var r Result
	select {
	case r = <-done:
		t.Logf("the stuck create returned after %v: %s", time.Since(t0).Round(time.Millisecond), r.Stdout)
	case <-time.After(cliDeadline + 10*time.Second):
		t.Fatal("create never returned while tmux was stuck")
	}
	var a Answer
	mustJSON(t, r, &a)
	if r.Code != 1 || a.Status != "error" || a.Error == nil || (a.Error.Code != "timeout" && a.Error.Code != "tmux_unavailable") {
		t.Errorf("stuck create: want exit 1, status error, code timeout or tmux_unavailable\n%s", r)
	}
	// Same identity again while still stuck: anything but a published guess.
	r2 := d.CLI(t, spec.Args()...)
	var a2 Answer
	mustJSON(t, r2, &a2)
	if r2.Code == 0 {
		t.Errorf("create while tmux is stuck answered %q: recovery must fail closed\n%s", a2.Status, r2)
	}

	t.Logf("second create while stuck: exit %d %s", r2.Code, r2.Stdout)
}
