package census

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// BenchmarkPaneDeath measures a pane's death under remain-on-exit → the
// census's Changed with PaneDied, for an agent that exits by itself: "hook"
// is the census as built (the pane-died hook's rename of the control window,
// then a read by id), "subscription" the same with the hook removed (the
// once-a-second subscription tick, then a read by id). Interleaved one death
// at a time on one server of 50 live sessions.
//
//	go test -run '^$' -bench PaneDeath -benchtime 40x ./census/
func BenchmarkPaneDeath(b *testing.B) {
	cfg := defaultConfig()
	r := newRig(b, &cfg)
	r.tmux("set-option", "-g", "remain-on-exit", "on")
	for i := 0; i < 50; i++ {
		r.tmux("new-session", "-d", "-s", "idle"+strconv.Itoa(i), "cat")
	}
	info, _ := r.c.Info()
	ctx := context.Background()
	sub := r.c.Subscribe(4096)
	defer sub.Close()
	measure := func(k int) time.Duration {
		id := r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", "die"+strconv.Itoa(k), "read x; exit 7")
		eventually(b, "listed", func() bool { _, ok := r.c.ByID(id); return ok })
		time.Sleep(50 * time.Millisecond) // let the create's own lists settle
		t0 := time.Now()
		r.tmux("send-keys", "-t", id, "Enter")
		for {
			select {
			case ch := <-sub.C():
				if ch.Session.ID == id && ch.PaneDied {
					return time.Since(t0)
				}
			case <-time.After(waitLimit):
				b.Fatal("pane death not seen")
			}
		}
	}
	var hook, subOnly []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		hook = append(hook, measure(2*i))
		if _, err := r.cl.CommandIn(ctx, info.ServerLife, "set-hook", "-gu", paneDiedHook); err != nil {
			b.Fatal(err)
		}
		subOnly = append(subOnly, measure(2*i+1))
		r.c.setPaneHook(ctx, info)
	}
	b.StopTimer()
	b.ReportMetric(float64(median(hook))/1e6, "hook-p50-ms")
	b.ReportMetric(float64(pct(hook, 0.99))/1e6, "hook-p99-ms")
	slow := 0 // deaths whose status tmux reaped late: told by the subscription's poke
	for _, d := range hook {
		if d > 500*time.Millisecond {
			slow++
		}
	}
	b.ReportMetric(float64(slow), "hook-over-500ms")
	b.ReportMetric(float64(median(subOnly))/1e6, "sub-p50-ms")
	b.ReportMetric(float64(pct(subOnly, 0.99))/1e6, "sub-p99-ms")
}
