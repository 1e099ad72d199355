package tmuxctl

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/skc-supervisor/skc-supervisor/internal/testwatch"
	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

func TestMain(m *testing.M) {
	testwatch.Arm()
	goleak.VerifyTestMain(m)
}

// needTmux skips when tmux is not installed (make test installs it).
func needTmux(t testing.TB) {
	t.Helper()
	tmuxtest.Need(t)
}

// testConfig returns a Config on a private socket in a short temp dir; the
// server started there is killed at cleanup, by pid when known.
func testConfig(t testing.TB) Config {
	t.Helper()
	needTmux(t)
	dir, err := os.MkdirTemp("", "skc")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s")
	t.Cleanup(func() {
		killServer(sock)
		os.RemoveAll(dir)
	})
	return Config{Tmux: tmuxtest.Bin(), Socket: sock, ConfigFile: "/dev/null", CommandTimeout: 20 * time.Second}
}

// killServer kills the server on sock (our own private one) and waits for it
// to go away.
func killServer(sock string) {
	out, err := tmuxtest.Command("-S", sock, "display-message", "-p", "#{pid}").Output()
	if err != nil {
		return
	}
	var pid int
	for _, c := range string(out) {
		if c >= '0' && c <= '9' {
			pid = pid*10 + int(c-'0')
		}
	}
	if pid <= 0 {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	waitGone(pid, 10*time.Second)
}

// waitGone waits until pid no longer exists (or is a zombie not ours).
func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			return true
		}
		if st, err := os.ReadFile("/proc/" + itoa(pid) + "/stat"); err == nil && zombie(st) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

func zombie(stat []byte) bool {
	for i := len(stat) - 1; i > 0; i-- {
		if stat[i] == ')' {
			return i+2 < len(stat) && stat[i+2] == 'Z'
		}
	}
	return false
}

func itoa(n int) string {
	return string(appendInt(nil, n))
}

func appendInt(b []byte, n int) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

func dialT(t testing.TB, cfg Config) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// drain consumes a Conn's notifications in the background until closed.
func drain(c *Conn) {
	go func() {
		for range c.Notifications() {
		}
	}()
}

func bg() context.Context { return context.Background() }

// children lists the pids of this process's live child processes.
func children(t testing.TB) []int {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n, in := 0, false
		for _, c := range append(b, ' ') {
			if c >= '0' && c <= '9' {
				n, in = n*10+int(c-'0'), true
			} else if in {
				pids = append(pids, n)
				n, in = 0, false
			}
		}
	}
	return pids
}

// noChildrenLeft fails when a child process of ours is still alive.
func noChildrenLeft(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		kids := children(t)
		if len(kids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("child processes left behind: %v", kids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tmuxRun runs a separate (forked) tmux client on sock, as another user of
// the server would.
func tmuxRun(t testing.TB, sock string, args ...string) string {
	t.Helper()
	out, err := tmuxtest.Command(append([]string{"-S", sock}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("tmux %v: %v: %s", args, err, out)
	}
	return string(out)
}

// waitFor polls cond with a generous deadline (no timed assertions).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
