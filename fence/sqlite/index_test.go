package sqlite

import (
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/fencetest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestHotLookupsUseIndexes: SQLite's own plan for the two hot lookups names
// their indexes (a search, not a scan of the table).
func TestHotLookupsUseIndexes(t *testing.T) {
	w := newWorld(t)
	s := w.owner(100)
	for q, index := range map[string]string{
		`SELECT ` + pubCols + ` FROM identities WHERE server_pid = 1 AND server_start = 2 AND tmux_id = '$1' AND ended = 0`: "identities_tmux",
		`SELECT sequence, record FROM verdicts WHERE state_dir = 'x' AND session_id = 'y' ORDER BY sequence DESC LIMIT 5`:   "verdicts_identity",
	} {
		rows, err := s.r.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if p := strings.Join(plan, "; "); !strings.Contains(p, "USING INDEX "+index) &&
			!strings.Contains(p, "USING COVERING INDEX "+index) {
			t.Errorf("plan for %s: %s", index, p)
		}
	}
}

// TestMigrateFromVersion1 opens a database written by the schema-1 binary (with a
// published identity and verdicts in the old shape) and checks it upgrades in
// place: user_version 2, old verdicts found by identity, the identity found by
// its tmux session, and new verdicts written with their identity columns.
func TestMigrateFromVersion1(t *testing.T) {
	w := newWorld(t)
	if err := os.MkdirAll(filepath.Dir(w.path), 0o700); err != nil {
		t.Fatal(err)
	}
	a := w.ID("old")
	writeV1(t, w.path, a)
	s := w.owner(100)
	var v int
	if err := s.r.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != SchemaVersion || v < 2 {
		t.Fatalf("user_version %d (%v), want 2", v, err)
	}
	recs, err := s.VerdictsFor(ctx, a, 0)
	if err != nil || fencetest.Seqs(recs) != "[1,3]" {
		t.Fatalf("old verdicts of the identity: %v %v", fencetest.Seqs(recs), err)
	}
	p, ok, err := s.PublishedByTmux(ctx, 55, 1000, "$4")
	if err != nil || !ok || p.Identity != a || p.Generation != 2 {
		t.Fatalf("old identity by tmux: %+v %v %v", p, ok, err)
	}
	rec, err := s.AppendVerdict(ctx, fencetest.IdentRecord(verdict.VerdictEnded, &a))
	if err != nil {
		t.Fatal(err)
	}
	if recs, _ := s.VerdictsFor(ctx, a, 0); fencetest.Seqs(recs) != fencetest.FmtSeqs([]int64{1, 3, rec.Sequence}) {
		t.Fatalf("after a new verdict: %v", fencetest.Seqs(recs))
	}
	if msg, err := s.Check(ctx); err != nil || msg != "ok" {
		t.Fatalf("integrity: %s %v", msg, err)
	}
}

// writeV1 creates path with schema version 1 exactly as that binary left it.
func writeV1(t *testing.T, path string, a fence.Identity) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rec := func(seq int, v string, id *fence.Identity) string {
		r := fencetest.IdentRecord(v, id)
		r.Sequence = int64(seq)
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	other := fence.Identity{StateDir: a.StateDir, SessionID: "other"}
	stmts := []string{migrations[0], "PRAGMA user_version = 1"}
	for _, st := range stmts {
		if _, err := db.Exec(st); err != nil {
			t.Fatal(err)
		}
	}
	exec := func(q string, args ...any) {
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO identities (state_dir, session_id, generation, reservation_id, session_name, tmux_id,
		server_pid, server_start, state_file, label, published_at) VALUES (?, ?, 2, ?, 'skc-old', '$4', 55, 1000, ?, '', 1)`,
		a.StateDir, a.SessionID, strings.Repeat("ab", 16), filepath.Join(a.StateDir, "old.jsonl"))
	exec(`INSERT INTO verdicts (sequence, record) VALUES (1, ?), (2, ?), (3, ?), (4, ?)`,
		rec(1, verdict.VerdictPublished, &a), rec(2, verdict.VerdictPublished, &other),
		rec(3, verdict.VerdictEnded, &a), rec(4, verdict.VerdictRefused, nil))
}
