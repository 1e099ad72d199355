package home

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

func envOf(m map[string]string) Env { return func(k string) string { return m[k] } }

func TestResolveDefaults(t *testing.T) {
	uid := strconv.Itoa(os.Getuid())
	cases := []struct {
		name          string
		o             Overrides
		env           map[string]string
		home, runtime string
	}{
		{"xdg", Overrides{}, map[string]string{"XDG_STATE_HOME": "/x/state", "XDG_RUNTIME_DIR": "/run/user/7"},
			"/x/state/skc", "/run/user/7/skc"},
		{"home fallback", Overrides{}, map[string]string{"HOME": "/h"}, "/h/.local/state/skc", "/tmp/skc-" + uid},
		{"relative xdg ignored", Overrides{}, map[string]string{"HOME": "/h", "XDG_STATE_HOME": "rel", "XDG_RUNTIME_DIR": "rel"},
			"/h/.local/state/skc", "/tmp/skc-" + uid},
		{"SKC_HOME moves runtime", Overrides{}, map[string]string{"SKC_HOME": "/s", "XDG_RUNTIME_DIR": "/run/user/7"}, "/s", "/s"},
		{"--home moves runtime", Overrides{Home: "/f"}, map[string]string{"SKC_HOME": "/s", "XDG_RUNTIME_DIR": "/r"}, "/f", "/f"},
		{"runtime env", Overrides{}, map[string]string{"SKC_HOME": "/s", "SKC_RUNTIME_DIR": "/rt"}, "/s", "/rt"},
		{"runtime flag wins", Overrides{RuntimeDir: "/rf"}, map[string]string{"SKC_RUNTIME_DIR": "/rt", "HOME": "/h"},
			"/h/.local/state/skc", "/rf"},
		{"clean", Overrides{Home: "/a/../b/"}, nil, "/b", "/b"},
		// No HOME (cron, a service) or a relative one: the password database's
		// home, never the working directory's "rel".
		{"no HOME", Overrides{}, map[string]string{"SKC_RUNTIME_DIR": "/rt"}, pwHome(t) + "/.local/state/skc", "/rt"},
		{"relative HOME ignored", Overrides{}, map[string]string{"HOME": "rel"}, pwHome(t) + "/.local/state/skc", "/tmp/skc-" + uid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Resolve(c.o, envOf(c.env))
			if err != nil {
				t.Fatal(err)
			}
			if p.Home != c.home || p.RuntimeDir != c.runtime {
				t.Fatalf("got home %q runtime %q, want %q %q", p.Home, p.RuntimeDir, c.home, c.runtime)
			}
		})
	}
}

func TestResolveRelativeAndTmux(t *testing.T) {
	wd, _ := os.Getwd()
	p, err := Resolve(Overrides{Home: "rel", TmuxConfig: "t.conf"}, envOf(map[string]string{"SKC_TMUX": "/usr/bin/tmux"}))
	if err != nil {
		t.Fatal(err)
	}
	if p.Home != filepath.Join(wd, "rel") || p.TmuxConfig != filepath.Join(wd, "t.conf") || p.Tmux != "/usr/bin/tmux" {
		t.Fatalf("got %+v", p)
	}
	p, _ = Resolve(Overrides{Tmux: "/opt/tmux"}, envOf(map[string]string{"SKC_TMUX": "/usr/bin/tmux", "SKC_TMUX_CONFIG": "/etc/x"}))
	if p.Tmux != "/opt/tmux" || p.TmuxConfig != "/etc/x" {
		t.Fatalf("got %+v", p)
	}
	p, _ = Resolve(Overrides{}, envOf(map[string]string{"HOME": "/h"}))
	if p.Tmux != "tmux" || p.TmuxConfig != "" {
		t.Fatalf("got %+v", p)
	}
	if p.APISocket() != filepath.Join(p.RuntimeDir, "api.sock") || p.Lock() != "/h/.local/state/skc/supervisor.lock" ||
		p.Fence() != "/h/.local/state/skc/fence.sqlite" || p.Verdicts() != "/h/.local/state/skc/verdicts.jsonl" {
		t.Fatalf("file paths: %s %s %s", p.APISocket(), p.Lock(), p.Fence())
	}
}

func tempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "skch")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func wantField(t *testing.T, err error, field string) {
	t.Helper()
	e := verdict.AsError(err)
	if e == nil || e.Code != verdict.CodeInvalidRequest || e.Details["field"] != field {
		t.Fatalf("want invalid_request on %s, got %v", field, err)
	}
}

func TestPrepareCreatesPrivateDirs(t *testing.T) {
	d := tempDir(t)
	p := Paths{Home: filepath.Join(d, "h", "deep"), RuntimeDir: filepath.Join(d, "r")}
	if err := p.Prepare(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{p.Home, p.RuntimeDir} {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v %v", dir, fi.Mode(), err)
		}
	}
	if err := p.Prepare(); err != nil { // idempotent
		t.Fatal(err)
	}
}

func TestPrepareRefusesUnsafeDirs(t *testing.T) {
	d := tempDir(t)
	open := filepath.Join(d, "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o777)
	err := Paths{Home: open, RuntimeDir: open}.Prepare()
	wantField(t, err, "home")
	if !strings.Contains(err.Error(), open) || !strings.Contains(err.Error(), "writable") {
		t.Fatalf("message should name the path and why: %v", err)
	}

	real := filepath.Join(d, "real")
	os.Mkdir(real, 0o700)
	link := filepath.Join(d, "link")
	os.Symlink(real, link)
	err = Paths{Home: real, RuntimeDir: link}.Prepare()
	wantField(t, err, "runtime_dir")
	if !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("got %v", err)
	}

	file := filepath.Join(d, "file")
	os.WriteFile(file, nil, 0o600)
	wantField(t, Paths{Home: file, RuntimeDir: real}.Prepare(), "home")
}

func TestCheckDirOtherOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown a directory to another uid")
	}
	d := tempDir(t)
	other := filepath.Join(d, "other")
	os.Mkdir(other, 0o700)
	if err := os.Chown(other, 65534, 65534); err != nil {
		t.Skip(err)
	}
	err := CheckDir(other, "home")
	wantField(t, err, "home")
	if !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("got %v", err)
	}
}

func TestSocketPathTooLong(t *testing.T) {
	d := tempDir(t)
	long := filepath.Join(d, strings.Repeat("x", 100))
	err := Paths{Home: d, RuntimeDir: long}.Prepare()
	e := verdict.AsError(err)
	sock := filepath.Join(long, "api.sock")
	if e == nil || e.Details["length"] != len(sock) || !strings.Contains(e.Message, sock) ||
		!strings.Contains(e.Message, strconv.Itoa(len(sock))) {
		t.Fatalf("want an error naming %s and its length, got %v", sock, err)
	}
	if _, err := os.Lstat(long); err == nil {
		t.Fatalf("a refused layout left %s behind", long)
	}
	if err := CheckSocketPath("/" + strings.Repeat("a", 106)); err != nil {
		t.Fatalf("107 bytes must fit: %v", err)
	}
	if err := CheckSocketPath("/" + strings.Repeat("a", 107)); err == nil {
		t.Fatal("108 bytes must not fit")
	}
}

func TestLockSecondHolderIsBusyWithPID(t *testing.T) {
	d := tempDir(t)
	path := filepath.Join(d, LockFile)
	l, err := Acquire(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("lock mode %v", fi.Mode())
	}
	if l.PID() != os.Getpid() {
		t.Fatalf("pid %d", l.PID())
	}
	_, err = Acquire(path)
	e := verdict.AsError(err)
	if e == nil || e.Code != verdict.CodeBusy || verdict.Classify(e.Code).Exit != 75 ||
		e.Details["holder_pid"] != os.Getpid() || !strings.Contains(e.Message, strconv.Itoa(os.Getpid())) {
		t.Fatalf("want busy naming pid %d, got %v", os.Getpid(), err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(path)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	l2.Release()
}

// TestLockHeldByAnotherProcess holds the lock from a child process (flock
// from util-linux) and checks the holder's pid is named.
func TestLockHeldByAnotherProcess(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock(1) not installed")
	}
	d := tempDir(t)
	path := filepath.Join(d, LockFile)
	ready := filepath.Join(d, "ready")
	cmd := exec.Command("flock", "-x", path, "sh", "-c", `echo $$ > "$1"; : > "$2"; exec sleep 60`, "sh", path, ready)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil })
	b, _ := os.ReadFile(path)
	holder, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	// flock(1) runs the shell (which became sleep) as its child: end that
	// one too, by its pid, or it would hold the lock after the test.
	t.Cleanup(func() {
		if holder > 0 {
			syscall.Kill(holder, syscall.SIGKILL)
		}
	})
	_, err := Acquire(path)
	e := verdict.AsError(err)
	if e == nil || e.Code != verdict.CodeBusy || e.Details["holder_pid"] != holder || holder == 0 {
		t.Fatalf("want busy naming %d, got %v", holder, err)
	}
}

// TestPrepareTightensExistingHome: a home made by hand (0755, a 0644 fence
// holding agents' env) is tightened to 0700/0600; a state file that is a
// symlink or has a second hard link is refused with details.reason.
func TestPrepareTightensExistingHome(t *testing.T) {
	d := tempDir(t)
	h := filepath.Join(d, "h")
	os.Mkdir(h, 0o700)
	os.Chmod(h, 0o755)
	for _, f := range []string{FenceFile, FenceFile + "-wal", VerdictsFile} {
		os.WriteFile(filepath.Join(h, f), []byte("x"), 0o644)
	}
	p := Paths{Home: h, RuntimeDir: h}
	noted := map[string]bool{}
	if err := p.PrepareNoting(func(path string, from, to os.FileMode) { noted[filepath.Base(path)] = from != to }); err != nil {
		t.Fatal(err)
	}
	if !noted["h"] || !noted[FenceFile] || !noted[VerdictsFile] {
		t.Fatalf("changes not noted: %v", noted)
	}
	if fi, _ := os.Stat(h); fi.Mode().Perm() != 0o700 {
		t.Fatalf("home %v", fi.Mode())
	}
	for _, f := range []string{FenceFile, FenceFile + "-wal", VerdictsFile} {
		if fi, _ := os.Stat(filepath.Join(h, f)); fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s %v", f, fi.Mode())
		}
	}

	other := filepath.Join(d, "elsewhere.sqlite")
	os.Rename(filepath.Join(h, FenceFile), other)
	os.Symlink(other, filepath.Join(h, FenceFile))
	wantReason(t, p.Prepare(), "symlink")

	os.Remove(filepath.Join(h, FenceFile))
	os.Link(other, filepath.Join(h, FenceFile))
	wantReason(t, p.Prepare(), "hard_links")
	if fi, _ := os.Stat(other); fi.Mode().Perm() != 0o600 {
		t.Fatalf("the refused file was changed: %v", fi.Mode())
	}
}

func wantReason(t *testing.T, err error, reason string) {
	t.Helper()
	wantField(t, err, "home")
	if e := verdict.AsError(err); e.Details["reason"] != reason || !strings.Contains(e.Message, FenceFile) {
		t.Fatalf("want reason %s naming the file, got %v %v", reason, err, e.Details)
	}
}

// TestResolveFence: --fence wins over SKC_FENCE, which wins over the
// embedded default; anything but "sqlite" or a postgres:// URL is refused
// with field fence.
func TestResolveFence(t *testing.T) {
	p, err := Resolve(Overrides{Home: "/h"}, envOf(nil))
	if err != nil || p.FenceURL != FenceSQLite {
		t.Fatalf("default: %+v %v", p, err)
	}
	env := envOf(map[string]string{"SKC_FENCE": "postgres:///env"})
	if p, err = Resolve(Overrides{Home: "/h"}, env); err != nil || p.FenceURL != "postgres:///env" {
		t.Fatalf("env: %+v %v", p, err)
	}
	p, err = Resolve(Overrides{Home: "/h", Fence: "postgresql://db/fence"}, env)
	if err != nil || p.FenceURL != "postgresql://db/fence" {
		t.Fatalf("flags: %+v %v", p, err)
	}
	for _, bad := range []string{"mysql://x", "fence.sqlite", "SQLITE", "host=db user=u password=S3cret"} {
		_, err := Resolve(Overrides{Home: "/h", Fence: bad}, envOf(nil))
		if e := verdict.AsError(err); e == nil || e.Code != verdict.CodeInvalidRequest || e.Details["field"] != "fence" {
			t.Errorf("fence %q: %v, want invalid_request field fence", bad, err)
		}
		// Never repeated: a key=value string may carry a password (found outside-in).
		if err != nil && strings.Contains(err.Error(), "S3cret") {
			t.Errorf("the refusal repeats the value: %v", err)
		}
	}
}

// pwHome is the user's home in the password database (TestResolveDefaults).
func pwHome(t *testing.T) string {
	u, err := user.Current()
	if err != nil || !filepath.IsAbs(u.HomeDir) {
		t.Skipf("no home in the password database: %v", err)
	}
	return filepath.Clean(u.HomeDir)
}

// TestResolveRefusesControlCharacters: a home, runtime dir or tmux config path
// with NUL, CR or LF is refused by Resolve, naming the field and the path,
// before anything is created.
func TestResolveRefusesControlCharacters(t *testing.T) {
	for _, c := range []struct {
		o     Overrides
		env   map[string]string
		field string
	}{
		{Overrides{}, map[string]string{"SKC_HOME": "/tmp/a\nb"}, "home"},
		{Overrides{Home: "/h", RuntimeDir: "/tmp/r\rx"}, nil, "runtime_dir"},
		{Overrides{Home: "/h", TmuxConfig: "/tmp/c\nx"}, nil, "tmux_config"},
	} {
		_, err := Resolve(c.o, envOf(c.env))
		e := verdict.AsError(err)
		if e == nil || e.Code != verdict.CodeInvalidRequest || e.Details["field"] != c.field || !strings.Contains(e.Message, `\n`) && !strings.Contains(e.Message, `\r`) {
			t.Errorf("%+v %v: %v", c.o, c.env, err)
		}
	}
}

// TestHolderSeesTheLockWithoutTakingIt: Holder names the process holding a
// home's instance lock from the kernel's table, and a home nobody holds has
// none — and the probe never takes the lock, so a daemon starting beside it
// is never refused.
func TestHolderSeesTheLockWithoutTakingIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), LockFile)
	if _, held := Holder(path); held {
		t.Fatal("held before the file exists")
	}
	l, err := Acquire(path)
	if err != nil {
		t.Fatal(err)
	}
	if pid, held := Holder(path); !held || pid != os.Getpid() {
		t.Fatalf("Holder = %d %v, want us (%d)", pid, held, os.Getpid())
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if _, held := Holder(path); held {
		t.Fatal("held after the release")
	}
	l, err = Acquire(path) // the probe left nothing behind
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
}
