package sqlite

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/fencetest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestMigrateFromVersion4 opens a database written by the schema-4 binary
// (a published identity) and checks schema 5: the old generation has no
// spec and no restart bookkeeping (it never restarts), and a restart
// decision can be recorded on it.
func TestMigrateFromVersion4(t *testing.T) {
	w := newWorld(t)
	a := w.ID("old")
	db := w.oldFence(t, 4)
	if _, err := db.Exec(`INSERT INTO identities (state_dir, session_id, generation, reservation_id, session_name,
		tmux_id, server_pid, server_start, state_file, label, published_at, pane_pid) VALUES (?, ?, 3, ?, 'skc-old', '$4', 55, 1000, ?, '', 1, 77)`,
		a.StateDir, a.SessionID, strings.Repeat("ab", 16), filepath.Join(a.StateDir, "old.jsonl")); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s := w.owner(100)
	var v int
	if err := s.r.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != SchemaVersion || v < 5 {
		t.Fatalf("user_version %d (%v)", v, err)
	}
	p, ok, err := s.PublishedFor(ctx, a)
	if err != nil || !ok || p.Spec.Restarts() || p.Restart.State != "" || p.Restart.Restarts != 0 || p.PanePID != 77 {
		t.Fatalf("old identity after migration: %+v %v %v", p, ok, err)
	}
	next := fence.RestartNext{State: fence.RestartStopped}
	if ok, _, err := s.MarkEndedNext(ctx, a, 3, fencetest.IdentRecord(verdict.VerdictEnded, &a), next, nil); err != nil || !ok {
		t.Fatalf("mark ended: %v %v", ok, err)
	}
	if p, _, _ := s.PublishedFor(ctx, a); p.Restart.State != fence.RestartStopped || !p.Ended {
		t.Fatalf("after the end: %+v", p.Restart)
	}
}

// TestMigrateFromVersion5 opens a database written by the schema-5 binary (a
// reservation row and a published identity, written before hosts were
// recorded) and checks schema 6: the old row has no host and is this host's,
// so a probe decides its owner as before (alive blocks, dead is displaced);
// new rows and generations carry the host.
func TestMigrateFromVersion5(t *testing.T) {
	w := newWorld(t)
	a, old := w.ID("row"), w.ID("old")
	resA := strings.Repeat("ab", 16)
	db := w.oldFence(t, 5)
	spec := w.Spec("row")
	specJSON, _ := json.Marshal(spec)
	if _, err := db.Exec(`INSERT INTO reservations (state_dir, session_id, reservation_id, state_file, spec_json,
		owner_pid, owner_incarnation, phase, generation, claimed_at, updated_at, lease_until)
		VALUES (?, ?, ?, ?, ?, 7, 'inc-7', 1, 1, 1, 1, 1)`, a.StateDir, a.SessionID, resA, spec.StateFile, string(specJSON)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO identities (state_dir, session_id, generation, reservation_id, session_name,
		tmux_id, server_pid, server_start, state_file, label, published_at) VALUES (?, ?, 1, ?, 'skc-old', '$4', 55, 1000, ?, '', 1)`,
		old.StateDir, old.SessionID, strings.Repeat("cd", 16), filepath.Join(old.StateDir, "old.jsonl")); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s := w.owner(100)
	var v int
	if err := s.r.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != SchemaVersion || v < 6 {
		t.Fatalf("user_version %d (%v)", v, err)
	}
	row, ok, err := s.Reservation(ctx, resA)
	if err != nil || !ok || row.Host != "" || row.HostBootID != "" {
		t.Fatalf("old row after migration: %+v %v %v", row, ok, err)
	}
	if p, ok, err := s.PublishedFor(ctx, old); err != nil || !ok || p.Host != "" {
		t.Fatalf("old identity after migration: %+v %v %v", p, ok, err)
	}
	w.Set(7, fence.Alive)
	_, err = s.Reserve(ctx, a, spec)
	fencetest.WantCode(t, err, verdict.CodeIdentityReservedLive)
	w.Set(7, fence.Dead)
	res, err := s.Reserve(ctx, a, spec)
	if err != nil || res.Outcome != fence.Reserved || res.Displaced == nil || res.Displaced.ID != resA {
		t.Fatalf("reserve over the old row of a dead owner: %+v %v", res, err)
	}
	host, _ := fence.LocalHost(fence.Host{})
	if r := res.Reservation; r.Host != host.Name || r.HostBootID != host.BootID || r.HostMachineID != host.MachineID {
		t.Fatalf("the new row's host %+v, want %+v", r, host)
	}
	if msg, err := s.Check(ctx); err != nil || msg != "ok" {
		t.Fatalf("integrity: %s %v", msg, err)
	}
}
