package tmuxctl

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// socketMissing reports whether nothing is at path.
func socketMissing(path string) bool {
	_, err := os.Lstat(path)
	return errors.Is(err, fs.ErrNotExist)
}

// connectedClient runs a Client on a private server and waits for its
// connection; the server is killed by pid at cleanup (its socket may be gone).
func connectedClient(t *testing.T) (Config, *Client, ServerInfo) {
	t.Helper()
	return connectedClientWith(t, testConfig(t))
}

// connectedClientWith is connectedClient on cfg.
func connectedClientWith(t *testing.T, cfg Config) (Config, *Client, ServerInfo) {
	t.Helper()
	c := NewClient(cfg)
	runClient(t, c)
	life, err := c.WaitConnected(bg())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(life.PID, syscall.SIGKILL); waitGone(life.PID, 10*time.Second) })
	return cfg, c, life
}

// dropControl kills c's control client (a dropped connection) and waits
// for the reconnection.
func dropControl(t *testing.T, c *Client) {
	t.Helper()
	c.mu.Lock()
	client := c.conn.p.cmd.Process.Pid
	c.mu.Unlock()
	if err := syscall.Kill(client, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "reconnected", func() bool { _, ok := c.Info(); return ok && c.Reconnects() > 0 })
}

// TestClientRevivesRemovedSocket: the server's socket removed under it (a
// cleaner of /tmp), or replaced by another file (a stale socket a
// throw-away server left), then the control connection dropped: the
// reconnect asks the running server to recreate its socket (SIGUSR1) and
// joins it again, where `new-session -A` at the path started a second
// server and the census took the first for dead.
func TestClientRevivesRemovedSocket(t *testing.T) {
	for _, how := range []string{"removed", "replaced"} {
		t.Run(how, func(t *testing.T) {
			cfg, c, life := connectedClient(t)
			if err := os.Remove(cfg.Socket); err != nil {
				t.Fatal(err)
			}
			if how == "replaced" {
				if err := os.WriteFile(cfg.Socket, []byte("junk"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			dropControl(t, c)
			if info, _ := c.Info(); info.PID != life.PID {
				_ = syscall.Kill(info.PID, syscall.SIGKILL)
				t.Fatalf("reconnected to server %d, not to the running %d", info.PID, life.PID)
			}
			checkSocketLeadsTo(t, cfg.Socket, life.PID)
		})
	}
}

// checkSocketLeadsTo: a person's tmux at path reaches server pid.
func checkSocketLeadsTo(t *testing.T, path string, pid int) {
	t.Helper()
	out, err := tmuxtest.Command("-S", path, "display-message", "-p", "#{pid}").Output()
	if err != nil || strings.TrimSpace(string(out)) != strconv.Itoa(pid) {
		t.Fatalf("a person's tmux at the socket: %q %v, want server %d", out, err, pid)
	}
}

// TestClientRevivesSocketOfEarlierServer: the socket removed while no
// daemon ran (its server left running): the first dial finds the server by
// the socket it still listens on and has it recreate the path, instead of
// starting a second server.
func TestClientRevivesSocketOfEarlierServer(t *testing.T) {
	cfg := testConfig(t)
	if out, err := tmuxtest.Command("-S", cfg.Socket, "-f", "/dev/null", "new-session", "-d", "-s", "earlier", "cat").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	out, err := tmuxtest.Command("-S", cfg.Socket, "display-message", "-p", "#{pid}").Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL); waitGone(pid, 10*time.Second) })
	if err := os.Remove(cfg.Socket); err != nil {
		t.Fatal(err)
	}
	c := NewClient(cfg)
	runClient(t, c)
	life, err := c.WaitConnected(bg())
	if err != nil {
		t.Fatal(err)
	}
	if life.PID != pid {
		_ = syscall.Kill(life.PID, syscall.SIGKILL)
		t.Fatalf("connected to server %d, not to the earlier %d", life.PID, pid)
	}
	checkSocketLeadsTo(t, cfg.Socket, pid)
}

// TestClientRevivesSocketWhileConnected: a connected Client notices its
// server's socket removed at its next look and has it recreated, so that a
// person's `tmux -S … attach` works again without any reconnect.
func TestClientRevivesSocketWhileConnected(t *testing.T) {
	old := socketLook
	socketLook = 50 * time.Millisecond
	t.Cleanup(func() { socketLook = old })
	cfg, c, life := connectedClient(t)
	if err := os.Remove(cfg.Socket); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the socket recreated", func() bool { return connectsTo(cfg.Socket, life.PID) })
	checkSocketLeadsTo(t, cfg.Socket, life.PID)
	// A stale file at the path (a throw-away server's, started by a
	// person's attach while the socket was gone) is replaced the same way.
	if err := os.Remove(cfg.Socket); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.Socket, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stale file replaced", func() bool { return connectsTo(cfg.Socket, life.PID) })
	if c.Reconnects() != 0 {
		t.Fatal("reconnected")
	}
}

// TestClientRaisesServerFiles: a server started with an open-files soft
// limit below its hard one (a login shell's 1,024) has it raised at the
// connection, its old one recorded for its panes (AgentNofileEnv).
func TestClientRaisesServerFiles(t *testing.T) {
	cfg, c, life := connectedClient(t)
	var rl unix.Rlimit
	if err := unix.Prlimit(life.PID, unix.RLIMIT_NOFILE, nil, &rl); err != nil || rl.Max < 200 {
		t.Skipf("open-files limit here: %+v %v", rl, err)
	}
	low := unix.Rlimit{Cur: 100, Max: rl.Max}
	if err := unix.Prlimit(life.PID, unix.RLIMIT_NOFILE, &low, nil); err != nil {
		t.Fatal(err)
	}
	dropControl(t, c) // the next connection looks again
	if err := unix.Prlimit(life.PID, unix.RLIMIT_NOFILE, nil, &rl); err != nil || rl.Cur != rl.Max {
		t.Fatalf("server's limit after the connection: %+v %v", rl, err)
	}
	out, err := tmuxtest.Command("-S", cfg.Socket, "show-environment", "-g", AgentNofileEnv).Output()
	if err != nil || strings.TrimSpace(string(out)) != AgentNofileEnv+"=100" {
		t.Fatalf("recorded for the panes: %q %v", out, err)
	}
}

// TestRevivedSocketReadsAttached: a socket tmux recreated (SIGUSR1) for a
// daemon that sets its mode reads as one with a client attached (0700: our
// control client is), as before its removal — tmux makes it without the
// execute bits and marks it again only at the next attach or detach, so it
// read 0600 while serve ran (found outside-in).
func TestRevivedSocketReadsAttached(t *testing.T) {
	old := socketLook
	socketLook = 50 * time.Millisecond
	t.Cleanup(func() { socketLook = old })
	cfg := testConfig(t)
	cfg.SocketMode = 0o600
	cfg, _, life := connectedClientWith(t, cfg)
	mode := func() os.FileMode {
		fi, err := os.Lstat(cfg.Socket)
		if err != nil {
			return 0
		}
		return fi.Mode().Perm()
	}
	waitFor(t, "the socket reads 0700", func() bool { return mode() == 0o700 })
	if err := os.Remove(cfg.Socket); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the socket recreated", func() bool { return connectsTo(cfg.Socket, life.PID) })
	waitFor(t, "the recreated socket reads 0700", func() bool { return mode() == 0o700 })
}
