package census

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/skc-supervisor/skc-supervisor/internal/testwatch"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"

	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

func TestMain(m *testing.M) {
	testwatch.Arm()
	goleak.VerifyTestMain(m)
}

// waitLimit is generous: tests wait for conditions, never assert durations.
const waitLimit = 30 * time.Second

// rig is a census on a private tmux server, plus a separate `tmux -S sock`
// client acting as the human.
type rig struct {
	t    testing.TB
	dir  string
	sock string
	gate string // while this file exists, the control client cannot (re)connect
	cl   *tmuxctl.Client
	c    *Census
	stop func()
}

func needTmux(t testing.TB) {
	t.Helper()
	tmuxtest.Need(t)
}

// newRig starts a tmux server with a control client and a census fed by it,
// and waits for the first sync. cfg nil means test timings.
func newRig(t testing.TB, cfg *config) *rig {
	t.Helper()
	needTmux(t)
	dir, err := os.MkdirTemp("", "skc")
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, dir: dir, sock: filepath.Join(dir, "s"), gate: filepath.Join(dir, "gate")}
	// The wrapper lets a test hold the control client off the server, so
	// that "unsynced" is a state it can observe, not a race it might win.
	wrapper := filepath.Join(dir, "tmux")
	script := "#!/bin/sh\nwhile [ -e '" + r.gate + "' ]; do sleep 0.02; done\nexec '" + tmuxtest.Bin() + "' \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	r.cl = tmuxctl.NewClient(tmuxctl.Config{Tmux: wrapper, Socket: r.sock, ConfigFile: "/dev/null",
		CommandTimeout: 60 * time.Second, ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
	c := testConfig()
	if cfg != nil {
		c = *cfg
	}
	r.c = newCensus(r.cl, nil, c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { _ = r.cl.Run(ctx); done <- struct{}{} }()
	go func() { _ = r.c.Run(ctx); done <- struct{}{} }()
	r.stop = func() {
		cancel()
		<-done
		<-done
	}
	t.Cleanup(func() {
		os.Remove(r.gate)
		r.stop()
		r.killServer()
		os.RemoveAll(dir)
	})
	r.waitSynced()
	return r
}

func testConfig() config {
	cfg := defaultConfig()
	cfg.quiet = 20 * time.Millisecond
	cfg.maxDelay = 200 * time.Millisecond
	return cfg
}

func (r *rig) waitSynced() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := r.c.WaitSynced(ctx); err != nil {
		r.t.Fatalf("census never synced: %v", err)
	}
}

// tmux runs the human's tmux client on the rig's socket. -u: the client
// speaks UTF-8 whatever the locale (under LC_ALL=C a client without it
// sends non-ASCII names as "_" and reads them back escaped).
func (r *rig) tmux(args ...string) string {
	r.t.Helper()
	out, err := tmuxtest.Command(append([]string{"-u", "-S", r.sock, "-f", "/dev/null"}, args...)...).CombinedOutput()
	if err != nil {
		r.t.Fatalf("tmux %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// serverPID asks the live server for its pid; 0 when there is none.
func (r *rig) serverPID() int {
	out, err := tmuxtest.Command("-S", r.sock, "display-message", "-p", "#{pid}").Output()
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return pid
}

// killServer SIGKILLs our private server by pid and waits until it is gone.
func (r *rig) killServer() {
	pid := r.serverPID()
	if pid <= 0 {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	eventually(r.t, "server gone", func() bool { return processGone(pid) })
}

// eventually polls cond until it holds or the generous deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// next reads the next change that is not for an excluded kind, or fails.
func next(t testing.TB, sub *Subscription) Change {
	t.Helper()
	select {
	case ch, ok := <-sub.C():
		if !ok {
			t.Fatal("subscription closed")
		}
		return ch
	case <-time.After(waitLimit):
		t.Fatal("timed out waiting for a change")
	}
	return Change{}
}

// digest returns a 64-hex identity digest for n.
func digest(n int) string {
	return strings.Repeat("0", 63-len(strconv.Itoa(n))) + "d" + strconv.Itoa(n)
}
