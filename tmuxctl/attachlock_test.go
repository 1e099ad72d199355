package tmuxctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/internal/proctest"
	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

// TestAttachLockSerialisesDial: while another holder has the socket's
// attach lock, Dial starts no tmux client (no server appears) and fails when
// its ctx ends, saying why; once the lock is free it connects. The lock file
// is private.
func TestAttachLockSerialisesDial(t *testing.T) {
	cfg := testConfig(t)
	held, err := lockAttach(bg(), cfg.Socket)
	if err != nil || held == nil {
		t.Fatalf("lockAttach: %v %v", held, err)
	}
	ctx, cancel := context.WithTimeout(bg(), 300*time.Millisecond)
	_, err = Dial(ctx, cfg)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial under a held lock: %v", err)
	}
	if _, err := os.Stat(cfg.Socket); !os.IsNotExist(err) {
		t.Fatalf("a tmux client ran while the lock was held (socket: %v)", err)
	}
	held.release()
	c := dialT(t, cfg)
	drain(c)
	st, err := os.Stat(attachLockPath(cfg.Socket))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("lock file: %v %v", st, err)
	}
}

// TestAttachLockUnwritableDir: a socket in a directory we cannot create
// files in still connects (serialising is best effort).
func TestAttachLockUnwritableDir(t *testing.T) {
	if os.Geteuid() == 0 {
		// root writes anywhere; use a path whose parent is not a directory.
		l, err := lockAttach(bg(), "/dev/null/s")
		if l != nil || err != nil {
			t.Fatalf("lockAttach on an impossible path: %v %v", l, err)
		}
		return
	}
	l, err := lockAttach(bg(), "/proc/s")
	if l != nil || err != nil {
		t.Fatalf("lockAttach in /proc: %v %v", l, err)
	}
}

// TestManyControlClientsStartTogether: eight processes dial one server
// together, each subscribes and creates a session (as a census and a create
// do), then all close together; four rounds. tmux before 3.7 crashes in
// control_write when a control client identifies while another's attach,
// detach or new session is notified: without the attach lock the 3.3a
// server died within three rounds in each of three runs here; with it, in
// none of 50 rounds. On 3.7 the test passes either way.
func TestManyControlClientsStartTogether(t *testing.T) {
	cfg := testConfig(t)
	first := dialT(t, cfg)
	drain(first)
	pid := first.Info().PID
	for round := 0; round < 4; round++ {
		kids := make([]*proctest.Child, 8)
		for i := range kids {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperDialClose$")
			cmd.Env = append(os.Environ(), "SKC_TMUXCTL_HELPER_DIALCLOSE="+cfg.Socket)
			cmd.Stderr = os.Stderr
			kids[i] = proctest.Start(t, cmd)
		}
		up := 0
		for _, k := range kids {
			if l, _ := k.ReadLine(); l == "up" {
				up++
			}
		}
		for _, k := range kids { // all at once: what this test is about
			k.CloseInput()
		}
		failed := 0
		for _, k := range kids {
			if k.Wait() != nil {
				failed++
			}
		}
		r, err := first.Command(bg(), "display-message", "-p", "#{pid}")
		if err != nil || len(r.Lines) != 1 || r.Lines[0] != itoa(pid) || up != len(kids) || failed > 0 {
			t.Fatalf("round %d (tmux %s): %d of %d helpers up, %d failed; server pid %v %v, was %d",
				round, first.Info().Version, up, len(kids), failed, r.Lines, err, pid)
		}
	}
}

// TestHelperDialClose is the helper process of
// TestManyControlClientsStartTogether: dial, wait for stdin EOF, close.
func TestHelperDialClose(t *testing.T) {
	sock := os.Getenv("SKC_TMUXCTL_HELPER_DIALCLOSE")
	if sock == "" {
		t.Skip("helper process only")
	}
	ctx, cancel := context.WithTimeout(bg(), 60*time.Second)
	defer cancel()
	c, err := Dial(ctx, Config{Tmux: tmuxtest.Bin(), Socket: sock, ConfigFile: "/dev/null"})
	if err != nil {
		t.Fatal(err)
	}
	drain(c)
	// What a census and a create do at once: subscribe, and make a
	// session (a notification for every other control client).
	if _, err := c.Command(ctx, "refresh-client", "-B", "skc:%*:#{pane_id}"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Command(ctx, "new-session", "-d", "cat"); err != nil {
		t.Fatal(err)
	}
	fmt.Println("up")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestNotifyingCommandsWaitForAttach: on a server older than 3.7, a command
// that notifies other control clients is not sent while a client of ours
// holds the attach lock (it is identifying), and fails as never sent when
// the lock does not come in time; reads are never held. On 3.7+ nothing is.
func TestNotifyingCommandsWaitForAttach(t *testing.T) {
	cfg := testConfig(t)
	c := dialT(t, cfg)
	drain(c)
	held, err := lockAttach(bg(), cfg.Socket)
	if err != nil || held == nil {
		t.Fatalf("lockAttach: %v %v", held, err)
	}
	defer held.release()
	if _, err := c.Command(bg(), "display-message", "-p", "#{pid}"); err != nil {
		t.Fatalf("a read waited for the lock: %v", err)
	}
	ctx, cancel := context.WithTimeout(bg(), 200*time.Millisecond)
	defer cancel()
	_, err = c.Command(ctx, "new-session", "-d", "-s", "held", "cat")
	if c.Info().VersionAtLeast(3, 7) {
		if err != nil {
			t.Fatalf("tmux %s: new-session: %v", c.Info().Version, err)
		}
		return
	}
	if !errors.Is(err, ErrNotConnected) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("tmux %s: new-session under a held lock: %v", c.Info().Version, err)
	}
	if out, err := tmuxtest.Command("-S", cfg.Socket, "has-session", "-t", "=held").CombinedOutput(); err == nil {
		t.Fatalf("the session was created: %s", out)
	}
	held.release()
	if _, err := c.Command(bg(), "new-session", "-d", "-s", "held", "cat"); err != nil {
		t.Fatalf("after release: %v", err)
	}
}
