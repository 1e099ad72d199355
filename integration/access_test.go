package integration

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

// ptyScreen collects everything a pty shows.
type ptyScreen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *ptyScreen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *ptyScreen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// TestAttach: `attach NAME` in a real pty shows the agent's screen, carries the
// user's keys to the agent, and detaches with C-b d, exiting 0.
func TestAttach(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	spec := NewSpec(t, "attach-1")
	spec.Argv = []string{"/bin/sh", "-c", "echo READY-MARKER; exec cat"}
	s := d.MustCreate(t, spec, "published")
	WaitFor(t, waitDeadline, "the agent's marker in the pane", func() error {
		out, err := d.Tmux("capture-pane", "-p", "-t", s.ID)
		if err != nil || !strings.Contains(out, "READY-MARKER") {
			return errorf("pane: %q %v", out, err)
		}
		return nil
	})

	attach(t, d, s, "attach", s.Name)
	attach(t, d, s, "attach", "--state-dir", spec.StateDir, "--session-id", spec.SessionID)
	// From a shell without SKC_TMUX and without tmux on its PATH: attach runs
	// the daemon's own tmux (GET /v1/info), as a daemon started with SKC_TMUX
	// from a unit file is attached to (a tmux client of another version than
	// the server's cannot attach at all).
	attachEnv(t, d, s, []string{"SKC_TMUX=", "PATH=/nonexistent-skc"}, "attach", s.Name)
}

// attach runs one attach in a pty: the agent's screen shows, typed keys reach
// the agent, C-b d detaches and attach exits 0; the session survives.
func attach(t *testing.T, d *Daemon, s Session, args ...string) {
	t.Helper()
	attachEnv(t, d, s, nil, args...)
}

// attachEnv is attach with extra environment.
func attachEnv(t *testing.T, d *Daemon, s Session, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command(needBinary(t), args...)
	cmd.Env = d.Env(append([]string{"TERM=xterm-256color"}, env...)...)
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	screen := &ptyScreen{}
	copied := make(chan struct{})
	go func() { io.Copy(screen, ptmx); close(copied) }()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	waitScreen(t, screen, exited, "READY-MARKER")
	// attach replaces itself with tmux attach (CONTRACT): same pid, tmux's image.
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid)); filepath.Base(exe) != "tmux" {
		t.Errorf("attach process runs %q, want it replaced by tmux", exe)
	}
	typed := fmt.Sprintf("typed-by-human-%d", len(args))
	ptmx.Write([]byte(typed + "\r"))
	waitScreen(t, screen, exited, typed)
	// C-b d, tmux's default detach, one key per write as a terminal sends them.
	// Once in a while (seen under load) tmux 3.3a passes this C-b through to the
	// pane ("^Bd" on the screen): then press it again, as a human would.
	detach := func() { ptmx.Write([]byte{0x02}); ptmx.Write([]byte{'d'}) }
	detach()
	select {
	case err := <-exited:
		exited <- err
	case <-time.After(15 * time.Second):
		t.Logf("C-b d did not detach; pressing it again (screen tail %q)", tail(screen.String(), 200))
		detach()
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("attach after detach: %v, want exit 0\nscreen: %q", err, clip(screen.String()))
		}
		select { // the last bytes (the [detached] line) are read after the exit
		case <-copied:
		case <-time.After(waitDeadline):
		}
	case <-time.After(waitDeadline):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("attach did not exit after C-b d\nscreen: %q", clip(screen.String()))
	}
	if !strings.Contains(screen.String(), "detached") {
		t.Errorf("no [detached] message on the screen: %q", clip(screen.String()))
	}
	// The session survives the detach.
	if r := d.CLI(t, "show", "--json", s.Name); r.Code != 0 {
		t.Errorf("show after detach: want exit 0\n%s", r)
	}
}

func waitScreen(t *testing.T, s *ptyScreen, exited chan error, want string) {
	t.Helper()
	WaitFor(t, waitDeadline, want+" on the attached screen", func() error {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("attach exited early (%v); screen: %q", err, clip(s.String()))
		default:
		}
		if !strings.Contains(s.String(), want) {
			return errorf("screen so far: %q", clip(s.String()))
		}
		return nil
	})
}

// TestSecondServe: a second serve on the same home exits 75 naming the holder.
func TestSecondServe(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	r := d.CLI(t, "serve")
	if r.Code != 75 || !strings.Contains(r.Stderr+r.Stdout, strconv.Itoa(d.PID())) {
		t.Errorf("second serve: want exit 75 naming pid %d\n%s", d.PID(), r)
	}
	if status, _, err := tryGet(d.Home, "/v1/ping"); err != nil || status != 200 {
		t.Errorf("the first daemon stopped answering after the second serve: %d %v", status, err)
	}
}

const nobody = "65534"

func setprivWrap(t *testing.T) []string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as another uid")
	}
	p, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) missing")
	}
	return []string{p, "--reuid=" + nobody, "--regid=" + nobody, "--clear-groups"}
}

// TestOtherUID: a client running as another uid is refused. As deployed (0700
// home) the socket itself is out of its reach: the CLI must say permission
// denied. With the directory loosened, the daemon's SO_PEERCRED check must refuse
// it: 403 permission_denied on raw HTTP, exit 77 from the CLI.
func TestOtherUID(t *testing.T) {
	t.Parallel()
	wrap := setprivWrap(t)
	d := StartDaemon(t, DaemonOpts{})

	// Behind the 0700 directory, then behind the 0600 socket itself: the
	// connect fails with EACCES, which is not "is serve running?" (69).
	r := d.CLIWith(t, CLIOpts{Wrap: wrap, Dir: "/"}, "ls", "--json")
	expectError(t, r, 77, "error", "permission_denied", "")
	loosen(t, d.Dir, 0o711)
	r = d.CLIWith(t, CLIOpts{Wrap: wrap, Dir: "/"}, "ls", "--json")
	expectError(t, r, 77, "error", "permission_denied", "")

	// Loosen the socket too, so that only the peer-credential check stands
	// between nobody and the API.
	loosen(t, d.APISock(), 0o666)
	r = d.CLIWith(t, CLIOpts{Wrap: wrap, Dir: "/"}, "ls", "--json")
	expectError(t, r, 77, "error", "permission_denied", "")

	helper := filepath.Join(binDir, "itest-helper")
	if err := copyFile(os.Args[0], helper, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/ping", "/v1/sessions", "/v1/fence"} {
		cmd := exec.Command(wrap[0], append(wrap[1:], helper)...)
		cmd.Dir = "/"
		cmd.Env = []string{"SKC_IT_HELPER=rawget", "SKC_IT_SOCK=" + d.APISock(), "SKC_IT_PATH=" + path}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "403\n") || !strings.Contains(string(out), `"permission_denied"`) {
			t.Errorf("GET %s as uid %s: %v %q, want 403 with code permission_denied", path, nobody, err, out)
		}
	}
}

func loosen(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(path, fi.Mode().Perm()) })
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}

// TestOriginRefused: a request carrying an Origin header (a browser) is refused.
func TestOriginRefused(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	status, body := d.Do(t, "GET", "/v1/sessions", "", http.Header{"Origin": {"http://evil.example"}})
	var a Answer
	if status != 403 || decodeOne(string(body), &a) != nil || a.Error == nil || a.Error.Code == "" {
		t.Errorf("GET with Origin: %d %s, want 403 with an error code", status, body)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
