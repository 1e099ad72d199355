package tmuxctl

import (
	"bufio"
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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
// socket is still the one it connected through, so that a person's attach
// works again without waiting for a reconnect: one lstat, and a connection
// only when the path changed.
var socketLook = 5 * time.Second // a var only so a test can look sooner

// socketHeld runs before every dial, before anything could start a second
// server on the path: a server alive without a working socket at the path —
// the one the Client was last connected to, or, at a first start, the one
// that still listens on a socket bound to the path (an earlier daemon's) —
// is asked to recreate it (reviveSocket). It reports whether such a server
// is there and its socket still does not answer: nothing is to be dialled.
func (c *Client) socketHeld(ctx context.Context) bool {
	path := c.cfg.Socket
	c.mu.Lock()
	pid := c.info.PID
	c.mu.Unlock()
	if pid <= 0 || pidGone(pid) {
		if !serverAbsent(ctx, path) {
			return false // a server answers there: the dial joins it
		}
		if pid = listenerOf(path); pid == 0 {
			return false // no server of this path anywhere: one may be started
		}
	}
	return c.reviveSocket(ctx, pid) && !connectsTo(path, pid)
}

// reviveSocket asks server pid to recreate its socket when the path does not
// lead to it (gone, replaced by a file, or a stale socket a throw-away
// server left: tmux unlinks the path before it binds) while pid still
// listens on a socket bound to that path; it waits (bounded) for the path to
// lead to pid. It reports whether it asked.
func (c *Client) reviveSocket(ctx context.Context, pid int) bool {
	path := c.cfg.Socket
	if pid <= 0 || pidGone(pid) || connectsTo(path, pid) || !listensOn(pid, path) {
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
	for !connectsTo(path, pid) && ctx.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	back := connectsTo(path, pid)
	if back && c.cfg.SocketMode != 0 {
		if err := chmodSocketAttached(path, c.cfg.SocketMode); err != nil {
			c.log.Warn().Err(err).Msg("recreated tmux socket: mode not applied")
		}
	}
	c.noteSocket(pid)
	c.log.Warn().Int("server_pid", pid).Str("socket", path).Bool("recreated", back).
		Msg("the tmux server's socket was removed or replaced while the server ran; asked it to recreate it (SIGUSR1)")
	return true
}

// sockFile tells one file at the socket path from another: its inode
// number alone does not, since a file made right after a removal may get
// the same number (a stale socket, a regular file in its place).
type sockFile struct {
	inode uint64
	mode  uint32
	ctime int64
}

func statSock(path string) (sockFile, bool) {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil {
		return sockFile{}, false
	}
	return sockFile{inode: st.Ino, mode: st.Mode, ctime: st.Ctim.Nano()}, true
}

// noteSocket records the file at the socket path when it leads to server
// pid — the same file before and after a connection that reached pid — so
// that the periodic look connects only when that file changed. It reports
// whether it did.
func (c *Client) noteSocket(pid int) bool {
	f, ok := statSock(c.cfg.Socket)
	if !ok || !connectsTo(c.cfg.Socket, pid) {
		return false
	}
	if g, ok := statSock(c.cfg.Socket); !ok || g != f {
		return false
	}
	c.sockFile.Store(&f)
	return true
}

// socketChanged reports whether the file at the socket path is not the one
// noteSocket recorded (gone, or another).
func (c *Client) socketChanged() bool {
	f, ok := statSock(c.cfg.Socket)
	old := c.sockFile.Load()
	return !ok || old == nil || f != *old
}

// connectsTo reports whether a connection to path reaches process pid (its
// peer credentials: the process that listens).
func connectsTo(path string, pid int) bool {
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	return err == nil && cred != nil && int(cred.Pid) == pid
}

// listenerOf finds the process that listens on a socket bound to path (the
// inodes /proc/net/unix lists under it) among the processes whose files this
// one may read: a server found by its socket path, never by its name. Only
// asked when the path leads nowhere (a first start after the socket went),
// so its walk of /proc is rare. 0 when there is none.
func listenerOf(path string) int {
	inodes := listeningInodes(path)
	if len(inodes) == 0 {
		return 0
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && pid > 0 && holdsSocket(pid, inodes) {
			return pid
		}
	}
	return 0
}

// listensOn reports whether process pid holds a listening unix socket
// bound to path: the inodes /proc/net/unix lists under that path (also once
// the path is unlinked), among pid's open files.
func listensOn(pid int, path string) bool {
	inodes := listeningInodes(path)
	return len(inodes) > 0 && holdsSocket(pid, inodes)
}

// holdsSocket reports whether process pid has one of the socket inodes open.
func holdsSocket(pid int, inodes map[string]bool) bool {
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
