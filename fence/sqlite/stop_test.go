package sqlite

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/fencetest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestMigrateFromVersion3 opens a database written by the schema-3 binary (a
// published identity, a reservation row in flight) and checks schema 4: the old
// generation has no recorded hold and the default grace period, and a stop and
// an operator release work on it.
func TestMigrateFromVersion3(t *testing.T) {
	w := newWorld(t)
	a, b := w.ID("old"), w.ID("row")
	resA, resB := strings.Repeat("ab", 16), strings.Repeat("cd", 16)
	db := w.oldFence(t, 3)
	if _, err := db.Exec(`INSERT INTO identities (state_dir, session_id, generation, reservation_id, session_name,
		tmux_id, server_pid, server_start, state_file, label, published_at) VALUES (?, ?, 2, ?, 'skc-old', '$4', 55, 1000, ?, '', 1)`,
		a.StateDir, a.SessionID, resA, filepath.Join(a.StateDir, "old.jsonl")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO reservations (state_dir, session_id, reservation_id, state_file, spec_json,
		owner_pid, owner_incarnation, phase, generation, claimed_at, updated_at, lease_until)
		VALUES (?, ?, ?, ?, '{"state_file":"x","argv":["a"]}', 900, 'inc-900', 3, 1, 1, 1, 1)`,
		b.StateDir, b.SessionID, resB, filepath.Join(b.StateDir, "row.jsonl")); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s := w.owner(100)
	var v int
	if err := s.r.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != SchemaVersion || v < 4 {
		t.Fatalf("user_version %d (%v)", v, err)
	}
	p, ok, err := s.PublishedFor(ctx, a)
	if err != nil || !ok || p.PanePID != 0 || p.Cgroup != "" || p.StopTimeoutMS != 10000 || p.Stopping != nil {
		t.Fatalf("old identity after migration: %+v %v %v", p, ok, err)
	}
	deadline := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	p, ok, err = s.BeginStop(ctx, a, 2, "tmux_session_missing", deadline)
	if err != nil || !ok || p.Stopping == nil || !p.Stopping.Deadline.Equal(deadline) || p.Stopping.Reason != "tmux_session_missing" {
		t.Fatalf("begin stop: %+v %v %v", p, ok, err)
	}
	// A second stop (a restarted daemon) keeps the first deadline.
	p, ok, err = s.BeginStop(ctx, a, 2, "killed_by_request", deadline.Add(time.Hour))
	if err != nil || !ok || !p.Stopping.Deadline.Equal(deadline) || p.Stopping.Reason != "tmux_session_missing" {
		t.Fatalf("second begin stop: %+v %v %v", p.Stopping, ok, err)
	}
	if err := s.StopKilled(ctx, a, 2); err != nil {
		t.Fatal(err)
	}
	if c, _, _ := s.CachedPublished(ctx, a.Digest()); c.Stopping == nil || !c.Stopping.Killed {
		t.Fatalf("cache after StopKilled: %+v", c.Stopping)
	}
	if _, ok, _ := s.BeginStop(ctx, a, 1, "x", deadline); ok {
		t.Fatal("a stop of another generation was recorded")
	}

	// The operator's release: refused when allowed says so, else the generation
	// ends (or the row goes) with its verdict.
	deny := func(fence.Released) error { return verdict.Errorf(verdict.CodeIdentityReservedLive, nil, "alive") }
	describe := func(fence.Released) verdict.Record { return fencetest.IdentRecord(verdict.VerdictReleased, &a) }
	if _, _, err := s.ReleaseStuck(ctx, resA, deny, describe); fencetest.CodeOf(t, err) != verdict.CodeIdentityReservedLive {
		t.Fatalf("refused release: %v", err)
	}
	allow := func(fence.Released) error { return nil }
	got, rec, err := s.ReleaseStuck(ctx, resA, allow, describe)
	if err != nil || got.Published == nil || got.Reservation != nil || rec.Sequence == 0 {
		t.Fatalf("release of a generation: %+v %+v %v", got, rec, err)
	}
	if p, _, _ := s.PublishedFor(ctx, a); !p.Ended {
		t.Fatal("released generation not ended")
	}
	got, _, err = s.ReleaseStuck(ctx, resB, allow, describe)
	if err != nil || got.Reservation == nil || got.Reservation.Identity != b {
		t.Fatalf("release of a row: %+v %v", got, err)
	}
	if _, ok, _ := s.Reservation(ctx, resB); ok {
		t.Fatal("released row still there")
	}
	if _, _, err := s.ReleaseStuck(ctx, resB, allow, describe); fencetest.CodeOf(t, err) != verdict.CodeNotFound {
		t.Fatalf("release of nothing: %v", err)
	}
}
