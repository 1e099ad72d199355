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
	for _, p := range []string{dangling, filepath.Join(dangling, "sub"), loop} {
		if _, err := CanonicalIdentity(Identity{StateDir: p, SessionID: "s"}); verdict.CodeOf(err) != verdict.CodeInvalidRequest {
			t.Fatalf("%s: %v", p, err)
		}
	}
	// A path that does not exist yet under a real directory is keyed as written.
	got, err := CanonicalIdentity(Identity{StateDir: filepath.Join(dir, "later", "x"), SessionID: "s"})
	real, _ := filepath.EvalSymlinks(dir)
	if err != nil || got.StateDir != filepath.Join(real, "later", "x") {
		t.Fatalf("%+v %v", got, err)
	}
}
