package tmuxctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The attach lock. tmux before 3.7 writes control notifications to every
// client flagged as control mode, including one that has identified as a
// control client but whose control state does not exist yet (3.7 added a
// `control_state != NULL` guard to CONTROL_SHOULD_NOTIFY_CLIENT). A
// notification — another control client attaching (%client-session-changed),
// detaching (%client-detached), a session created — that lands in that
// window dereferences NULL in control_write and kills the server with every
// session in it. Measured here on 3.3a with eight `tmux -C` clients that a
// shell started together on one socket: the server died in about one round
// in four;
// with the same clients attaching one at a time, in none of 20 rounds.
//
// So our control clients identify only under an exclusive flock on
// SOCKET.skc-attach.lock, across processes too (several daemons, or the
// helper processes of tests, on one socket):
//   - Dial holds it from before the `tmux -C` process starts until its argv
//     command's block has closed (the client is then fully a control
//     client: it attached, which notifies every other one);
//   - Close holds it from closing stdin until the process has exited (its
//     detach notifies every other one);
//   - on servers before 3.7, a command that makes tmux notify the other
//     control clients (new-session, kill-session, renames …, see
//     notifiesOthers) holds it shared from sending until its reply.
//
// With it, eight processes that dial, subscribe, create a session and close
// together no longer kill the 3.3a server (without it: within three rounds,
// every time, in TestManyControlClientsStartTogether). What it cannot cover
// is a notification nobody of ours caused — a session ending because its
// program exited, a human's client — arriving while one of our clients
// identifies: a window of a few milliseconds per connect, on tmux < 3.7.
//
// The file is created 0600 beside the socket (not SOCKET.lock: tmux's own
// server-start lock, which the client we start may need to take). A
// directory we cannot write means no lock: the connect goes ahead
// unserialised rather than failing.
type attachLock struct {
	f    *os.File
	once sync.Once
}

// attachLockPath is the lock file of socket.
func attachLockPath(socket string) string { return socket + ".skc-attach.lock" }

// lockAttach takes the attach lock of socket exclusively, polling until
// ctx is done (flock has no timeout). It returns a nil lock, without error,
// when the file cannot be opened (unwritable directory): serialising is
// best effort, never a reason not to connect.
func lockAttach(ctx context.Context, socket string) (*attachLock, error) {
	return takeAttachLock(ctx, socket, unix.LOCK_EX)
}

// lockAttachShared takes it shared: commands that notify other clients
// run together, never while one of our clients identifies.
func lockAttachShared(ctx context.Context, socket string) (*attachLock, error) {
	return takeAttachLock(ctx, socket, unix.LOCK_SH)
}

func takeAttachLock(ctx context.Context, socket string, how int) (*attachLock, error) {
	f, err := os.OpenFile(attachLockPath(socket), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, nil
	}
	if fi, err := f.Stat(); err == nil && fi.Mode().Perm() != 0o600 {
		// An existing lock file keeps the mode it was made with: another
		// user able to open it could hold our attach lock. Ours is 0600.
		_ = f.Chmod(0o600)
	}
	wait := time.Millisecond
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		switch {
		case err == nil:
			return &attachLock{f: f}, nil
		case errors.Is(err, unix.EINTR):
			continue
		case !errors.Is(err, unix.EWOULDBLOCK):
			f.Close()
			return nil, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, fmt.Errorf("tmuxctl: waiting for another control client of %s to attach or detach: %w", socket, ctx.Err())
		}
		if wait < 20*time.Millisecond {
			wait *= 2
		}
	}
}

// release drops the lock (closing the file does); nil-safe and idempotent.
func (l *attachLock) release() {
	if l == nil {
		return
	}
	l.once.Do(func() { l.f.Close() })
}

// notifiesOthers says whether tmux tells the other control clients about
// what command name does (session and window structure, names, attach and
// detach: docs/tmux-facts.md §1.2). Reads, options and subscriptions notify nobody else.
func notifiesOthers(name string) bool {
	switch name {
	case "new-session", "kill-session", "rename-session", "new-window", "kill-window",
		"rename-window", "split-window", "kill-pane", "respawn-pane", "respawn-window",
		"link-window", "unlink-window", "move-window", "swap-window", "break-pane",
		"join-pane", "select-window", "select-pane", "select-layout", "resize-pane",
		"resize-window", "attach-session", "switch-client", "detach-client", "kill-server",
		"set-buffer", "delete-buffer", "load-buffer":
		return true
	}
	return false
}
