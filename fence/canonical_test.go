package fence

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestCanonicalRefusesDanglingSymlinks: a state dir that is a symlink to a
// missing target, or a symlink loop, is refused: keyed by its own path now
// and by its target later, one directory would be two identities.
func TestCanonicalRefusesDanglingSymlinks(t *testing.T) {
	dir := t.TempDir()
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(dir, "missing"), dangling); err != nil {
		t.Fatal(err)
	}
	loop := filepath.Join(dir, "loop")
	if err := os.Symlink(loop, loop); err != nil {
		t.Fatal(err)
	}
	// Two links naming each other: a loop passed through, not only ended at.
	l1, l2 := filepath.Join(dir, "l1"), filepath.Join(dir, "l2")
	if err := os.Symlink(l2, l1); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(l1, l2); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dangling, filepath.Join(dangling, "sub"), loop, filepath.Join(loop, "a", "b"),
		l1, filepath.Join(l1, "sub"), filepath.Join(l2, "sub", "x")} {
		if _, err := CanonicalIdentity(Identity{StateDir: p, SessionID: "s"}); verdict.CodeOf(err) != verdict.CodeInvalidRequest {
			t.Fatalf("%s: %v", p, err)
		}
	}
	for _, spec := range []Spec{{Argv: []string{"true"}, StateFile: filepath.Join(l1, "f.jsonl")},
		{Argv: []string{"true"}, Cwd: filepath.Join(loop, "sub")}} {
		if _, err := CanonicalSpec(spec); verdict.CodeOf(err) != verdict.CodeInvalidRequest {
			t.Fatalf("%+v: %v", spec, err)
		}
	}
	// A path that does not exist yet under a real directory is keyed as written.
	got, err := CanonicalIdentity(Identity{StateDir: filepath.Join(dir, "later", "x"), SessionID: "s"})
	real, _ := filepath.EvalSymlinks(dir)
	if err != nil || got.StateDir != filepath.Join(real, "later", "x") {
		t.Fatalf("%+v %v", got, err)
	}
}
