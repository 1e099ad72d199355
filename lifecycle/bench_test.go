package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/sqlite"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// BenchmarkCreate measures the whole saga for fresh identities against real tmux
// and SQLite (helper start included); it reports p50/p99 per create.
func BenchmarkCreate(b *testing.B) {
	e := startEnvB(b)
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id, spec := e.identity(fmt.Sprintf("bench%d", i))
		start := time.Now()
		if _, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkEndLookup measures end detection's lookup of the published generation
// in a removed session, with 1,000 published identities in the fence: "scan" is
// the former path (every Identities() row, filtered in Go), "indexed" the current
// one (fence.PublishedByTmux), in the same run on the same database.
//
//	go test -run '^$' -bench EndLookup -benchtime 200x ./lifecycle/
func BenchmarkEndLookup(b *testing.B) {
	const n = 1000
	home := newHome(b)
	store, err := sqlite.Open(filepath.Join(home, "fence.sqlite"), fence.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	dir := filepath.Join(home, "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	life := tmuxctl.ServerLife{PID: 4242, StartTime: 1700000000}
	for i := 0; i < n; i++ {
		publishFake(b, store, fence.Identity{StateDir: dir, SessionID: fmt.Sprintf("s%d", i)}, fmt.Sprintf("$%d", i), life)
	}
	m := &Manager{fence: store, log: zerolog.Nop()}
	scan := func(ctx context.Context, id string) bool {
		pubs, err := store.Identities(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range pubs {
			if !p.Ended && p.TmuxID == id && p.ServerPID == life.PID && p.ServerStart == life.StartTime {
				return true
			}
		}
		return false
	}
	indexed := func(ctx context.Context, id string) bool {
		_, ok := m.publishedByTmuxID(ctx, id, life)
		return ok
	}
	for _, c := range []struct {
		name string
		find func(context.Context, string) bool
	}{{"scan", scan}, {"indexed", indexed}} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if !c.find(context.Background(), fmt.Sprintf("$%d", i%n)) {
					b.Fatal("not found")
				}
			}
		})
	}
}

// publishFake walks one identity through the fence's saga to published and
// released, as if tmux session tmuxID of life held it.
func publishFake(b testing.TB, s fence.Fence, id fence.Identity, tmuxID string, life tmuxctl.ServerLife) {
	ctx := context.Background()
	rr, err := s.Reserve(ctx, id, fence.Spec{StateFile: filepath.Join(id.StateDir, id.SessionID+".jsonl"), Argv: []string{"x"}})
	if err != nil || rr.Outcome != fence.Reserved {
		b.Fatalf("reserve: %v %v", rr.Outcome, err)
	}
	r := rr.Reservation
	advancePublish(b, s, &r, tmuxID, life)
	if err := s.Release(ctx, r.ID); err != nil {
		b.Fatal(err)
	}
}
