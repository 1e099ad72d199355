package main

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/skc-supervisor/skc-supervisor/api"
	"github.com/skc-supervisor/skc-supervisor/home"
	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

// syncBuffer is a bytes.Buffer safe for the daemon's log writer and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitUntil polls cond with a generous deadline (no timed assertions).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// served is one in-process `serve` on a private short home, with its own
// tmux server (killed by pid at cleanup).
type served struct {
	home   string
	stderr *syncBuffer
	cancel context.CancelFunc
	code   chan int
}

func startServe(t *testing.T, args ...string) *served {
	t.Helper()
	tmuxtest.Need(t)
	t.Setenv("INVOCATION_ID", "") // never a systemd scope from a test
	dir, err := os.MkdirTemp("", "skcs")
	if err != nil {
		t.Fatal(err)
	}
	s := &served{home: dir, stderr: &syncBuffer{}, code: make(chan int, 1)}
	env := map[string]string{"SKC_HOME": dir, "SKC_TMUX": tmuxtest.Bin(), "SKC_TMUX_CONFIG": "/dev/null", "HOME": dir}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	cli := &CLI{ctx: ctx, stdout: &syncBuffer{}, stderr: s.stderr, getenv: func(k string) string { return env[k] }}
	go func() { s.code <- cli.Main(append([]string{"serve"}, args...)) }()
	t.Cleanup(func() {
		s.stop(t)
		killTmux(filepath.Join(dir, "tmux.sock"))
		os.RemoveAll(dir)
	})
	waitUntil(t, "serve ready", func() bool {
		select {
		case code := <-s.code:
			s.code <- code
			t.Fatalf("serve exited %d early:\n%s", code, s.stderr.String())
		default:
		}
		return strings.Contains(s.stderr.String(), `"message":"ready"`)
	})
	return s
}

// stop cancels serve (as SIGTERM does) and checks it exits 0; idempotent.
func (s *served) stop(t *testing.T) {
	s.cancel()
	code, ok := <-s.code
	if ok {
		close(s.code)
		if code != 0 {
			t.Errorf("serve exited %d:\n%s", code, s.stderr.String())
		}
	}
}

// killTmux kills the server on our private socket, by pid.
func killTmux(sock string) {
	out, err := tmuxtest.Command("-S", sock, "display-message", "-p", "#{pid}").Output()
	if err != nil {
		return
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// TestServeWireLogAndSocketMode: --wire-log FILE gets the control-mode
// traffic both ways (0600), and tmux.sock is 0600. After a stop, no
// goroutine of serve is left (the tmux client's event stream included).
func TestServeWireLogAndSocketMode(t *testing.T) {
	before := goleak.IgnoreCurrent()
	wl := filepath.Join(os.TempDir(), "skc-wire-"+strconv.Itoa(os.Getpid())+".log")
	t.Cleanup(func() { os.Remove(wl) })
	s := startServe(t, "--wire-log", wl)
	waitUntil(t, "traffic in the wire log", func() bool {
		b, _ := os.ReadFile(wl)
		return bytes.Contains(b, []byte(` > "display-message"`)) && bytes.Contains(b, []byte(" < %begin "))
	})
	fi, err := os.Stat(wl)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("wire log mode %v %v, want 0600", fi.Mode(), err)
	}
	si, err := os.Lstat(filepath.Join(s.home, "tmux.sock"))
	if err != nil || si.Mode().Perm()&0o666 != 0o600 || si.Mode()&os.ModeSocket == 0 {
		t.Fatalf("tmux.sock %v %v, want a 0600 socket", si.Mode(), err)
	}
	s.stop(t)
	goleak.VerifyNone(t, before)
}

// TestServeSIGHUPReopensVerdictLog: after logrotate moves verdicts.jsonl
// away, SIGHUP makes serve open a new one at the same path.
func TestServeSIGHUPReopensVerdictLog(t *testing.T) {
	s := startServe(t)
	path := filepath.Join(s.home, "verdicts.jsonl")
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	// serve has been catching SIGHUP since before it said ready.
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "verdict log reopened", func() bool {
		return strings.Contains(s.stderr.String(), `"message":"verdict log reopened"`)
	})
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("verdicts.jsonl after SIGHUP: %v %v", fi, err)
	}
	s.stop(t)
}

// TestScopedStarterOffOutsideSystemd: not a systemd service → no hook, the
// control client starts the server.
func TestScopedStarterOffOutsideSystemd(t *testing.T) {
	t.Setenv("INVOCATION_ID", "")
	if (&daemon{}).scopedStarter() != nil {
		t.Fatal("a StartServer hook outside systemd")
	}
}

// TestServeRefusesNewerFence: a home whose fence a newer binary migrated (an
// upgrade, then a downgrade) is refused with fence_schema_newer and exit 2,
// which the systemd unit does not retry, and the fence is left as it was.
func TestServeRefusesNewerFence(t *testing.T) {
	dir, err := os.MkdirTemp("", "skcs")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "fence.sqlite")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	env := map[string]string{"SKC_HOME": dir, "SKC_TMUX": "/nonexistent/tmux", "HOME": dir, "INVOCATION_ID": ""}
	stderr := &syncBuffer{}
	cli := &CLI{ctx: context.Background(), stdout: &syncBuffer{}, stderr: stderr, getenv: func(k string) string { return env[k] }}
	if code := cli.Main([]string{"serve"}); code != 2 || !strings.Contains(stderr.String(), "(fence_schema_newer)") {
		t.Fatalf("serve on a newer fence: exit %d\n%s", code, stderr.String())
	}
	if db, err = sql.Open("sqlite", path); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != 99 {
		t.Fatalf("the fence's version after the refusal: %d %v", v, err)
	}
}

// TestServeListensAgainWhenAPISocketRemoved: api.sock removed while serve
// runs (a cleaner of /tmp): serve listens there again, so the CLI reaches
// it, instead of holding its home unreachable until killed; its stop leaves
// no goroutine behind.
func TestServeListensAgainWhenAPISocketRemoved(t *testing.T) {
	old := apiSocketLook
	apiSocketLook = 50 * time.Millisecond
	t.Cleanup(func() { apiSocketLook = old })
	before := goleak.IgnoreCurrent()
	s := startServe(t)
	sock := filepath.Join(s.home, "api.sock")
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	c := api.NewClient(sock)
	waitUntil(t, "the API answering again", func() bool { return c.Ping(context.Background()) == nil })
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("api.sock again: %v %v, want 0600", fi, err)
	}
	s.stop(t)
	goleak.VerifyNone(t, before)
}

// TestSocketAnswers: attach's check before it execs tmux, whose
// attach-session at a path where nothing answers starts a throw-away server
// and leaves a stale socket.
func TestSocketAnswers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s")
	if socketAnswers(path, 0) {
		t.Fatal("a missing socket answers")
	}
	ln, err := api.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if !socketAnswers(path, 0) {
		t.Fatal("a listening socket does not answer")
	}
}

// TestFenceNameHidesPassword: the start's log line names the fleet's database
// without any password, wherever the URL put one (the query too; found
// outside-in: postgres.Open refuses such a URL, but the line came first).
func TestFenceNameHidesPassword(t *testing.T) {
	for _, u := range []string{
		"postgresql://fence@127.0.0.1:5432/skc?sslmode=disable&password=hunter2",
		"postgres://fence:hunter2@127.0.0.1:5432/skc",
		"host=127.0.0.1 user=fence dbname=skc password=hunter2",
	} {
		got := fenceName(home.Paths{FenceURL: u})
		if strings.Contains(got, "hunter2") || !strings.Contains(got, "127.0.0.1") {
			t.Fatalf("fenceName(%q) = %q", u, got)
		}
	}
}

// TestCreateAttachLineReachesTheSameDaemon: the attach line a create prints
// carries the --home and --runtime-dir the create was given, so that pasted
// it reaches the daemon that made the session (it reached the default one;
// found outside-in).
func TestCreateAttachLineReachesTheSameDaemon(t *testing.T) {
	var o opts
	o.o.Home, o.o.RuntimeDir = "/tmp/my home", "/run/x"
	var b bytes.Buffer
	printCreate(&b, api.CreateResponse{Status: "published", Session: api.Session{Name: "skc-1-2"}}, attachPrefix(o))
	if want := "attach: skc-supervisor --home '/tmp/my home' --runtime-dir /run/x attach skc-1-2\n"; !strings.HasSuffix(b.String(), want) {
		t.Fatalf("printed %q, want the line %q", b.String(), want)
	}
}

// TestServeRefusalLeavesNoServerAndSaysWhy: a start refused for what is at
// the API socket's path (here a directory) is refused before any tmux server
// is started or joined — it left one running (found outside-in) — and the
// refusal's log line carries the error's code and details, which serve's one
// text line does not.
func TestServeRefusalLeavesNoServerAndSaysWhy(t *testing.T) {
	tmuxtest.Need(t)
	dir, err := os.MkdirTemp("", "skcs")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "tmux.sock")
	defer killTmux(sock)
	if err := os.Mkdir(filepath.Join(dir, "api.sock"), 0o700); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SKC_HOME": dir, "SKC_TMUX": tmuxtest.Bin(), "SKC_TMUX_CONFIG": "/dev/null", "HOME": dir, "INVOCATION_ID": ""}
	stderr := &syncBuffer{}
	cli := &CLI{ctx: context.Background(), stdout: &syncBuffer{}, stderr: stderr, getenv: func(k string) string { return env[k] }}
	if code := cli.Main([]string{"serve"}); code != 2 {
		t.Fatalf("serve with a directory at api.sock: exit %d\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), `"code":"invalid_request","details":{"field":"runtime_dir","path":"`) {
		t.Fatalf("the refusal's log line has no code and details:\n%s", stderr.String())
	}
	if _, err := os.Lstat(sock); err == nil {
		t.Fatalf("a refused start made a tmux server at %s", sock)
	}
}
