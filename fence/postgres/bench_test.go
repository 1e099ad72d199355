package postgres

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/fencetest"
	"github.com/skc-supervisor/skc-supervisor/fence/sqlite"
	"github.com/skc-supervisor/skc-supervisor/internal/pgtest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// BenchmarkCreateFence measures a create's fence work — Reserve, Advance to
// helper_invoked, spawned and tagged, Publish with its verdict, Release: six
// transitions — with the SQLite engine and the PostgreSQL engine in the same
// run (the goal: PostgreSQL within 1.5× of SQLite), and the hot
// lookups (CachedPublished, CachedIdentityReads) with each. Percentiles go
// to b.ReportMetric.
//
//	go test -run '^$' -bench CreateFence -benchtime 300x ./fence/postgres/
func BenchmarkCreateFence(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "home", "fence.sqlite")
		benchCreates(b, func() (fence.Fence, error) { return sqlite.Open(path, fence.Options{}) })
	})
	b.Run("postgres", func(b *testing.B) {
		url := pgtest.DB(b)
		benchCreates(b, func() (fence.Fence, error) {
			return Open(url, fence.Options{Host: fence.Host{Name: "bench"}}, Config{})
		})
	})
}

func benchCreates(b *testing.B, open func() (fence.Fence, error)) {
	f, err := open()
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	dir := filepath.Join(b.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	creates := make([]time.Duration, 0, b.N)
	lookups := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sid := "s" + strconv.Itoa(i)
		t0 := time.Now()
		p := createOnce(b, f, fence.Identity{StateDir: dir, SessionID: sid}, fencetest.SpecFor(dir, sid), i)
		creates = append(creates, time.Since(t0))
		t0 = time.Now()
		if _, ok, err := f.CachedPublished(bg, p.Identity.Digest()); err != nil || !ok {
			b.Fatalf("lookup: %v %v", ok, err)
		}
		if _, err := f.CachedIdentityReads(bg, p.Identity, 20); err != nil {
			b.Fatal(err)
		}
		lookups = append(lookups, time.Since(t0))
	}
	b.StopTimer()
	report(b, "create", creates)
	report(b, "lookup", lookups)
}

func createOnce(b *testing.B, f fence.Fence, id fence.Identity, spec fence.Spec, i int) fence.Published {
	res, err := f.Reserve(bg, id, spec)
	if err != nil || res.Outcome != fence.Reserved {
		b.Fatalf("reserve: %v %v", res.Outcome, err)
	}
	r := res.Reservation
	steps := []struct {
		to fence.Phase
		p  fence.Patch
	}{
		{fence.PhaseHelperInvoked, fence.Patch{AttemptName: "skc-" + r.ID}},
		{fence.PhaseSpawned, fence.Patch{TmuxID: "$" + strconv.Itoa(i), PanePID: 77, ServerPID: 55, ServerStart: 1}},
		{fence.PhaseTagged, fence.Patch{}},
	}
	for _, st := range steps {
		if err := f.Advance(bg, &r, st.to, st.p); err != nil {
			b.Fatal(err)
		}
	}
	p, _, err := f.Publish(bg, &r, fencetest.IdentRecord(verdict.VerdictPublished, &id))
	if err != nil {
		b.Fatal(err)
	}
	if err := f.Release(bg, r.ID); err != nil {
		b.Fatal(err)
	}
	return p
}

func report(b *testing.B, name string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), name+"-p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), name+"-p99-µs")
}
