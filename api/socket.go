package api

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// probeTimeout bounds the dial that decides whether a socket left on disk is
// alive. A live daemon accepts at once (the kernel completes the connect
// before accept), so this only matters for a wedged one.
const probeTimeout = 2 * time.Second

// Listen binds the API socket at path. A file already at path is handled
// the way a daemon must: a socket that answers belongs to a running daemon
// (busy, exit 75); a socket nobody answers is stale and removed; anything
// else is refused and left alone. The socket is chmod 0600 (its directory is
// 0700) and removed again when the listener closes.
func Listen(path string) (*net.UnixListener, error) {
	if err := clearStale(path); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, verdict.Errorf(verdict.CodeInternal, map[string]any{"path": path},
			"cannot listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, verdict.Errorf(verdict.CodeInternal, map[string]any{"path": path},
			"cannot chmod %s 0600: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	return ln, nil
}

// Precheck is Listen's check of what is at path, without listening: serve
// runs it before it starts or joins its tmux server, so that a start refused
// for the API socket's path (not a socket, or another daemon answering)
// leaves no server behind (found outside-in: a tmux server stayed running
// after such a refusal). Listen checks again.
func Precheck(path string) error { return clearStale(path) }

func clearStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return verdict.Errorf(verdict.CodeInternal, map[string]any{"path": path}, "cannot inspect %s: %w", path, err)
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "runtime_dir", "path": path},
			"%s exists and is not a socket (mode %s); refusing to remove it", path, fi.Mode())
	}
	c, err := net.DialTimeout("unix", path, probeTimeout)
	if err == nil {
		c.Close()
		return verdict.Errorf(verdict.CodeBusy, map[string]any{"path": path},
			"a daemon is already answering on %s", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return verdict.Errorf(verdict.CodeInternal, map[string]any{"path": path},
			"cannot tell whether %s is alive: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return verdict.Errorf(verdict.CodeInternal, map[string]any{"path": path},
			"cannot remove the stale socket %s: %w", path, err)
	}
	return nil
}
