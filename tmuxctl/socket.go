package tmuxctl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// SocketModeError is a failure to apply Config.SocketMode to the server's
// socket: the path is not a socket (a symlink, a regular file, gone) or the
// chmod failed. Dial fails with it: a server whose socket we cannot lock
// down is not one we supervise.
type SocketModeError struct {
	Path string
	Err  error
}

// Error implements error.
func (e *SocketModeError) Error() string {
	return "tmuxctl: socket mode of " + e.Path + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *SocketModeError) Unwrap() error { return e.Err }

// Code is the stable snake_case code of a socket mode failure.
func (e *SocketModeError) Code() string { return "tmux_socket_mode" }

// errNotSocket says the socket path holds something else.
var errNotSocket = errors.New("not a socket (refusing to chmod it)")

// chmodSocket sets the permission bits of the socket at path to mode, with
// no symlink following and no window between check and chmod: the path is
// opened O_PATH|O_NOFOLLOW (a symlink opens as itself), the descriptor is
// checked to be a socket, and the chmod goes through /proc/self/fd (Linux
// has no fchmod on O_PATH descriptors). tmux keeps the execute bits as its
// "a client is attached" marker (server_update_socket); they are kept for
// each class that mode lets read.
func chmodSocket(path string, mode os.FileMode) error { return chmodSocketAs(path, mode, false) }

// chmodSocketAttached is chmodSocket that also sets the execute bits as tmux
// does while a client is attached: for a socket tmux recreated (SIGUSR1),
// which it makes without them and marks again only when a client attaches
// or detaches — our control client is attached all along, so without this
// the socket read 0600 instead of 0700 while serve ran (found outside-in).
func chmodSocketAttached(path string, mode os.FileMode) error {
	return chmodSocketAs(path, mode, true)
}

func chmodSocketAs(path string, mode os.FileMode, attached bool) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &SocketModeError{Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &SocketModeError{Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return &SocketModeError{Path: path, Err: errNotSocket}
	}
	perm := uint32(mode.Perm())
	x := st.Mode & 0o111 & (perm >> 2)
	if attached {
		x = (perm & 0o444) >> 2
	}
	if err := unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), perm|x); err != nil {
		return &SocketModeError{Path: path, Err: fmt.Errorf("chmod %o: %w", perm|x, err)}
	}
	return nil
}

// serverAbsent reports whether no tmux server listens on path: connecting
// to it fails because the socket does not exist (a server that exited
// cleanly removes it) or refuses (a killed server leaves it behind). Any
// other outcome — a connection (closed again at once, tmux drops a client
// that says nothing), a permission error, a timeout — is not "absent":
// starting a second server there would not help.
func serverAbsent(ctx context.Context, path string) bool {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err == nil {
		conn.Close()
		return false
	}
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED)
}
