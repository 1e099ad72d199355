package tmuxctl

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// sockPerm is the rw bits of the socket at path (tmux toggles the x bits
// itself as its "attached" marker).
func sockPerm(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm() &^ 0o111
}

// TestSocketModeEveryServerLife: the mode is applied at the first connect
// and again on the new socket of a server started by the reconnect. 0640
// is not what tmux 3.3a gives its socket (0600), so it shows our chmod.
func TestSocketModeEveryServerLife(t *testing.T) {
	cfg := testConfig(t)
	cfg.SocketMode = 0o640
	c := NewClient(cfg)
	ctx, cancel := context.WithCancel(bg())
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Error(err)
		}
		noChildrenLeft(t)
	}()
	life1, err := c.WaitConnected(bg())
	if err != nil {
		t.Fatal(err)
	}
	if p := sockPerm(t, cfg.Socket); p != 0o640 {
		t.Fatalf("first life: socket mode %o, want 640", p)
	}
	if err := syscall.Kill(life1.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new server life", func() bool {
		info, ok := c.Info()
		return ok && info.PID != life1.PID
	})
	if p := sockPerm(t, cfg.Socket); p != 0o640 {
		t.Fatalf("second life: socket mode %o, want 640", p)
	}
}

// TestSocketModeLeftAloneByDefault: without SocketMode, a connect leaves
// the socket's mode as it found it.
func TestSocketModeLeftAloneByDefault(t *testing.T) {
	cfg := testConfig(t)
	drain(dialT(t, cfg))
	if err := os.Chmod(cfg.Socket, 0o660); err != nil {
		t.Fatal(err)
	}
	drain(dialT(t, cfg))
	if p := sockPerm(t, cfg.Socket); p != 0o660 {
		t.Fatalf("socket mode %o changed without SocketMode", p)
	}
}

// TestChmodSocketRefusesNonSockets: a symlink (even to a socket), a regular
// file and a missing path are refused and left unchanged.
func TestChmodSocketRefusesNonSockets(t *testing.T) {
	dir, err := os.MkdirTemp("", "skc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Chmod(sock, 0o660); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "l")
	if err := os.Symlink(sock, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{link, file, filepath.Join(dir, "missing")} {
		err := chmodSocket(p, 0o600)
		var se *SocketModeError
		if !errors.As(err, &se) || se.Code() != "tmux_socket_mode" {
			t.Errorf("%s: %v, want *SocketModeError", p, err)
		}
	}
	if p := sockPerm(t, sock); p != 0o660 {
		t.Fatalf("symlink target changed to %o", p)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o644 {
		t.Fatalf("regular file changed to %o", fi.Mode().Perm())
	}
	if err := chmodSocket(sock, 0o600); err != nil || sockPerm(t, sock) != 0o600 {
		t.Fatalf("real socket: %v", err)
	}
}
