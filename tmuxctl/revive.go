package tmuxctl

import (
	"bufio"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The server's socket removed under it (a cleaner of /tmp, a person's rm):
// the server lives on and keeps its clients, ours among them, but nothing
// can connect to it any more — not a person's `tmux -S … attach`, not our
// control client after its connection drops. Dialled at the missing path,
// the control client's `new-session -A` would start a second server there,
// and the census would take the first for dead: every agent in it stopped
// as server_exited, and the first server left running, unreachable. tmux
// recreates its socket on SIGUSR1 (tmux(1): "If the socket is accidentally
// removed, the SIGUSR1 signal may be sent to the tmux server process to
// recreate it"), so the Client asks it to: only the server it was last
// connected to (its pid from tmux itself), and only while that process is
// still listening on a socket bound to this very path (/proc/net/unix keeps
// the bound name of an unlinked socket) — a server found by its socket
// path, never by its name.

// socketLook is how often a connected Client checks that its server's
// socket is still there, so that a person's attach works again without
// waiting for a reconnect: one lstat.
var socketLook = 30 * time.Second // a var only so a test can look sooner

// socketMissing reports whether nothing is at path.
func socketMissing(path string) bool {
	_, err := os.Lstat(path)
	return errors.Is(err, fs.ErrNotExist)
}

// socketHeld runs before every dial, before anything could start a second
// server on the path: the server last connected to, alive without its
// socket, is asked to recreate it (reviveSocket). It reports whether that
// server is there and its socket still is not: nothing is to be dialled.
func (c *Client) socketHeld(ctx context.Context) bool {
	c.mu.Lock()
	last := c.info.PID
	c.mu.Unlock()
	return c.reviveSocket(ctx, last) && socketMissing(c.cfg.Socket)
}

// reviveSocket asks server pid, the one the Client was last connected to,
// to recreate its socket when the socket is gone and pid still listens on
// one bound to its path; it waits (bounded) for the socket to be back. It
// reports whether it asked.
func (c *Client) reviveSocket(ctx context.Context, pid int) bool {
	path := c.cfg.Socket
	if pid <= 0 || !socketMissing(path) || pidGone(pid) || !listensOn(pid, path) {
		return false
	}
	// tmux binds at the same path, which fails when its directory went too.
	if _, err := os.Stat(filepath.Dir(path)); errors.Is(err, fs.ErrNotExist) {
		_ = os.MkdirAll(filepath.Dir(path), 0o700)
	}
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		c.log.Warn().Err(err).Int("server_pid", pid).Msg("the tmux server's socket is gone; asking the server to recreate it failed")
		return true
	}
	deadline := time.Now().Add(c.cfg.CommandTimeout)
	for socketMissing(path) && ctx.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	back := !socketMissing(path)
	if back && c.cfg.SocketMode != 0 {
		if err := chmodSocket(path, c.cfg.SocketMode); err != nil {
			c.log.Warn().Err(err).Msg("recreated tmux socket: mode not applied")
		}
	}
	c.log.Warn().Int("server_pid", pid).Str("socket", path).Bool("recreated", back).
		Msg("the tmux server's socket was removed while the server ran; asked it to recreate it (SIGUSR1)")
	return true
}

// listensOn reports whether process pid holds a listening unix socket
// bound to path: the inodes /proc/net/unix lists under that path (also once
// the path is unlinked), among pid's open files.
func listensOn(pid int, path string) bool {
	inodes := listeningInodes(path)
	if len(inodes) == 0 {
		return false
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") && inodes[strings.TrimSuffix(l[len("socket:["):], "]")] {
			return true
		}
	}
	return false
}

// soAcceptCon is /proc/net/unix's flag of a listening socket (__SO_ACCEPTCON).
const soAcceptCon = 0x10000

// listeningInodes are the inodes of the listening unix sockets bound to
// path, from /proc/net/unix ("Num RefCount Protocol Flags Type St Inode
// Path", the path the rest of the line).
func listeningInodes(path string) map[string]bool {
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return nil
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<16)
	for sc.Scan() {
		fields, rest := cutFields(sc.Text(), 7)
		if len(fields) < 7 || rest != path {
			continue
		}
		flags, err := strconv.ParseUint(fields[3], 16, 32)
		if err == nil && flags&soAcceptCon != 0 {
			out[fields[6]] = true
		}
	}
	return out
}

// cutFields splits the first n space-separated fields off line (the kernel
// pads some with spaces) and returns the rest after the one space that
// follows them, as it is (a path may hold spaces).
func cutFields(line string, n int) ([]string, string) {
	var fields []string
	for len(fields) < n {
		line = strings.TrimLeft(line, " ")
		i := strings.IndexByte(line, ' ')
		if i < 0 {
			if line != "" {
				fields = append(fields, line)
			}
			return fields, ""
		}
		fields, line = append(fields, line[:i]), line[i+1:]
	}
	return fields, line
}
