package sqlite

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/fencetest"
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
	s, err := Open(path, fence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.AppendVerdict(ctx, fencetest.Record("published")); err != nil { // a write: -wal exists
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
	s, err := Open(filepath.Join(wfDir, "fence.sqlite"), fence.Options{})
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
		s, err := Open(tc.path, fence.Options{})
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
	s, err := Open(path, fence.Options{})
	if err == nil {
		s.Close()
		t.Fatal("opened a corrupt file")
	}
	if fencetest.CodeOf(t, err) != verdict.CodeFenceUnavailable || !strings.Contains(err.Error(), path) {
		t.Fatalf("%v", err)
	}
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got, junk) {
		t.Fatal("the corrupt file was modified")
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.sqlite")
	s, err := Open(path, fence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, "PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(path, fence.Options{}); err == nil {
		s.Close()
		t.Fatal("opened a newer schema")
	}
	if !strings.Contains(err.Error(), "newer") || verdict.CodeOf(err) != verdict.CodeFenceSchemaNewer {
		t.Fatalf("%v (%s), want fence_schema_newer", err, verdict.CodeOf(err))
	}
	if e := verdict.AsError(err); e.Details["schema_version"] != 99 || e.Details["supported"] != len(migrations) {
		t.Fatalf("details %v", e.Details)
	}
}

// TestFenceFileRemovedUnderHandle: the database removed, or replaced by
// another file, while a handle has it open: every operation is refused
// fence_unavailable (the pane helpers opening the path would find another
// fence); its own file back at the path is accepted again.
func TestFenceFileRemovedUnderHandle(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fence.sqlite")
	s, err := Open(path, fence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Identities(ctx); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(dir, "kept")
	if err := os.Link(path, kept); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Identities(ctx); verdict.CodeOf(err) != verdict.CodeFenceUnavailable || !strings.Contains(err.Error(), "removed or replaced") {
		t.Fatalf("a read after the removal: %v", err)
	}
	if err := os.Link(kept, path); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Identities(ctx); err != nil {
		t.Fatalf("a read with its own file back: %v", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil { // another file at the path
		t.Fatal(err)
	}
	if _, err := s.Identities(ctx); verdict.CodeOf(err) != verdict.CodeFenceUnavailable {
		t.Fatalf("a read after the replacement: %v", err)
	}
}
