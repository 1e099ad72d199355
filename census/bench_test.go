package census

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// BenchmarkLookup measures the O(1) queries on a 1,000-session census.
func BenchmarkLookup(b *testing.B) {
	life := tmuxctl.ServerLife{PID: 1}
	c := offline(life)
	var es []*entry
	for i := 0; i < 1000; i++ {
		es = append(es, entryFor(i, "agent-"+strconv.Itoa(i), digest(i)))
	}
	if err := c.apply(c.epoch, life, es); err != nil {
		b.Fatal(err)
	}
	b.Run("ByID", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, ok := c.ByID("$" + strconv.Itoa(i%1000)); !ok {
				b.Fatal("missing")
			}
		}
	})
	b.Run("ByName", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, ok := c.ByName("agent-500"); !ok {
				b.Fatal("missing")
			}
		}
	})
	b.Run("ByIdentity", func(b *testing.B) {
		d := digest(500)
		for i := 0; i < b.N; i++ {
			if len(c.ByIdentity(d)) != 1 {
				b.Fatal("missing")
			}
		}
	})
}

// populate creates n tagged sessions whose panes ran `true` and stay dead
// (remain-on-exit): no pty is held (docs/tmux-facts.md §10).
func populate(b *testing.B, r *rig, n int) {
	b.Helper()
	info, _ := r.c.Info()
	ctx := context.Background()
	r.tmux("set-option", "-g", "remain-on-exit", "on")
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				name := "agent-" + strconv.Itoa(i)
				rep, err := r.cl.CommandIn(ctx, info.ServerLife, "new-session", "-d", "-P", "-F", "#{session_id}", "-s", name, "true")
				if err == nil {
					_, err = r.cl.CommandIn(ctx, info.ServerLife, "set-option", "-t", rep.Lines[0], TagIdentity, digest(i))
				}
				if err == nil {
					_, err = r.cl.CommandIn(ctx, info.ServerLife, "set-option", "-t", rep.Lines[0], TagGeneration, "1")
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	eventually(b, "census sees every session", func() bool { return len(r.c.Snapshot().Sessions) == n })
}

// BenchmarkResync1000 compares a full census re-list at 1,000 sessions with
// the raw `list-sessions -F` round trip on the same connection, interleaved
// in the same run. "cold" is the first sync of a fresh census on that server
// (every managed session's own tags read exactly once).
//
// "ids" is the id-only list that answers a burst of session ends
// (relistIDs), raw and through the census, in the same loop.
func BenchmarkResync1000(b *testing.B) { benchResync(b, 1000) }

// BenchmarkResync2500 is the same at 2,500 sessions (the scale run's size).
func BenchmarkResync2500(b *testing.B) { benchResync(b, 2500) }

func benchResync(b *testing.B, n int) {
	r := newRig(b, nil)
	populate(b, r, n)
	info, _ := r.c.Info()
	ctx := context.Background()
	var raw, warm, cold, ids, idsCensus []time.Duration
	var confirms int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := r.cl.CommandIn(ctx, info.ServerLife, "list-sessions", "-F", listFormat); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := r.c.Refresh(ctx); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		fresh := newCensus(r.cl, nil, testConfig()) // not running: only its sync is used
		fresh.info, fresh.online = info, true
		if err := fresh.Refresh(ctx); err != nil || len(fresh.Snapshot().Sessions) != n {
			b.Fatalf("cold sync: %v", err)
		}
		raw, warm, cold = append(raw, t1.Sub(t0)), append(warm, t2.Sub(t1)), append(cold, time.Since(t2))
		t3 := time.Now()
		if _, err := r.cl.CommandIn(ctx, info.ServerLife, "list-sessions", "-F", "#{session_id}"); err != nil {
			b.Fatal(err)
		}
		t4 := time.Now()
		if err := r.c.relistIDs(ctx); err != nil {
			b.Fatal(err)
		}
		ids, idsCensus = append(ids, t4.Sub(t3)), append(idsCensus, time.Since(t4))
		confirms += fresh.Confirms()
	}
	b.ReportMetric(float64(median(raw)), "raw-p50-ns")
	b.ReportMetric(float64(median(warm)), "resync-p50-ns")
	b.ReportMetric(float64(median(warm))/float64(median(raw)), "resync/raw")
	b.ReportMetric(float64(median(cold)), "cold-p50-ns")
	b.ReportMetric(float64(median(cold))/float64(median(raw)), "cold/raw")
	b.ReportMetric(float64(confirms)/float64(b.N), "cold-exact-reads/op")
	b.ReportMetric(float64(median(ids)), "ids-raw-p50-ns")
	b.ReportMetric(float64(median(idsCensus)), "ids-census-p50-ns")
	b.ReportMetric(float64(median(ids))/float64(median(raw)), "ids/raw")
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// BenchmarkBurst100 counts re-lists per burst of 100 session creates by a
// separate tmux client, with the production timings: "one-line" sends them
// in one command line, "forks" runs 100 `tmux new-session` processes one
// after another, as a shell loop would. The count includes the re-lists
// caused afterwards by the subscription (pane deaths), up to 2.5 s later.
func BenchmarkBurst100(b *testing.B) {
	for _, mode := range []string{"one-line", "forks"} {
		b.Run(mode, func(b *testing.B) {
			cfg := defaultConfig()
			r := newRig(b, &cfg)
			r.tmux("set-option", "-g", "remain-on-exit", "on")
			var relists, idLists int64
			for i := 0; i < b.N; i++ {
				before, idsBefore := r.c.Relists(), r.c.idLists.Load()
				names := createBurst(r, mode, "b"+strconv.Itoa(i)+"-")
				eventually(b, "100 sessions with dead panes", func() bool {
					snap := r.c.Snapshot()
					for _, s := range snap.Sessions {
						if !s.PaneDead {
							return false
						}
					}
					return len(snap.Sessions) == 100
				})
				time.Sleep(2500 * time.Millisecond) // trailing subscription ticks
				relists += r.c.Relists() - before
				idLists += r.c.idLists.Load() - idsBefore
				kill := []string{}
				for k, name := range names {
					if k > 0 {
						kill = append(kill, ";")
					}
					kill = append(kill, "kill-session", "-t", "="+name)
				}
				r.tmux(kill...)
				eventually(b, "burst killed", func() bool { return len(r.c.Snapshot().Sessions) == 0 })
			}
			b.ReportMetric(float64(relists)/float64(b.N), "relists/burst")
			b.ReportMetric(float64(idLists)/float64(b.N), "id-lists/burst")
		})
	}
}

// createBurst creates 100 sessions named prefix0…prefix99 with a separate client.
func createBurst(r *rig, mode, prefix string) []string {
	var names, line []string
	for k := 0; k < 100; k++ {
		name := prefix + strconv.Itoa(k)
		names = append(names, name)
		if mode == "forks" {
			r.tmux("new-session", "-d", "-s", name, "true")
			continue
		}
		if k > 0 {
			line = append(line, ";")
		}
		line = append(line, "new-session", "-d", "-s", name, "true")
	}
	if mode != "forks" {
		r.tmux(line...)
	}
	return names
}
