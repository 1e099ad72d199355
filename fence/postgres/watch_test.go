package postgres

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/fencetest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// waitFor polls cond until it holds, failing after a generous deadline (the
// machine may be loaded: nothing here is a timing claim).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 60 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// elsewhere opens a handle of host as process pid through a connection string
// of its own, so it has its own watcher: what another daemon's process is to
// the fleet's handles (its writes reach them only by notification).
func (f *fleet) elsewhere(host string, pid int) *Store {
	f.t.Helper()
	return f.open(f.url+"&application_name=elsewhere-"+strconv.Itoa(pid), host, pid)
}

// healthy waits until s's watcher trusts its copies, and returns how many
// times it has LISTENed.
func healthy(t *testing.T, s *Store, minListens int) (uint32, int) {
	t.Helper()
	var pid uint32
	var n int
	waitFor(t, "the watcher listening", func() bool {
		var ok bool
		s.watch.fenceVersion() // starts it
		ok, pid, n = s.watch.state()
		return ok && n >= minListens
	})
	return pid, n
}

// TestWatcherSharedAndSeparate: handles of one process on one database share
// one watcher; a handle through another connection string has its own.
func TestWatcherSharedAndSeparate(t *testing.T) {
	f := newFleet(t)
	a, a2, b := f.owner("host-a", 1), f.owner("host-b", 2), f.elsewhere("host-a", 3)
	if a.watch != a2.watch || a.watch == b.watch {
		t.Fatal("one watcher per database and process, by connection string")
	}
	a2.Close()
	healthy(t, a, 1) // a's watcher outlives a2's Close
}

// TestWatcherSeesOtherProcesses: writes of another process (its own watcher
// and pool) reach this handle's cached reads — the identities cache of its
// host and show's read cache — by notification, without any refresh.
func TestWatcherSeesOtherProcesses(t *testing.T) {
	f := newFleet(t)
	a := f.owner("host-a", 1)
	other, remote := f.elsewhere("host-a", 2), f.elsewhere("host-b", 3)
	healthy(t, a, 1)
	x := f.w.ID("x")
	if _, _, err := a.CachedPublished(bg, x.Digest()); err != nil { // loaded
		t.Fatal(err)
	}
	if _, err := a.CachedIdentityReads(bg, x, 5); err != nil {
		t.Fatal(err)
	}
	p := fencetest.PublishAt(t, other, f.w, "x", "$1", 55, 1234)
	waitFor(t, "another process's publish in the identities cache", func() bool {
		got, ok, err := a.CachedPublished(bg, p.Identity.Digest())
		return err == nil && ok && !got.Ended
	})
	if _, err := other.AppendVerdict(bg, fencetest.IdentityRecord(x, verdict.VerdictRefused, nil)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "another process's verdict in show's cache", func() bool {
		got, err := a.CachedIdentityReads(bg, x, 5)
		recs, _ := got.Verdicts()
		return err == nil && len(recs) > 0
	})
	if _, _, err := remote.ReleaseStuck(bg, p.ReservationID, func(fence.Released) error { return nil },
		func(fence.Released) verdict.Record { return fencetest.Record(verdict.VerdictReleased) }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "another host's release in the identities cache", func() bool {
		got, ok, err := a.CachedPublished(bg, p.Identity.Digest())
		return err == nil && ok && got.Ended
	})
	fencetest.CheckReads(t, a, x, 5, "after the notifications")
}

// TestWatcherKilled: while the watcher's copies are not trusted, cached reads
// read the version rows and stay exact; a watcher whose backend is
// terminated comes back by itself, and what was written meanwhile is read.
func TestWatcherKilled(t *testing.T) {
	f := newFleet(t)
	a, other := f.owner("host-a", 1), f.elsewhere("host-a", 2)
	pid, n := healthy(t, a, 1)
	id := f.w.ID("x")
	if _, err := a.CachedIdentityReads(bg, id, 5); err != nil {
		t.Fatal(err)
	}
	// Untrusted copies (a connection not yet re-established): every read
	// asks the rows, so another process's write is read at once.
	a.watch.mu.Lock()
	a.watch.healthy = false
	a.watch.mu.Unlock()
	for i := 0; i < 3; i++ {
		if _, err := other.AppendVerdict(bg, fencetest.IdentityRecord(id, verdict.VerdictRefused, map[string]any{"i": i})); err != nil {
			t.Fatal(err)
		}
		fencetest.CheckReads(t, a, id, 5, "untrusted copies, verdict "+strconv.Itoa(i))
	}
	q := fencetest.PublishAt(t, other, f.w, "y", "$2", 55, 1234)
	if got, ok, err := a.CachedPublished(bg, q.Identity.Digest()); err != nil || !ok || got.Ended {
		t.Fatalf("untrusted copies: publish of another process not read: %v %v", ok, err)
	}
	var killed bool
	if err := a.pool.QueryRow(bg, `SELECT pg_terminate_backend($1)`, int32(pid)).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the watcher's backend %d: %v %v", pid, killed, err)
	}
	if _, err := other.AppendVerdict(bg, fencetest.IdentityRecord(id, verdict.VerdictRefused, map[string]any{"i": "meanwhile"})); err != nil {
		t.Fatal(err)
	}
	pid2, _ := healthy(t, a, n+1)
	if pid2 == pid {
		t.Fatalf("the watcher came back on the terminated backend %d", pid)
	}
	if _, err := other.AppendVerdict(bg, fencetest.IdentityRecord(id, verdict.VerdictRefused, map[string]any{"i": "after"})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a notification on the new connection", func() bool {
		got, err := a.CachedIdentityReads(bg, id, 5)
		return err == nil && strings.Contains(string(got.VerdictsJSON), `"i":"after"`)
	})
	fencetest.CheckReads(t, a, id, 5, "back after the terminated backend")
}

// TestWatcherLazy: a Store that never checks a version (a pane helper, a
// `fence` command) opens no watcher connection, and closes cleanly.
func TestWatcherLazy(t *testing.T) {
	f := newFleet(t)
	s := f.elsewhere("host-a", 1)
	if _, err := s.AppendVerdict(bg, fencetest.Record(verdict.VerdictRefused)); err != nil {
		t.Fatal(err)
	}
	s.watch.mu.Lock()
	started := s.watch.started
	s.watch.mu.Unlock()
	if started {
		t.Fatal("a write started the watcher")
	}
	s.Close()
}
