package doctor

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/postgres"
	"github.com/skc-supervisor/skc-supervisor/internal/pgtest"
	"github.com/skc-supervisor/skc-supervisor/internal/testwatch"
	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

func TestMain(m *testing.M) {
	testwatch.Arm()
	goleak.VerifyTestMain(m)
}

// shortDir is a fresh 0700 directory with a short path, so sockets fit.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "skc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func cfgFor(dir string) Config {
	return Config{Home: dir, RuntimeDir: dir, TmuxPath: tmuxtest.Bin(), Timeout: 30 * time.Second}
}

func one(t *testing.T, rs []Result, want Status, contains string) Result {
	t.Helper()
	if len(rs) != 1 {
		t.Fatalf("want one result, got %+v", rs)
	}
	r := rs[0]
	if r.Status != want || !strings.Contains(r.Message, contains) {
		t.Fatalf("got %s %q (fix %q), want %s containing %q", r.Status, r.Message, r.Fix, want, contains)
	}
	if (want == Warn || want == Fail) && r.Fix == "" {
		t.Fatalf("problem without a fix line: %+v", r)
	}
	return r
}

func TestTmux(t *testing.T) {
	ctx := context.Background()
	c := cfgFor(shortDir(t))
	if _, err := os.Stat("/usr/bin/tmux"); err == nil {
		c.TmuxPath = "/usr/bin/tmux"
		one(t, checkTmux(ctx, c), OK, "tmux 3.")
	}
	c.TmuxPath = "/nonexistent/skc/tmux"
	one(t, checkTmux(ctx, c), Fail, "not found")
}

func TestTmuxVersion(t *testing.T) {
	cases := map[string]Status{
		"tmux 3.3a": OK, "tmux 3.3": OK, "tmux 3.4": OK, "tmux 3.10": OK, "tmux 4.0": OK,
		"tmux next-3.5": OK, "tmux 3.2a": Fail, "tmux 2.9": Fail, "tmux master": Warn,
	}
	for v, want := range cases {
		if got := tmuxVersion("/t", v); got.Status != want {
			t.Errorf("%q: %s, want %s", v, got.Status, want)
		}
	}
}

func TestTmuxConfig(t *testing.T) {
	ctx := context.Background()
	dir := shortDir(t)
	c := cfgFor(dir)
	one(t, checkTmuxConfig(ctx, c), OK, "not set")
	c.TmuxConfig = "/dev/null"
	one(t, checkTmuxConfig(ctx, c), OK, "/dev/null")
	c.TmuxConfig = filepath.Join(dir, "missing.conf")
	one(t, checkTmuxConfig(ctx, c), Fail, "cannot be read")
	c.TmuxConfig = dir
	one(t, checkTmuxConfig(ctx, c), Fail, "directory")
}

func TestSocketPaths(t *testing.T) {
	c := cfgFor(shortDir(t))
	for _, r := range checkSocketPaths(context.Background(), c) {
		if r.Status != OK {
			t.Fatalf("short dir: %+v", r)
		}
	}
	c.RuntimeDir = "/" + strings.Repeat("d", 100)
	rs := checkSocketPaths(context.Background(), c)
	if len(rs) != 2 || rs[0].Status != Fail || rs[1].Status != Fail || !strings.Contains(rs[0].Message, "bytes") {
		t.Fatalf("long dir: %+v", rs)
	}
}

func TestDirs(t *testing.T) {
	base := shortDir(t)
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(mk("target", 0o700), link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		dir      string
		want     Status
		contains string
	}{
		{mk("good", 0o700), OK, "0700"},
		{mk("groupw", 0o770), Fail, "writable by group"},
		{mk("otherw", 0o703), Fail, "writable by group or others"},
		{mk("readable", 0o755), Warn, "want 0700"},
		{link, Fail, "symlink"},
		{file, Fail, "not a directory"},
		{filepath.Join(base, "missing"), Skip, "does not exist"},
	}
	for _, tc := range cases {
		c := Config{Home: tc.dir, RuntimeDir: tc.dir}
		one(t, checkDirs(context.Background(), c), tc.want, tc.contains)
	}
	rs := checkDirs(context.Background(), Config{Home: cases[0].dir, RuntimeDir: cases[1].dir})
	if len(rs) != 2 || rs[0].Status != OK || rs[1].Status != Fail || rs[1].Check != "runtime_dir" {
		t.Fatalf("distinct runtime dir: %+v", rs)
	}
}

func TestFiles(t *testing.T) {
	dir := shortDir(t)
	write := func(name string, mode os.FileMode) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("fence.sqlite", 0o600)
	write("verdicts.jsonl", 0o644)
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "supervisor.lock")); err != nil {
		t.Fatal(err)
	}
	rs := checkFiles(context.Background(), cfgFor(dir))
	want := []Status{OK, Warn, Fail}
	for i, r := range rs {
		if r.Status != want[i] {
			t.Errorf("%d: %+v, want %s", i, r, want[i])
		}
	}
	write("verdicts.jsonl", 0o666)
	if rs := checkFiles(context.Background(), cfgFor(dir)); rs[1].Status != Fail {
		t.Errorf("world-writable verdicts: %+v", rs[1])
	}
	empty := shortDir(t)
	for _, r := range checkFiles(context.Background(), cfgFor(empty)) {
		if r.Status != Skip {
			t.Errorf("fresh home: %+v", r)
		}
	}
}

// snapshot records names, sizes and mtimes of a directory's entries, to prove
// the read-only check changed nothing.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range es {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(e.Name() + " " + strconv.FormatInt(fi.Size(), 10) + " " + fi.ModTime().String() + "\n")
	}
	return b.String()
}

func TestDatabase(t *testing.T) {
	ctx := context.Background()
	dir := shortDir(t)
	c := cfgFor(dir)
	one(t, checkDatabase(ctx, c), Skip, "does not exist")
	if _, err := os.Stat(filepath.Join(dir, "fence.sqlite")); !os.IsNotExist(err) {
		t.Fatalf("the check created the database: %v", err)
	}

	path := filepath.Join(dir, "fence.sqlite")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (2)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before := snapshot(t, dir)
	one(t, checkDatabase(ctx, c), OK, "integrity_check ok")
	if after := snapshot(t, dir); after != before {
		t.Fatalf("read-only check changed the directory:\n%s\n→\n%s", before, after)
	}

	// A live daemon: a writer connection keeps the WAL open while we check.
	live, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if _, err := live.Exec("INSERT INTO t VALUES (3)"); err != nil {
		t.Fatal(err)
	}
	one(t, checkDatabase(ctx, c), OK, "integrity_check ok")
	live.Close()

	garbage := bytes.Repeat([]byte("not a database, just garbage bytes \x00\xff"), 200)
	if err := os.WriteFile(path, garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	one(t, checkDatabase(ctx, c), Fail, "fence.sqlite")
	if got, _ := os.ReadFile(path); !bytes.Equal(got, garbage) {
		t.Fatal("the check modified the corrupt file")
	}
}

// serveAPI answers on dir/api.sock like the daemon would, with handler.
func serveAPI(t *testing.T, dir string, handler http.HandlerFunc) {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(dir, "api.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: time.Minute}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
}

func TestDaemon(t *testing.T) {
	ctx := context.Background()
	dir := shortDir(t)
	r := one(t, checkDaemon(ctx, cfgFor(dir)), Fail, "not running")
	if !strings.Contains(r.Fix, "systemctl --user start") || !strings.Contains(r.Fix, "serve --home \""+dir+"\"") {
		t.Fatalf("fix %q", r.Fix)
	}
	// A fresh home (not made yet): nothing to run yet, not a problem.
	fresh := cfgFor(dir)
	fresh.Home = filepath.Join(dir, "fresh")
	one(t, checkDaemon(ctx, fresh), Skip, "not started yet")
	apart := cfgFor(dir)
	apart.RuntimeDir = filepath.Join(dir, "run")
	if r := one(t, checkDaemon(ctx, apart), Fail, "not running"); !strings.Contains(r.Fix, "--runtime-dir \""+apart.RuntimeDir+"\"") {
		t.Fatalf("fix without the runtime dir doctor looked in: %q", r.Fix)
	}

	serveAPI(t, dir, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/ping" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"ok": true}`))
	})
	one(t, checkDaemon(ctx, cfgFor(dir)), OK, "answers")

	bad := shortDir(t)
	serveAPI(t, bad, func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", 500) })
	if err := os.WriteFile(filepath.Join(bad, "supervisor.lock"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	one(t, checkDaemon(ctx, cfgFor(bad)), Fail, "pid "+strconv.Itoa(os.Getpid())+" is running but does not answer")
}

func TestDaemonStaleSocket(t *testing.T) {
	dir := shortDir(t)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "api.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false) // leave the file behind, as a SIGKILLed daemon does
	ln.Close()
	one(t, checkDaemon(context.Background(), cfgFor(dir)), Fail, "stale socket")
}

func TestPty(t *testing.T) {
	dir := shortDir(t)
	set := func(nr, limit int) {
		for name, v := range map[string]int{"nr": nr, "max": limit} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(strconv.Itoa(v)+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := Config{PtyDir: dir}
	set(12, 4096)
	one(t, checkPty(context.Background(), c), OK, "12 of 4096")
	set(3500, 4096)
	r := one(t, checkPty(context.Background(), c), Warn, "85%")
	if !strings.Contains(r.Fix, "kernel.pty.max=8192") {
		t.Fatalf("fix %q", r.Fix)
	}
	c.PtyDir = filepath.Join(dir, "missing")
	one(t, checkPty(context.Background(), c), Skip, "unavailable")
}

func TestRun(t *testing.T) {
	dir := shortDir(t)
	ptys := shortDir(t)
	for name, v := range map[string]string{"nr": "1", "max": "4096"} {
		if err := os.WriteFile(filepath.Join(ptys, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	serveAPI(t, dir, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"ok":true}`)) })
	c := cfgFor(dir)
	c.PtyDir = ptys
	if _, err := os.Stat("/usr/bin/tmux"); err != nil {
		t.Skip("tmux not installed")
	}
	var out bytes.Buffer
	if code := Run(context.Background(), c, &out, false); code != 0 {
		t.Fatalf("healthy home: exit %d\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "all checks passed") {
		t.Fatalf("text output:\n%s", out.String())
	}

	c.TmuxPath = "/nonexistent/tmux"
	if err := os.Chmod(dir, 0o770); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := Run(context.Background(), c, &out, true); code != 1 {
		t.Fatalf("broken home: exit %d\n%s", code, out.String())
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("json: %v\n%s", err, out.String())
	}
	if rep.OK || rep.Problems() != 2 || rep.Checks[0].Check != "tmux" || rep.Checks[0].Status != Fail {
		t.Fatalf("report: %+v", rep)
	}
}

func TestShq(t *testing.T) {
	for in, want := range map[string]string{
		"/a/b.sqlite": "/a/b.sqlite", "/a b": "'/a b'", "/it's": `'/it'\''s'`, "": "''", "/$x": "'/$x'",
	} {
		if got := shq(in); got != want {
			t.Errorf("shq(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestProcessHold: the check always answers, and says which hold applies.
func TestProcessHold(t *testing.T) {
	rs := checkCgroups(context.Background(), Config{})
	if len(rs) != 1 || rs[0].Check != "process_hold" || rs[0].Status != OK ||
		!strings.Contains(rs[0].Message, "held by") {
		t.Fatalf("process_hold: %+v", rs)
	}
}

// TestDatabaseFleet: a home whose daemon uses a fleet's PostgreSQL fence (its
// fence.conf) is checked against that database — no schema yet, one it can
// use, the server down — and not against a fence.sqlite that serve never
// makes there (doctor said "serve creates it" and passed while the fleet's
// database was down; found outside-in).
func TestDatabaseFleet(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	url, err := srv.CreateDB(ctx, "doctorfleet")
	if err != nil {
		t.Fatal(err)
	}
	dir := shortDir(t)
	conf, _ := json.Marshal(map[string]string{"fence": url, "host": "h1"})
	if err := os.WriteFile(filepath.Join(dir, "fence.conf"), conf, 0o600); err != nil {
		t.Fatal(err)
	}
	c := cfgFor(dir)
	one(t, checkDatabase(ctx, c), Skip, "no fence schema yet")
	st, err := postgres.Open(url, fence.Options{Host: fence.Host{Name: "h1"}}, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	one(t, checkDatabase(ctx, c), OK, "schema version")
	for _, r := range checkFiles(ctx, c) {
		if strings.Contains(r.Message, "fence.sqlite") {
			t.Fatalf("a fleet home's files: %+v", r)
		}
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	one(t, checkDatabase(ctx, c), Fail, "postgres://")
}
