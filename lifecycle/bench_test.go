package lifecycle

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"
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
