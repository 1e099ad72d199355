package tmuxctl

import (
	"os/exec"
	"testing"
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
		if _, err := exec.Command("tmux", "-S", cfg.Socket, "display-message", "-p", "#{pid}").Output(); err != nil {
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
