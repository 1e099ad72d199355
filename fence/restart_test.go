package fence

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestMigrateFromVersion4 opens a database written by the schema-4 binary
// (a published identity) and checks schema 5: the old generation has no
// spec and no restart bookkeeping (it never restarts), and a restart
// decision can be recorded on it.
func TestMigrateFromVersion4(t *testing.T) {
	w := newWorld(t)
	if err := os.MkdirAll(filepath.Dir(w.path), 0o700); err != nil {
		t.Fatal(err)
	}
	a := w.id("old")
	db, err := sql.Open("sqlite", "file:"+w.path)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range append(append([]string{}, migrations[:4]...), "PRAGMA user_version = 4") {
		if _, err := db.Exec(st); err != nil {
			t.Fatal(err)
		}
	}
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
	next := RestartNext{State: RestartStopped}
	if ok, _, err := s.MarkEndedNext(ctx, a, 3, identRecord(verdict.VerdictEnded, &a), next, nil); err != nil || !ok {
		t.Fatalf("mark ended: %v %v", ok, err)
	}
	if p, _, _ := s.PublishedFor(ctx, a); p.Restart.State != RestartStopped || !p.Ended {
		t.Fatalf("after the end: %+v", p.Restart)
	}
}

// TestRestartBookkeeping: a create publishes with its spec and one start; the
// end's decision (next start due) is recorded with the ended verdict; a
// restart's publish counts one more restart and start and keeps the
// failures; SetRestart is a compare-and-set; a create starts the count over.
func TestRestartBookkeeping(t *testing.T) {
	w := newWorld(t)
	s := w.owner(100)
	id := w.id("r")
	spec := w.spec("r")
	spec.Restart, spec.ResumeArgv, spec.RestartDelayMS, spec.RestartBurst, spec.RestartIntervalS =
		RestartOnFailure, []string{"agent", "--resume"}, 250, 5, 300
	p1 := publishSpec(t, s, id, spec, "")
	if p1.Restart.Restarts != 0 || len(p1.Restart.Starts) != 1 || p1.Spec.Restart != RestartOnFailure {
		t.Fatalf("first publish: %+v", p1.Restart)
	}
	if got, _, _ := s.PublishedFor(ctx, id); got.Spec.Restart != RestartOnFailure || len(got.Spec.ResumeArgv) != 2 {
		t.Fatalf("stored spec: %+v", got.Spec)
	}
	gave := identRecord(verdict.VerdictGaveUp, &id)
	ok, _, err := s.MarkEndedNext(ctx, id, p1.Generation, identRecord(verdict.VerdictEnded, &id),
		RestartNext{State: RestartExited, Delay: time.Hour, Reason: verdict.ReasonRestart, Failures: 1}, &gave)
	if err != nil || !ok || gave.Sequence == 0 {
		t.Fatalf("mark ended next: %v %v %+v", ok, err, gave)
	}
	for _, get := range []func() (Published, bool, error){
		func() (Published, bool, error) { return s.PublishedFor(ctx, id) },
		func() (Published, bool, error) { return s.CachedPublished(ctx, id.Digest()) },
	} {
		// The due time is the end's own time plus the delay, both the fence's.
		if p, _, _ := get(); p.Restart.State != RestartExited || !p.Restart.Due.Equal(p.EndedAt.Add(time.Hour)) ||
			p.Restart.Failures != 1 {
			t.Fatalf("recorded decision: %+v", p.Restart)
		}
	}
	if due2, err := s.RestartsDue(ctx, time.Now()); err != nil || len(due2) != 0 {
		t.Fatalf("due now: %v %v", due2, err)
	}
	if all, err := s.RestartsDue(ctx, time.Time{}); err != nil || len(all) != 1 {
		t.Fatalf("waiting: %v %v", all, err)
	}
	if ok, err := s.SetRestart(ctx, id, p1.Generation, RestartStopped, RestartNext{State: RestartGaveUp}, nil); err != nil || ok {
		t.Fatalf("set restart from the wrong state: %v %v", ok, err)
	}
	now := RestartNext{State: RestartExited, Reason: verdict.ReasonManualRestart, Failures: 1}
	if ok, err := s.SetRestart(ctx, id, p1.Generation, RestartExited, now, nil); err != nil || !ok {
		t.Fatalf("set restart: %v %v", ok, err)
	}
	p2 := publishSpec(t, s, id, spec, verdict.ReasonManualRestart)
	if p2.Restart.Restarts != 1 || len(p2.Restart.Starts) != 2 || p2.Restart.Failures != 1 || p2.Restart.State != "" {
		t.Fatalf("restart publish: %+v", p2.Restart)
	}
	if p2.Superseded == nil || p2.Superseded.Generation != p1.Generation {
		t.Fatalf("superseded: %+v", p2.Superseded)
	}
	if ok, _, err := s.MarkEnded(ctx, id, p2.Generation, identRecord(verdict.VerdictEnded, &id)); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if p3 := publishSpec(t, s, id, spec, ""); p3.Restart.Restarts != 0 || len(p3.Restart.Starts) != 1 || p3.Restart.Failures != 0 {
		t.Fatalf("create after restarts: %+v", p3.Restart)
	}
}

// publishSpec walks a reservation of id with spec to published; reason set
// makes it a restart in the kept session "skc-kept".
func publishSpec(t *testing.T, s *Store, id Identity, spec Spec, reason string) Published {
	t.Helper()
	r := mustReserve(t, s, id, spec)
	r.StartReason = reason
	name := Patch{AttemptName: "skc-" + r.ID}
	if reason != "" {
		name = Patch{AttemptName: "skc-kept", Kept: true}
	}
	for _, st := range []struct {
		to Phase
		p  Patch
	}{
		{PhaseHelperInvoked, name},
		{PhaseSpawned, Patch{TmuxID: "$3", PanePID: 78, ServerPID: 55, ServerStart: 1000}},
		{PhaseTagged, Patch{}},
	} {
		if err := s.Advance(ctx, &r, st.to, st.p); err != nil {
			t.Fatalf("advance to %s: %v", st.to, err)
		}
	}
	pub, _, err := s.Publish(ctx, &r, testRecord(verdict.VerdictPublished))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	return pub
}
