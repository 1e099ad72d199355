package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/fencetest"
)

var ctx = context.Background()

// harness runs fencetest's suite on a fresh fence file per test.
var harness = fencetest.Harness{
	New: func(t *testing.T) fencetest.Opener { return opener(filepath.Join(t.TempDir(), "home", "fence.sqlite")) },
	Sound: func(t testing.TB, f fence.Fence) {
		t.Helper()
		if msg, err := f.(*Store).Check(ctx); err != nil || msg != "ok" {
			t.Fatalf("integrity: %s %v", msg, err)
		}
	},
}

// TestFence: the SQLite engine passes the fence's shared behaviour suite.
func TestFence(t *testing.T) { fencetest.Run(t, harness) }

func opener(path string) fencetest.Opener {
	return func(opt fence.Options) (fence.Fence, error) {
		s, err := Open(path, opt)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return s, nil
	}
}

// world is fencetest's World on a fence file whose path the SQLite-only tests
// know: they open it from other processes, rewrite its schema, freeze it.
type world struct {
	*fencetest.World
	path string
}

func newWorld(t *testing.T) *world {
	path := filepath.Join(t.TempDir(), "home", "fence.sqlite")
	return &world{World: fencetest.NewWorldWith(t, opener(path)), path: path}
}

// owner opens a Store acting as process pid (alive until set otherwise).
func (w *world) owner(pid int) *Store { return w.Owner(pid).(*Store) }

// oldFence creates the fence file at w.path as the binary of schema version
// left it (its first version migrations, then user_version), so a migration
// test can add the rows of that time; the caller closes db before w.owner
// opens the file and migrates it.
func (w *world) oldFence(t *testing.T, version int) *sql.DB {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(w.path), 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+w.path)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range append(append([]string{}, migrations[:version]...), fmt.Sprintf("PRAGMA user_version = %d", version)) {
		if _, err := db.Exec(st); err != nil {
			t.Fatal(err)
		}
	}
	return db
}
