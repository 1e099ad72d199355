package integration

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFenceContended: another process holds the fence database's write lock
// beyond the daemon's budget. The create is refused with
// identity_fence_contended (exit 75), leaves nothing behind, and succeeds once
// the lock is gone.
func TestFenceContended(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	d.MustCreate(t, NewSpec(t, "warm"), "published")

	// The daemon may be inside a write transaction of its own right now
	// (it keeps writing after the warm create answered): wait for it rather
	// than fail on SQLITE_BUSY, which the bare DSN did about one run in ten.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(d.Dir, "fence.sqlite")+"?_pragma=busy_timeout(60000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("taking the write lock: %v", err)
	}
	spec := NewSpec(t, "contended")
	r := d.CLI(t, spec.Args()...)
	expectError(t, r, 75, "refused", "identity_fence_contended", "")
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if ss := d.AgentSessions(t); len(ss) != 1 {
		t.Errorf("tmux has %d agent sessions after a contended create, want only the warm one: %+v", len(ss), ss)
	}
	status, body := d.Get(t, "/v1/fence")
	var f struct {
		Reservations []json.RawMessage `json:"reservations"`
	}
	if status != 200 || json.Unmarshal(body, &f) != nil || len(f.Reservations) != 0 {
		t.Errorf("fence after a contended create: %d %s, want no reservation", status, body)
	}
	if ents, _ := os.ReadDir(spec.StateDir); len(ents) != 0 {
		t.Errorf("a contended create wrote under state_dir")
	}
	d.MustCreate(t, spec, "published")
}

// TestCorruptFence: a fence.sqlite that is not a database is a clear startup
// error naming the file, and the file is left exactly as it was (never silently
// recreated over data).
func TestCorruptFence(t *testing.T) {
	t.Parallel()
	h := NewHome(t)
	path := filepath.Join(h.Dir, "fence.sqlite")
	junk := bytes.Repeat([]byte("not a database, but someone's data\n"), 200)
	if err := os.WriteFile(path, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	d := h.Start(t, DaemonOpts{NoWait: true})
	st := d.WaitExit(t, startDeadline)
	if st == nil {
		d.Kill(t)
		t.Fatalf("serve started on a corrupt fence.sqlite\n%s", clip(d.Log()))
	}
	if st.Success() || !strings.Contains(d.Log(), path) {
		t.Errorf("serve on a corrupt fence: %v, want a non-zero exit naming %s\n%s", st, path, clip(d.Log()))
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, junk) {
		t.Errorf("fence.sqlite was modified (%d bytes, was %d)", len(got), len(junk))
	}
	if _, ok := h.liveServerPID(); ok {
		t.Logf("note: a tmux server was started before the fence was opened")
	}
}
