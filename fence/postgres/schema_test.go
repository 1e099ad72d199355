package postgres

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/internal/pgtest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, url string) *Store {
	t.Helper()
	s, err := Open(url, fence.Options{Host: fence.Host{Name: "h1"}}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func schemaVersion(t *testing.T, url string) int {
	t.Helper()
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	v, ok, err := readVersion(ctx, conn)
	if err != nil || !ok {
		t.Fatalf("schema version: %v (table there: %v)", err, ok)
	}
	return v
}

// TestMigrateFresh: a new database gets every step, and opening it again
// changes nothing.
func TestMigrateFresh(t *testing.T) {
	url := pgtest.DB(t)
	s := open(t, url)
	if v := schemaVersion(t, url); v != SchemaVersion {
		t.Fatalf("schema version %d, want %d", v, SchemaVersion)
	}
	v0, err := s.Version(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, url)
	if v := schemaVersion(t, url); v != SchemaVersion {
		t.Fatalf("after reopen: schema version %d", v)
	}
	if v1, _ := s.Version(ctxT(t)); v1 != v0 {
		t.Fatalf("reopening moved the change counter %d -> %d", v0, v1)
	}
}

// TestMigrateConcurrentOpens: daemons started together against a new
// database apply each step once (the migration's advisory lock) and all open.
func TestMigrateConcurrentOpens(t *testing.T) {
	url := pgtest.DB(t)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(url, fence.Options{Host: fence.Host{Name: fmt.Sprint("h", i)}}, Config{})
			if err == nil {
				s.Close()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if v := schemaVersion(t, url); v != SchemaVersion {
		t.Fatalf("schema version %d, want %d", v, SchemaVersion)
	}
	s := open(t, url)
	var rows int
	if err := s.pool.QueryRow(ctxT(t), `SELECT count(*) FROM fence_version`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("fence_version rows = %d (%v), want 1", rows, err)
	}
}

// TestOpenRefusesNewerSchema: a database migrated by a newer binary is
// never written by this one.
func TestOpenRefusesNewerSchema(t *testing.T) {
	url := pgtest.DB(t)
	s := open(t, url)
	if _, err := s.pool.Exec(ctxT(t), `UPDATE fence_schema SET version = $1`, SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err := Open(url, fence.Options{}, Config{})
	if verdict.CodeOf(err) != verdict.CodeFenceSchemaNewer || verdict.Classify(verdict.CodeOf(err)).Exit != verdict.ExitUsage {
		t.Fatalf("open of a newer schema: %v, want fence_schema_newer (exit 2)", err)
	}
}

// TestOpenRefusesPassword: a password belongs in PGPASSWORD or PGPASSFILE,
// never in a connection string that lands in argv — in whatever part of it.
func TestOpenRefusesPassword(t *testing.T) {
	for _, s := range []string{
		"postgres://u:secret@127.0.0.1:1/db",
		"postgresql://u@127.0.0.1:1/db?sslmode=disable&password=secret",
		"postgres://u@h1:1,h2:1/db?password=secret",
		"host=127.0.0.1 port=1 password=secret",
		"host=127.0.0.1 port=1 password = 'sec ret'",
	} {
		_, err := Open(s, fence.Options{}, Config{})
		if verdict.CodeOf(err) != verdict.CodeInvalidRequest {
			t.Fatalf("password in %q: %v, want invalid_request", s, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") || strings.Contains(Describe(s), "sec") {
			t.Fatalf("the error or the description repeats the password: %v, %s", err, Describe(s))
		}
	}
}

// TestPasswordFromEnvironmentOrFile: a password pgx takes from PGPASSWORD or
// the passfile is not one in the connection string (it was refused as one,
// so a fence that needs a password could not be used at all; found outside-in).
func TestPasswordFromEnvironmentOrFile(t *testing.T) {
	pass := filepath.Join(t.TempDir(), "pgpass")
	if err := os.WriteFile(pass, []byte("127.0.0.1:1:db:u:secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, env := range [][2]string{{"PGPASSWORD", "secret"}, {"PGPASSFILE", pass}} {
		t.Run(env[0], func(t *testing.T) {
			t.Setenv(env[0], env[1])
			for _, s := range []string{"postgres://u@127.0.0.1:1/db", "host=127.0.0.1 port=1 user=u dbname=db connect_timeout=1"} {
				_, err := Open(s, fence.Options{}, Config{})
				if code := verdict.CodeOf(err); code != verdict.CodeFenceUnavailable {
					t.Fatalf("%s set, %q: %v (%s), want fence_unavailable (nothing listens there)", env[0], s, err, code)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Fatalf("the error repeats the password: %v", err)
				}
			}
		})
	}
}

// TestVersionAndSequence: every write moves the change counter; verdicts
// get increasing fleet-wide sequences, readable in order from any store.
func TestVersionAndSequence(t *testing.T) {
	url := pgtest.DB(t)
	a, b := open(t, url), open(t, url)
	ctx := ctxT(t)
	v0, err := a.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for i := 0; i < 5; i++ {
		st := a
		if i%2 == 1 {
			st = b
		}
		rec, err := st.AppendVerdict(ctx, verdict.Record{Action: "create", Outcome: "success", Verdict: "published"})
		if err != nil {
			t.Fatal(err)
		}
		if rec.Sequence <= last {
			t.Fatalf("sequence %d after %d", rec.Sequence, last)
		}
		last = rec.Sequence
	}
	v1, _ := b.Version(ctx)
	if v1 != v0+5 {
		t.Fatalf("version %d -> %d after 5 writes", v0, v1)
	}
	got, err := b.VerdictsSince(ctx, 0, 0)
	if err != nil || len(got) != 5 || got[4].Sequence != last {
		t.Fatalf("VerdictsSince: %d records, %v", len(got), err)
	}
}

// TestSequenceCommitOrder: concurrent writers' verdicts become visible in
// sequence order, so a reader tailing "sequence > last" never skips one that
// commits late.
func TestSequenceCommitOrder(t *testing.T) {
	url := pgtest.DB(t)
	ctx := ctxT(t)
	const writers, each = 4, 25
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		s := open(t, url)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := s.AppendVerdict(ctx, verdict.Record{Action: "create", Outcome: "success"}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	reader := open(t, url)
	var seen []int64
	var after int64
	deadline := time.Now().Add(60 * time.Second)
	for len(seen) < writers*each && time.Now().Before(deadline) {
		recs, err := reader.VerdictsSince(ctx, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			seen = append(seen, r.Sequence)
			after = r.Sequence
		}
	}
	wg.Wait()
	if len(seen) != writers*each {
		t.Fatalf("a tailing reader saw %d of %d verdicts (one committed behind its sequence)", len(seen), writers*each)
	}
}

// TestUnreachableThenBack: with the database stopped, a write answers
// fence_unavailable (never a hang, never a success); when it returns, the
// same Store works again without being reopened.
func TestUnreachableThenBack(t *testing.T) {
	srv := pgtest.Start(t)
	url, err := srv.CreateDB(ctxT(t), "fence")
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, url)
	ctx := ctxT(t)
	if _, err := s.AppendVerdict(ctx, verdict.Record{Action: "create"}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err = s.AppendVerdict(ctx, verdict.Record{Action: "create"})
	if verdict.CodeOf(err) != verdict.CodeFenceUnavailable {
		t.Fatalf("write with the database down: %v, want fence_unavailable", err)
	}
	if _, err := s.Version(ctx); verdict.CodeOf(err) != verdict.CodeFenceUnavailable {
		t.Fatalf("read with the database down: %v, want fence_unavailable", err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	var werr error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, werr = s.AppendVerdict(ctx, verdict.Record{Action: "create"}); werr == nil {
			break
		}
		if verdict.CodeOf(werr) != verdict.CodeFenceUnavailable {
			t.Fatalf("while the database returns: %v", werr)
		}
	}
	if werr != nil {
		t.Fatalf("the store did not recover: %v", werr)
	}
	recs, err := s.VerdictsSince(ctx, 0, 0)
	if err != nil || len(recs) != 2 {
		t.Fatalf("after recovery: %d verdicts (%v), want 2", len(recs), err)
	}
}

// TestCloseLeavesNoGoroutines: a closed Store leaves nothing running (the
// pool's health checker, its connections' readers, the watcher and its
// connection — the shared watcher once its last Store is closed).
func TestCloseLeavesNoGoroutines(t *testing.T) {
	url := pgtest.DB(t)
	before := goleak.IgnoreCurrent()
	s, err := Open(url, fence.Options{Host: fence.Host{Name: "h1"}}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := Open(url, fence.Options{Host: fence.Host{Name: "h2"}}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	healthy(t, s, 1)
	s2.Close()
	s2.Close() // idempotent: the watcher is released once
	if _, err := s.AppendVerdict(ctxT(t), verdict.Record{Action: "create"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CachedPublished(ctxT(t), "00"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	goleak.VerifyNone(t, before)
}
