package tmuxctl

import (
	"slices"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

// BenchmarkRoundTripConn: one `display-message -p '#{pid}'` round trip over
// the open control connection.
func BenchmarkRoundTripConn(b *testing.B) {
	c := dialT(b, testConfig(b))
	drain(c)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Command(bg(), "display-message", "-p", "#{pid}"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRoundTripFork: the same command by forking `tmux -S sock …` each
// time, as tools that poll tmux do. The baseline for the ratio.
func BenchmarkRoundTripFork(b *testing.B) {
	cfg := testConfig(b)
	c := dialT(b, cfg) // keeps the server up, as in production
	drain(c)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tmuxtest.Command("-S", cfg.Socket, "display-message", "-p", "#{pid}").Output(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRoundTripConnParallel: pipelined commands from many goroutines.
func BenchmarkRoundTripConnParallel(b *testing.B) {
	c := dialT(b, testConfig(b))
	drain(c)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Command(bg(), "display-message", "-p", "#{pid}"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRoundTripInterleaved alternates one Conn round trip and one fork
// of the same command, so both see the same machine load, and reports the
// medians and their ratio (robust to load spikes on a shared machine).
func BenchmarkRoundTripInterleaved(b *testing.B) {
	cfg := testConfig(b)
	c := dialT(b, cfg)
	drain(c)
	conn := make([]time.Duration, 0, b.N)
	fork := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := c.Command(bg(), "display-message", "-p", "#{pid}"); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := tmuxtest.Command("-S", cfg.Socket, "display-message", "-p", "#{pid}").Output(); err != nil {
			b.Fatal(err)
		}
		conn, fork = append(conn, t1.Sub(t0)), append(fork, time.Since(t1))
	}
	b.StopTimer()
	cp, fp := median(conn), median(fork)
	b.ReportMetric(float64(cp.Microseconds()), "conn-p50-µs")
	b.ReportMetric(float64(fp.Microseconds()), "fork-p50-µs")
	b.ReportMetric(float64(fp)/float64(cp), "fork/conn-p50")
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
