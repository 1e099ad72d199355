package census

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// BenchmarkEnd100 measures session end → Removed change at 100 live
// sessions: kill-session is sent on the census's own control connection
// (what tmux sees as a session ending) and the clock stops when the
// census's subscriber receives Removed for it. One end at a time, with
// 100 ms between ends so each is a lone event, as agent exits usually are.
func BenchmarkEnd100(b *testing.B) {
	r := newRig(b, ptr(defaultConfig()))
	info, _ := r.c.Info()
	ctx := context.Background()
	var lat []time.Duration
	full0, ids0 := r.c.Relists(), r.c.idLists.Load()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if i%100 == 0 { // (re)fill to 100 live sessions
			var line []string
			for k := 0; k < 100; k++ {
				if k > 0 {
					line = append(line, ";")
				}
				line = append(line, "new-session", "-d", "-s", "e"+strconv.Itoa(i+k), "sleep 100000")
			}
			r.tmux(line...)
			eventually(b, "100 sessions", func() bool { return len(r.c.Snapshot().Sessions) == 100 })
		}
		time.Sleep(100 * time.Millisecond)
		s, ok := r.c.ByName("e" + strconv.Itoa(i))
		if !ok {
			b.Fatal("session missing")
		}
		sub := r.c.Subscribe(1000)
		b.StartTimer()
		t0 := time.Now()
		if _, err := r.cl.CommandIn(ctx, info.ServerLife, "kill-session", "-t", s.ID); err != nil {
			b.Fatal(err)
		}
		for {
			ch := next(b, sub)
			if ch.Kind == Removed && ch.Session.ID == s.ID {
				break
			}
		}
		lat = append(lat, time.Since(t0))
		sub.Close()
	}
	b.ReportMetric(float64(r.c.Relists()-full0)/float64(b.N), "full-lists/end")
	b.ReportMetric(float64(r.c.idLists.Load()-ids0)/float64(b.N), "id-lists/end")
	b.ReportMetric(float64(median(lat)), "end-p50-ns")
	b.ReportMetric(float64(pct(lat, 0.99)), "end-p99-ns")
}

func ptr[T any](v T) *T { return &v }

func pct(d []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
