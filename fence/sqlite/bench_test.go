package sqlite

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
)

// BenchmarkTransition measures one fence transition (a Reserve or a Release:
// each one BEGIN IMMEDIATE transaction) on the daemon's writer connection,
// alone and while 8 other writer processes (re-exec'd test binaries) run the
// same cycle on their own identities. Percentiles go to b.ReportMetric; the
// goal is p99 < 50 ms with 8 writers.
//
//	go test -run '^$' -bench Transition -benchtime 500x ./fence/
func BenchmarkTransition(b *testing.B) {
	b.Run("daemon", func(b *testing.B) { benchTransitions(b, 0) })
	b.Run("8writers", func(b *testing.B) { benchTransitions(b, 8) })
}

func benchTransitions(b *testing.B, writers int) {
	root := b.TempDir()
	dir := filepath.Join(root, "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(root, "home", "fence.sqlite")
	s, err := Open(path, fence.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	workers := make([]*child, writers)
	for i := range workers {
		workers[i] = startChild(b, "worker", "FENCE_DB="+path)
		// Each worker runs as many cycles as we do, so they overlap us throughout.
		workers[i].Send(b, fmt.Sprintf("bench %s %d", dir, b.N))
	}
	lat := make([]time.Duration, 0, 2*b.N)
	errs := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d1, d2, err := cycle(s, dir, "daemon")
		if err != nil {
			errs++
			continue
		}
		lat = append(lat, d1, d2)
	}
	b.StopTimer()
	var workerP99 time.Duration
	for _, w := range workers {
		f := strings.Fields(w.Recv(b)) // ok P50 P99 ERRORS
		p99, _ := strconv.ParseInt(f[2], 10, 64)
		we, _ := strconv.Atoi(f[3])
		workerP99 = max(workerP99, time.Duration(p99))
		errs += we
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(percentile(lat, 50)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 99)), "p99-ms")
	b.ReportMetric(ms(percentile(lat, 100)), "max-ms")
	if writers > 0 {
		b.ReportMetric(ms(workerP99), "writer-p99-ms")
	}
	b.ReportMetric(float64(errs), "contended")
}

// BenchmarkWritable measures the check every fence operation makes before it
// reaches SQLite (writable.go): one access(2) call.
//
//	go test -run '^$' -bench Writable ./fence/
func BenchmarkWritable(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "fence.sqlite"), fence.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for b.Loop() {
		if err := s.writable("bench"); err != nil {
			b.Fatal(err)
		}
	}
}
