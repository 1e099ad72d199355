package postgres

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/fencetest"
	"github.com/skc-supervisor/skc-supervisor/internal/pgtest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// fleet is one database shared by handles of several hosts, each handle an
// owner process of its host with injected liveness.
type fleet struct {
	t   *testing.T
	url string
	w   *fencetest.World
}

func newFleet(t *testing.T) *fleet {
	f := &fleet{t: t, url: pgtest.DB(t)}
	f.w = hostAWorld(t, f.url)
	return f
}

// hostAWorld is a world whose owners are handles of host "host-a" on url.
func hostAWorld(t *testing.T, url string) *fencetest.World {
	return fencetest.NewWorldWith(t, func(opt fence.Options) (fence.Fence, error) {
		opt.Host.Name = "host-a"
		return Open(url, opt, Config{})
	})
}

// owner opens a handle of host acting as process pid (alive until Set).
func (f *fleet) owner(host string, pid int) *Store {
	f.t.Helper()
	return f.open(f.url, host, pid)
}

// open opens a handle of host as process pid through url.
func (f *fleet) open(url, host string, pid int) *Store {
	f.t.Helper()
	f.w.Set(pid, fence.Alive)
	s, err := Open(url, fence.Options{
		Liveness: f.w.Liveness,
		Self:     func() (int, string, error) { return pid, "inc-" + strconv.Itoa(pid), nil },
		Host:     fence.Host{Name: host},
	}, Config{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { s.Close() })
	return s
}

var bg = context.Background()

// TestRemoteOwnerFailsClosed: a reservation row owned on another host blocks
// as identity_reserved_unknown even when the local liveness check would call
// its owner dead (its pid and boot id mean nothing here); Reclaim and
// recovery refuse it too.
func TestRemoteOwnerFailsClosed(t *testing.T) {
	f := newFleet(t)
	a, b := f.owner("host-a", 1), f.owner("host-b", 2)
	id, spec := f.w.ID("x"), f.w.Spec("x")
	r := fencetest.MustReserve(t, a, id, spec)
	fencetest.AdvanceTo(t, a, &r, fence.PhaseSpawned)
	f.w.Set(1, fence.Dead) // what pid 1 would look like from host-b: proven nothing
	_, err := b.Reserve(bg, id, spec)
	fencetest.WantCode(t, err, verdict.CodeIdentityReservedUnknown)
	if d := detailsOf(err); d["host"] != "host-a" {
		t.Fatalf("details %v, want host host-a", d)
	}
	_, err = b.Reclaim(bg, id, r.ID, spec)
	fencetest.WantCode(t, err, verdict.CodeIdentityReservedUnknown)
	_, err = b.RecoverAbandoned(bg, r, nil)
	fencetest.WantCode(t, err, verdict.CodeIdentityReservedUnknown)
	// The same row is displaceable on its own host once its owner is dead.
	a2 := f.owner("host-a", 3)
	res, err := a2.Reserve(bg, id, spec)
	if err != nil || res.Outcome != fence.NeedsRecovery {
		t.Fatalf("host-a's own dead row: %v %v, want needs_recovery", res.Outcome, err)
	}
}

func detailsOf(err error) map[string]any {
	if e := verdict.AsError(err); e != nil {
		return e.Details
	}
	return nil
}

// TestRemotePublishedIsExisting: an identity published on another host and
// not ended is PublishedElsewhere, with its host; this host can
// neither end, stop nor restart it, and its daemon-facing lists do not show
// it; the fleet lists do. Once the operator releases it, it can be created
// here, with a verdict.
func TestRemotePublishedIsExisting(t *testing.T) {
	f := newFleet(t)
	a, b := f.owner("host-a", 1), f.owner("host-b", 2)
	id, spec := f.w.ID("x"), f.w.Spec("x")
	p := fencetest.PublishAt(t, a, f.w, "x", "$1", 55, 1234)
	rr, err := b.Reserve(bg, id, spec)
	if err != nil || rr.Outcome != fence.PublishedElsewhere || rr.Published.Host != "host-a" ||
		rr.Published.SessionName != p.SessionName {
		t.Fatalf("reserve: %v %+v", err, rr)
	}
	if got, ok, err := b.FleetPublishedByName(bg, p.SessionName); err != nil || !ok || got.Host != "host-a" {
		t.Fatalf("FleetPublishedByName %+v %v %v", got, ok, err)
	}
	if ok, _, err := b.MarkEnded(bg, id, p.Generation, fencetest.Record(verdict.VerdictEnded)); ok || err != nil {
		t.Fatalf("host-b ended host-a's generation: %v %v", ok, err)
	}
	if _, ok, err := b.BeginStop(bg, id, p.Generation, "kill", time.Now().Add(time.Minute)); ok || err != nil {
		t.Fatalf("host-b began a stop of host-a's generation: %v %v", ok, err)
	}
	if pubs, err := b.Identities(bg); err != nil || len(pubs) != 0 {
		t.Fatalf("host-b's identities %+v %v, want none", pubs, err)
	}
	if _, ok, _ := b.CachedPublished(bg, id.Digest()); ok {
		t.Fatal("host-b's cache holds host-a's identity")
	}
	if _, ok, _ := b.PublishedByTmux(bg, 55, 1234, "$1"); ok {
		t.Fatal("host-b found host-a's session by its tmux id")
	}
	all, err := b.FleetIdentities(bg)
	if err != nil || len(all) != 1 || all[0].Host != "host-a" {
		t.Fatalf("fleet identities %+v %v", all, err)
	}
	if got, host, ok, err := b.PublishedHost(bg, id); err != nil || !ok || host != "host-a" || got.Generation != p.Generation {
		t.Fatalf("PublishedHost %v %q %v %v", got.Generation, host, ok, err)
	}
	_, rec, err := b.ReleaseStuck(bg, p.ReservationID, func(fence.Released) error { return nil },
		func(fence.Released) verdict.Record { return fencetest.Record(verdict.VerdictReleased) })
	if err != nil || rec.Sequence == 0 {
		t.Fatalf("release: %v (sequence %d)", err, rec.Sequence)
	}
	r := fencetest.MustReserve(t, b, id, spec)
	if r.Generation != p.Generation+1 {
		t.Fatalf("generation %d after %d", r.Generation, p.Generation)
	}
}

// TestVerdictsPerHost: each host's journal (its verdicts.jsonl follows it)
// holds its own verdicts, in the fleet-wide order; the fleet's holds all.
func TestVerdictsPerHost(t *testing.T) {
	f := newFleet(t)
	a, b := f.owner("host-a", 1), f.owner("host-b", 2)
	for i := 0; i < 3; i++ {
		for _, s := range []*Store{a, b} {
			if _, err := s.AppendVerdict(bg, fencetest.Record("published")); err != nil {
				t.Fatal(err)
			}
		}
	}
	mine, err := a.VerdictsSince(bg, 0, 0)
	if err != nil || fencetest.Seqs(mine) != "[1,3,5]" {
		t.Fatalf("host-a's verdicts %s %v", fencetest.Seqs(mine), err)
	}
	all, err := a.FleetVerdictsSince(bg, 2, 0)
	if err != nil || fencetest.Seqs(all) != "[3,4,5,6]" {
		t.Fatalf("fleet verdicts after 2: %s %v", fencetest.Seqs(all), err)
	}
}

// TestCacheSeesOtherHandles: a cache stays exact when another handle of
// the same host (another process) changes its identities, and when an
// operator on another host releases one.
func TestCacheSeesOtherHandles(t *testing.T) {
	f := newFleet(t)
	a, a2, b := f.owner("host-a", 1), f.owner("host-a", 3), f.owner("host-b", 2)
	p := fencetest.PublishAt(t, a, f.w, "x", "$1", 55, 1234)
	if got, ok, err := a2.CachedPublishedByName(bg, p.SessionName); err != nil || !ok || got.Generation != 1 {
		t.Fatalf("cached by name: %v %v", ok, err)
	}
	if ok, _, err := a.MarkEnded(bg, p.Identity, 1, fencetest.Record(verdict.VerdictEnded)); !ok || err != nil {
		t.Fatalf("mark ended: %v %v", ok, err)
	}
	if _, ok, err := a2.CachedPublishedByName(bg, p.SessionName); err != nil || ok {
		t.Fatalf("another handle's end not seen by the cache: %v %v", ok, err)
	}
	q := fencetest.PublishAt(t, a, f.w, "y", "$2", 55, 1234)
	if got, ok, _ := a2.CachedPublished(bg, q.Identity.Digest()); !ok || got.Ended {
		t.Fatalf("another handle's publish not seen: %v %+v", ok, got)
	}
	if _, _, err := b.ReleaseStuck(bg, q.ReservationID, func(fence.Released) error { return nil },
		func(fence.Released) verdict.Record { return fencetest.Record(verdict.VerdictReleased) }); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Store{a, a2} {
		if got, ok, _ := s.CachedPublished(bg, q.Identity.Digest()); !ok || !got.Ended {
			t.Fatalf("another host's release not seen: %v %+v", ok, got)
		}
	}
}

// TestContendedIdentity: an identity whose lock another writer holds beyond
// the busy timeout is identity_fence_contended, never a wait without end and
// never a second row; other identities are not held up by it.
func TestContendedIdentity(t *testing.T) {
	f := newFleet(t)
	a := f.owner("host-a", 1)
	id, spec := f.w.ID("x"), f.w.Spec("x")
	conn, err := pgx.Connect(bg, f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(bg)
	tx, err := conn.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(bg, `SELECT pg_advisory_xact_lock($1)`, lockKey(id.Digest())); err != nil {
		t.Fatal(err)
	}
	_, err = a.Reserve(bg, id, spec)
	fencetest.WantCode(t, err, verdict.CodeIdentityFenceContended)
	fencetest.MustReserve(t, a, f.w.ID("y"), f.w.Spec("y"))
	if err := tx.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	fencetest.MustReserve(t, a, id, spec)
}

// TestRacingHandles: handles of several hosts (each its own pool, as
// separate daemons) race to reserve one identity, round after round:
// exactly one wins each round, the others are refused with a code.
func TestRacingHandles(t *testing.T) {
	f := newFleet(t)
	const racers, rounds = 12, 20
	stores := make([]*Store, racers)
	for i := range stores {
		stores[i] = f.owner("host-"+strconv.Itoa(i%3), 100+i)
	}
	for round := 0; round < rounds; round++ {
		id, spec := f.w.ID("r"+strconv.Itoa(round)), f.w.Spec("r"+strconv.Itoa(round))
		var wg sync.WaitGroup
		var mu sync.Mutex
		won, codes := 0, map[string]int{}
		start := make(chan struct{})
		for _, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := s.Reserve(bg, id, spec)
				mu.Lock()
				defer mu.Unlock()
				if err == nil && res.Outcome == fence.Reserved {
					won++
					return
				}
				codes[verdict.CodeOf(err)]++
			}()
		}
		close(start)
		wg.Wait()
		if won != 1 {
			t.Fatalf("round %d: %d winners (refusals %v)", round, won, codes)
		}
		for c := range codes {
			switch c {
			case verdict.CodeIdentityReservedLive, verdict.CodeIdentityReservedUnknown, verdict.CodeIdentityFenceContended:
			default:
				t.Fatalf("round %d: refusal %q", round, c)
			}
		}
	}
}

// TestDatabaseGoneMidCreate: with the database stopped between the saga's
// steps, every step answers fence_unavailable (nothing half-written); when
// it is back, the same handles resume: the row is still ours and the create
// completes; no second row appears.
func TestDatabaseGoneMidCreate(t *testing.T) {
	srv := pgtest.Start(t)
	url, err := srv.CreateDB(bg, "fence")
	if err != nil {
		t.Fatal(err)
	}
	w := hostAWorld(t, url)
	s := w.Owner(1)
	r := fencetest.MustReserve(t, s, w.ID("x"), w.Spec("x"))
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	err = s.Advance(bg, &r, fence.PhaseHelperInvoked, fence.Patch{AttemptName: "skc-" + r.ID})
	fencetest.WantCode(t, err, verdict.CodeFenceUnavailable)
	_, err = s.Reserve(bg, w.ID("y"), w.Spec("y"))
	fencetest.WantCode(t, err, verdict.CodeFenceUnavailable)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err = s.Advance(bg, &r, fence.PhaseHelperInvoked, fence.Patch{AttemptName: "skc-" + r.ID})
		if err == nil || time.Now().After(deadline) {
			break
		}
		fencetest.WantCode(t, err, verdict.CodeFenceUnavailable)
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("no recovery after the database returned: %v", err)
	}
	fencetest.AdvanceTo(t, s, &r, fence.PhasePublished)
	if rows, err := s.Reservations(bg); err != nil || len(rows) != 1 || rows[0].ID != r.ID {
		t.Fatalf("rows after recovery: %+v %v", rows, err)
	}
}

// TestForgetHost: a host gone for good is forgotten by an operator on
// another host: its rows and running generations are cleared in one write
// with a verdict, and its identities can then be created elsewhere. This
// host itself cannot be forgotten, and a host with nothing is not_found.
func TestForgetHost(t *testing.T) {
	f := newFleet(t)
	a, a2, b := f.owner("host-a", 1), f.owner("host-a", 3), f.owner("host-b", 2)
	if err := a.RegisterHost(bg); err != nil {
		t.Fatal(err)
	}
	p := fencetest.PublishAt(t, a, f.w, "x", "$1", 55, 1234)
	r := fencetest.MustReserve(t, a2, f.w.ID("y"), f.w.Spec("y"))
	fencetest.AdvanceTo(t, a2, &r, fence.PhaseSpawned)
	describe := func(fg fence.Forgotten) verdict.Record { return fencetest.Record(verdict.VerdictReleased) }
	_, _, err := b.ForgetHost(bg, "host-b", describe)
	fencetest.WantCode(t, err, verdict.CodeInvalidRequest)
	_, _, err = b.ForgetHost(bg, "host-c", describe)
	fencetest.WantCode(t, err, verdict.CodeNotFound)
	fg, rec, err := b.ForgetHost(bg, "host-a", describe)
	if err != nil || rec.Sequence == 0 || len(fg.Reservations) != 1 || len(fg.Published) != 1 {
		t.Fatalf("forget: %+v %v (sequence %d)", fg, err, rec.Sequence)
	}
	for _, sid := range []string{"x", "y"} {
		nr := fencetest.MustReserve(t, b, f.w.ID(sid), f.w.Spec(sid))
		if sid == "x" && nr.Generation != p.Generation+1 {
			t.Fatalf("generation %d after %d", nr.Generation, p.Generation)
		}
	}
	// host-a's old handle has lost its row: it must not act on it.
	err = a2.Advance(bg, &r, fence.PhaseTagged, fence.Patch{})
	fencetest.WantCode(t, err, verdict.CodeFenceLost)
}

// TestLockKeySQL: the identity lock taken by reservation id (computed in
// SQL) is the one taken by identity (computed in Go), for any spelling.
func TestLockKeySQL(t *testing.T) {
	s := open(t, pgtest.DB(t))
	for _, id := range []fence.Identity{
		{StateDir: "/a", SessionID: "b"},
		{StateDir: "/srv/état/agents", SessionID: "sess-ü-1"},
		{StateDir: "/tmp/x y", SessionID: "日本"},
	} {
		var k int64
		if err := s.pool.QueryRow(bg, `SELECT `+keySQL+` FROM (VALUES ($1::text, $2::text)) v(state_dir, session_id)`,
			id.StateDir, id.SessionID).Scan(&k); err != nil {
			t.Fatal(err)
		}
		if want := lockKey(id.Digest()); k != want {
			t.Errorf("%+v: SQL key %d, Go key %d", id, k, want)
		}
	}
}

// TestCachedReadsWhileDown: with the database stopped, the caches answer what
// they last read (the daemon's ls and show of its own sessions go on); a read
// never made before is fence_unavailable; writes are fence_unavailable.
func TestCachedReadsWhileDown(t *testing.T) {
	srv := pgtest.Start(t)
	url, err := srv.CreateDB(bg, "fence")
	if err != nil {
		t.Fatal(err)
	}
	w := hostAWorld(t, url)
	s := w.Owner(1)
	p := fencetest.PublishAt(t, s, w, "x", "$1", 55, 1234)
	before, err := s.CachedIdentityReads(bg, p.Identity, 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.CachedPublished(bg, p.Identity.Digest()); !ok || err != nil {
		t.Fatalf("cached before: %v %v", ok, err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.CachedPublishedByName(bg, p.SessionName); !ok || err != nil || got.Generation != p.Generation {
		t.Fatalf("cached with the database down: %v %v", ok, err)
	}
	got, err := s.CachedIdentityReads(bg, p.Identity, 5)
	if err != nil || string(got.VerdictsJSON) != string(before.VerdictsJSON) {
		t.Fatalf("identity reads with the database down: %v", err)
	}
	_, err = s.CachedIdentityReads(bg, w.ID("never-read"), 5)
	fencetest.WantCode(t, err, verdict.CodeFenceUnavailable)
	_, err = s.Reserve(bg, w.ID("y"), w.Spec("y"))
	fencetest.WantCode(t, err, verdict.CodeFenceUnavailable)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
}
