package census

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// oldSubFormat is the census subscription before it was shortened (all five
// tags, every pane's id, pid and exit fields): the baseline of
// BenchmarkSubscriptionCost.
const oldSubFormat = "#{S:#{session_id}/#{session_attached}/" +
	"#{@skc-control}/#{@skc-identity}/#{@skc-generation}/#{@skc-reservation}/#{@skc-state}/" +
	"#{W:#{P:#{pane_id}.#{pane_pid}.#{pane_dead}.#{pane_dead_status}.#{pane_dead_signal};}} }"

// prevSubFormat is the subscription of 2026-11-30 06:00–22:00 (id, attached,
// identity's last four digits, generation, the panes' dead flags): without
// the dead panes' status and signal or the window's activity.
const prevSubFormat = "#{S:#{session_id}/#{session_attached}/#{=-4:@skc-identity}/#{@skc-generation}/" +
	"#{W:#{P:#{pane_dead}}} }"

// BenchmarkSubscriptionCost measures what the census subscription costs the
// tmux server while nothing changes: tmux re-evaluates it every second. It
// samples the server's CPU time (utime+stime) over 5 s with the old, the
// previous and the current format, in turn, on the same idle server of
// SKC_BENCH_SESSIONS sessions (default 4,000; each has one tagged pane, dead
// under remain-on-exit, which is the current format's longest segment).
//
//	go test -run '^$' -bench SubscriptionCost -benchtime 1x -timeout 20m ./census/
func BenchmarkSubscriptionCost(b *testing.B) {
	n := 4000
	if v, err := strconv.Atoi(os.Getenv("SKC_BENCH_SESSIONS")); err == nil && v > 0 {
		n = v
	}
	r := newRig(b, nil)
	populate(b, r, n)
	info, _ := r.c.Info()
	pid := info.ServerLife.PID
	ctx := context.Background()
	sample := func(format string) float64 {
		if _, err := r.cl.CommandIn(ctx, info.ServerLife, "refresh-client", "-B", subName+"::"+format); err != nil {
			b.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond) // the first evaluation sends the value
		t0 := cpuTicks(b, pid)
		time.Sleep(5 * time.Second)
		return float64(cpuTicks(b, pid)-t0) / 5
	}
	var old, prev, cur []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		old = append(old, sample(oldSubFormat))
		prev = append(prev, sample(prevSubFormat))
		cur = append(cur, sample(subFormat))
	}
	b.StopTimer()
	o, c := medianF(old), medianF(cur)
	b.ReportMetric(o, "old-ticks/s")
	b.ReportMetric(medianF(prev), "prev-ticks/s")
	b.ReportMetric(c, "ticks/s")
	if c > 0 {
		b.ReportMetric(o/c, "old/new")
	}
}

// cpuTicks reads a process's utime+stime in clock ticks (usually 1/100 s).
func cpuTicks(b *testing.B, pid int) int {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.Atoi(f[11])
	k, _ := strconv.Atoi(f[12])
	return u + k
}

func medianF(v []float64) float64 {
	s := append([]float64(nil), v...)
	for i := range s { // insertion sort: a handful of samples
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[len(s)/2]
}
