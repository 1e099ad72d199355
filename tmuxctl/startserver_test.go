package tmuxctl

import (
	"context"
	"errors"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

// fakeStart is a StartServer that starts a real server itself (with a
// session "x" of its own, so the test can tell whose server it is) and
// counts its calls.
func fakeStart(tmux, sock string, calls *atomic.Int64) func(context.Context) error {
	return func(ctx context.Context) error {
		calls.Add(1)
		cmd := exec.CommandContext(ctx, tmux, "-S", sock, "-f", "/dev/null", "new-session", "-d", "-s", "x")
		cmd.Env = clientEnv(nil)
		if out, err := cmd.CombinedOutput(); err != nil {
			return errors.New(err.Error() + ": " + string(out))
		}
		return nil
	}
}

func runClient(t *testing.T, c *Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(bg())
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Error(err)
		}
		noChildrenLeft(t)
	})
}

// TestClientStartServerOnEveryLife: the hook starts the first server and,
// after the server is killed, the one the reconnect needs; the control
// client joins the server the hook started (its session x is there).
func TestClientStartServerOnEveryLife(t *testing.T) {
	cfg := testConfig(t)
	var calls atomic.Int64
	cfg.StartServer = fakeStart(tmuxtest.Bin(), cfg.Socket, &calls)
	c := NewClient(cfg)
	runClient(t, c)
	life1, err := c.WaitConnected(bg())
	if err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("StartServer called %d times before the first connect, want 1", n)
	}
	if _, err := c.Command(bg(), "has-session", "-t", "=x"); err != nil {
		t.Fatalf("the control client is not on the hook's server: %v", err)
	}
	if err := syscall.Kill(life1.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new server life", func() bool {
		info, ok := c.Info()
		return ok && info.PID != life1.PID
	})
	if n := calls.Load(); n != 2 {
		t.Fatalf("StartServer called %d times after one reconnect, want 2", n)
	}
	if _, err := c.Command(bg(), "has-session", "-t", "=x"); err != nil {
		t.Fatalf("the reconnected client is not on the hook's server: %v", err)
	}
}

// TestClientStartServerNotCalledWhenRunning: a server that answers is
// joined, the hook is not called.
func TestClientStartServerNotCalledWhenRunning(t *testing.T) {
	cfg := testConfig(t)
	tmuxRun(t, cfg.Socket, "-f", "/dev/null", "new-session", "-d", "-s", "pre")
	var calls atomic.Int64
	cfg.StartServer = fakeStart(tmuxtest.Bin(), cfg.Socket, &calls)
	c := NewClient(cfg)
	runClient(t, c)
	if _, err := c.WaitConnected(bg()); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("StartServer called %d times with a server running", n)
	}
}

// TestClientStartServerFailureFallsBack: a failing hook is logged and the
// control client starts the server itself.
func TestClientStartServerFailureFallsBack(t *testing.T) {
	cfg := testConfig(t)
	var calls atomic.Int64
	cfg.StartServer = func(context.Context) error { calls.Add(1); return errors.New("no scope today") }
	c := NewClient(cfg)
	runClient(t, c)
	if _, err := c.WaitConnected(bg()); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("StartServer called %d times, want 1", n)
	}
}
