package integration

import (
	"context"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/internal/pgtest"
)

// TestFleetLookupsWhileDatabaseDown: with the PostgreSQL fence stopped, the
// daemon still answers ls and show of its own sessions (from the census and
// what it last read of the fence), while a create fails closed with
// fence_unavailable; when the database is back, creates work again.
func TestFleetLookupsWhileDatabaseDown(t *testing.T) {
	srv := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	url, err := srv.CreateDB(ctx, "fleet")
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	a := NewHome(t).Start(t, DaemonOpts{Env: []string{"SKC_FENCE=" + url, "SKC_HOST=host-a"}})
	spec := NewSpec(t, "down-1")
	sess := a.MustCreate(t, spec, "published")
	if l := a.List(t); len(l.Sessions) != 1 {
		t.Fatalf("ls before: %+v", l.Sessions)
	}
	if r := a.CLI(t, "show", "--json", sess.Name); r.Code != 0 {
		t.Fatalf("show before the stop\n%s", r)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if l := a.List(t); len(l.Sessions) != 1 || l.Sessions[0].Name != sess.Name {
		t.Fatalf("ls with the database down: %+v", l.Sessions)
	}
	if r := a.CLI(t, "show", "--json", sess.Name); r.Code != 0 {
		t.Fatalf("show with the database down\n%s", r)
	}
	expectError(t, a.CLI(t, NewSpec(t, "down-2").Args()...), 1, "error", "fence_unavailable", "")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitDeadline)
	for {
		r := a.CLI(t, NewSpec(t, "down-3").Args()...)
		if r.Code == 0 {
			a.NoteSession(t)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("creates did not resume after the database returned\n%s", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
