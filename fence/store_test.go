package fence

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestOpenCreatesPrivateFiles(t *testing.T) {
	home := filepath.Join(t.TempDir(), "a", "home")
	path := filepath.Join(home, "fence.sqlite")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.AppendVerdict(ctx, testRecord("published")); err != nil { // a write: -wal exists
		t.Fatal(err)
	}
	if m := mode(t, home); m != 0o700 {
		t.Fatalf("dir mode %04o", m)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if m := mode(t, p); m != 0o600 {
			t.Fatalf("%s mode %04o", p, m)
		}
	}
	if !s.OFD() {
		t.Log("OFD locking not in effect on this kernel/filesystem (POSIX fallback)")
	}
	var jm string
	if err := s.r.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&jm); err != nil || jm != "wal" {
		t.Fatalf("journal_mode %q %v", jm, err)
	}
}

func TestOpenRefusesUnsafePaths(t *testing.T) {
	root := t.TempDir()
	mk := func(name string, perm os.FileMode) string {
		d := filepath.Join(root, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, perm); err != nil {
			t.Fatal(err)
		}
		return d
	}
	real := mk("real", 0o700)
	if err := os.Symlink(real, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	gw := mk("groupw", 0o770)
	ww := mk("worldw", 0o703)
	fileLinkDir := mk("filelink", 0o700)
	if err := os.Symlink(filepath.Join(real, "x"), filepath.Join(fileLinkDir, "fence.sqlite")); err != nil {
		t.Fatal(err)
	}
	wfDir := mk("writablefile", 0o700)
	s, err := Open(filepath.Join(wfDir, "fence.sqlite"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.Chmod(filepath.Join(wfDir, "fence.sqlite"), 0o666); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(root, "link", "fence.sqlite"), "symlink"},
		{filepath.Join(gw, "fence.sqlite"), "writable"},
		{filepath.Join(ww, "fence.sqlite"), "writable"},
		{filepath.Join(fileLinkDir, "fence.sqlite"), "symlink"},
		{filepath.Join(wfDir, "fence.sqlite"), "writable"},
		{"relative/fence.sqlite", "absolute"},
	} {
		s, err := Open(tc.path, Options{})
		if err == nil {
			s.Close()
			t.Errorf("%s: opened", tc.path)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.path, err, tc.want)
		}
		if !strings.HasPrefix(tc.path, "relative") && !strings.Contains(err.Error(), filepath.Dir(tc.path)) {
			t.Errorf("error does not name the path: %v", err)
		}
	}
	if _, err := os.Lstat(filepath.Join(real, "x")); err == nil {
		t.Error("a file was created through the symlink")
	}
}

func TestOpenCorruptFileIsNotRecreated(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fence.sqlite")
	junk := bytes.Repeat([]byte("not a database. "), 512)
	if err := os.WriteFile(path, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{})
	if err == nil {
		s.Close()
		t.Fatal("opened a corrupt file")
	}
	if codeOf(t, err) != verdict.CodeFenceUnavailable || !strings.Contains(err.Error(), path) {
		t.Fatalf("%v", err)
	}
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got, junk) {
		t.Fatal("the corrupt file was modified")
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.sqlite")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, "PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(path, Options{}); err == nil {
		s.Close()
		t.Fatal("opened a newer schema")
	}
	if !strings.Contains(err.Error(), "newer") {
		t.Fatal(err)
	}
}

func TestSequenceSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.sqlite")
	for want := int64(1); want <= 3; want++ {
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := s.AppendVerdict(ctx, testRecord("published"))
		s.Close()
		if err != nil || rec.Sequence != want || rec.Timestamp.IsZero() {
			t.Fatalf("sequence %d (%v), want %d", rec.Sequence, err, want)
		}
	}
	s, _ := Open(path, Options{})
	defer s.Close()
	recs, err := s.VerdictsSince(ctx, 1, 1)
	if err != nil || len(recs) != 1 || recs[0].Sequence != 2 {
		t.Fatalf("%+v %v", recs, err)
	}
}

func TestPostmortem(t *testing.T) {
	w := newWorld(t)
	s := w.owner(1)
	helper := w.owner(2) // the pane helper: another process, its own Store
	r := mustReserve(t, s, w.id("x"), w.spec("x"))
	advanceTo(t, s, &r, PhaseSpawned)
	if err := helper.RecordHelperStart(ctx, r.ID, 4242, "boot/1/2/3", ""); err != nil {
		t.Fatal(err)
	}
	if err := helper.RecordHelperStart(ctx, "0123456789abcdef0123456789abcdef", 1, "x", ""); !errorsIsLost(err) {
		t.Fatalf("helper of an unknown reservation: %v", err)
	}
	advanceTo(t, s, &r, PhasePublished)
	if err := s.Release(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if pub, ok, err := helper.PublishedByReservation(ctx, r.ID); !ok || err != nil || pub.Generation != 1 {
		t.Fatalf("published by reservation: %+v %v %v", pub, ok, err)
	}
	pm, ok, err := s.Postmortem(ctx, w.id("x"), 1)
	if err != nil || !ok || pm.HelperPID != 4242 || !pm.EndedAt.IsZero() || pm.ExitStatus != nil {
		t.Fatalf("running postmortem %+v %v %v", pm, ok, err)
	}
	status := 7
	end := time.Now().UTC().Truncate(time.Microsecond)
	err = helper.RecordPostmortem(ctx, Postmortem{ReservationID: r.ID, ExitStatus: &status, EndedAt: end})
	if err != nil {
		t.Fatal(err)
	}
	pm, ok, err = s.Postmortem(ctx, w.id("x"), 1)
	if err != nil || !ok || *pm.ExitStatus != 7 || pm.HelperPID != 4242 ||
		pm.HelperIncarnation != "boot/1/2/3" || !pm.EndedAt.Equal(end) ||
		pm.Generation != 1 || pm.StartedAt.IsZero() {
		t.Fatalf("postmortem %+v %v %v", pm, ok, err)
	}
	if _, ok, _ := s.Postmortem(ctx, w.id("x"), 2); ok {
		t.Fatal("postmortem of an unpublished generation")
	}
	err = helper.RecordPostmortem(ctx, Postmortem{ReservationID: r.ID, Signal: "SIG KILL"})
	if codeOf(t, err) != verdict.CodeInvalidRequest {
		t.Fatalf("bad signal: %v", err)
	}
}

func errorsIsLost(err error) bool { return err != nil && verdict.CodeOf(err) == verdict.CodeFenceLost }

// TestCancelledCallerNeverWedgesWriter: callers whose context is cancelled at
// varying moments of a write (BEGIN included) must not leave the writer
// connection inside a transaction; the next write with a live context succeeds.
// (Before the fix this failed within a few rounds with "cannot start a
// transaction within a transaction".)
func TestCancelledCallerNeverWedgesWriter(t *testing.T) {
	w := newWorld(t)
	s := w.owner(100)
	for i := 0; i < 400; i++ {
		c, cancel := context.WithCancel(context.Background())
		go func(d time.Duration) { time.Sleep(d); cancel() }(time.Duration(i%50) * 10 * time.Microsecond)
		_, _ = s.AppendVerdict(c, testRecord(verdict.VerdictPublished))
		if _, err := s.AppendVerdict(ctx, testRecord(verdict.VerdictPublished)); err != nil {
			t.Fatalf("round %d: a write after a cancelled one failed: %v", i, err)
		}
		cancel()
	}
	if msg, err := s.Check(ctx); err != nil || msg != "ok" {
		t.Fatalf("integrity: %s %v", msg, err)
	}
}
