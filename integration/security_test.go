package integration

import (
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	_ "modernc.org/sqlite"
)

// integrityCheck runs PRAGMA integrity_check on a (stopped daemon's) database.
func integrityCheck(t testing.TB, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var res string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&res); err != nil || res != "ok" {
		t.Errorf("PRAGMA integrity_check on %s: %q %v, want ok", path, res, err)
	}
}

// TestFileModes: the home is 0700, the API socket and the state files 0600, and
// nothing in the home is open to group or others. tmux manages its own socket's
// mode (it sets the execute bits while clients are attached), so tmux.sock is
// checked for no group/other access only.
func TestFileModes(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	d.MustCreate(t, NewSpec(t, "modes"), "published")
	want := map[string]os.FileMode{
		".": 0o700, "api.sock": 0o600, "fence.sqlite": 0o600, "verdicts.jsonl": 0o600,
	}
	for name, mode := range want {
		fi, err := os.Lstat(filepath.Join(d.Dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %04o, want %04o", name, fi.Mode().Perm(), mode)
		}
	}
	fi, err := os.Lstat(d.TmuxSock())
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("tmux.sock: %v %v, want a socket with no group/other access", fi, err)
	}
	filepath.Walk(d.Dir, func(path string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: mode %04o is open to group or others", path, fi.Mode().Perm())
		}
		return nil
	})
}

// TestBadHome: serve refuses a symlinked home, a group-writable home and a home
// whose socket paths would be too long, with a clear error naming the path.
func TestBadHome(t *testing.T) {
	t.Parallel()
	t.Run("symlink", func(t *testing.T) {
		t.Parallel()
		parent := mkTemp(t)
		real, link := filepath.Join(parent, "real"), filepath.Join(parent, "link")
		os.Mkdir(real, 0o700)
		if err := os.Symlink(real, link); err != nil {
			t.Fatal(err)
		}
		expectServeRefused(t, homeAt(t, link, parent), link)
	})
	t.Run("group-writable", func(t *testing.T) {
		t.Parallel()
		dir := mkTemp(t)
		if err := os.Chmod(dir, 0o770); err != nil {
			t.Fatal(err)
		}
		expectServeRefused(t, homeAt(t, dir, dir), dir)
	})
	t.Run("socket path too long", func(t *testing.T) {
		t.Parallel()
		parent := mkTemp(t)
		dir := filepath.Join(parent, strings.Repeat("d", 110))
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		h := homeAt(t, dir, parent)
		log := expectServeRefused(t, h, dir)
		api, tmux := h.APISock(), h.TmuxSock()
		if !(strings.Contains(log, api) && strings.Contains(log, strconv.Itoa(len(api)))) &&
			!(strings.Contains(log, tmux) && strings.Contains(log, strconv.Itoa(len(tmux)))) {
			t.Errorf("startup error does not name the socket path and its length (%d)", len(api))
		}
	})
}

func mkTemp(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "skc")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// expectServeRefused starts serve in h and requires it to exit non-zero (not 75:
// nobody else holds the home) with stderr naming path. It returns the log.
func expectServeRefused(t *testing.T, h *Home, path string) string {
	t.Helper()
	d := h.Start(t, DaemonOpts{NoWait: true})
	st := d.WaitExit(t, startDeadline)
	if st == nil {
		d.Kill(t)
		t.Fatalf("serve accepted home %s (still running)\n%s", path, clip(d.Log()))
	}
	log := d.Log()
	if st.Success() || st.ExitCode() == 75 || !strings.Contains(log, path) {
		t.Errorf("serve on %s: %v, want a non-zero exit (not 75) with an error naming the path\n%s", path, st, clip(log))
	}
	if _, ok := h.liveServerPID(); ok {
		t.Errorf("a refused serve left a tmux server running")
	}
	return log
}

// TestHomeCreated: a home that does not exist yet is created 0700 by serve.
func TestHomeCreated(t *testing.T) {
	t.Parallel()
	parent := mkTemp(t)
	dir := filepath.Join(parent, "new")
	h := homeAt(t, dir, parent)
	d := h.Start(t, DaemonOpts{})
	fi, err := os.Stat(d.Dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("created home: %v %v, want mode 0700", fi.Mode(), err)
	}
	d.MustCreate(t, NewSpec(t, "in-new-home"), "published")
}
