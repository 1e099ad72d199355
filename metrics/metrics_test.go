package metrics

import (
	"bytes"
	"math"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

func sample() *Registry {
	r := NewRegistry()
	c := r.Counter("skc_creates_total", "Creates by status.", "status")
	c.With("published").Inc()
	c.With("published").Add(2)
	c.With("refused").Inc()
	c.With("refused").Add(-5) // ignored: counters only go up
	r.Counter("skc_plain_total", "A counter without labels.")
	g := r.Gauge("skc_sessions", "Supervised sessions.", "state")
	g.With("live").Set(3)
	g.With("live").Dec()
	g.With("dead").Inc()
	r.GaugeFunc("skc_census_synced", "1 when the census is synced.", func() float64 { return 1 })
	r.CounterFunc("skc_tmux_reconnects_total", "Control connection reconnects.", func() float64 { return 4 })
	h := r.Histogram("skc_create_seconds", "Create latency.", []float64{0.1, 0.01, 1, 0.1}, "status")
	for _, v := range []float64{0.005, 0.05, 0.5, 5} {
		h.With("published").Observe(v)
	}
	r.Counter("skc_escapes_total", "Help with a \\ backslash\nand a newline.", "path").
		With("a\\b \"q\"\nx").Inc()
	return r
}

const golden = `# HELP skc_census_synced 1 when the census is synced.
# TYPE skc_census_synced gauge
skc_census_synced 1
# HELP skc_create_seconds Create latency.
# TYPE skc_create_seconds histogram
skc_create_seconds_bucket{status="published",le="0.01"} 1
skc_create_seconds_bucket{status="published",le="0.1"} 2
skc_create_seconds_bucket{status="published",le="1"} 3
skc_create_seconds_bucket{status="published",le="+Inf"} 4
skc_create_seconds_sum{status="published"} 5.555
skc_create_seconds_count{status="published"} 4
# HELP skc_creates_total Creates by status.
# TYPE skc_creates_total counter
skc_creates_total{status="published"} 3
skc_creates_total{status="refused"} 1
# HELP skc_escapes_total Help with a \\ backslash\nand a newline.
# TYPE skc_escapes_total counter
skc_escapes_total{path="a\\b \"q\"\nx"} 1
# HELP skc_plain_total A counter without labels.
# TYPE skc_plain_total counter
skc_plain_total 0
# HELP skc_sessions Supervised sessions.
# TYPE skc_sessions gauge
skc_sessions{state="dead"} 1
skc_sessions{state="live"} 2
# HELP skc_tmux_reconnects_total Control connection reconnects.
# TYPE skc_tmux_reconnects_total counter
skc_tmux_reconnects_total 4
`

func TestGoldenText(t *testing.T) {
	var b bytes.Buffer
	if err := sample().WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if b.String() != golden {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), golden)
	}
}

func TestPromtoolAccepts(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian package 'prometheus'; `make test-deps` installs it): format not checked by promtool")
	}
	var b bytes.Buffer
	if err := sample().WriteText(&b); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = &b
	out, err := cmd.CombinedOutput()
	// promtool also lints (e.g. counters should end in _total); only format
	// errors matter here, and a lint finding exits 3 with "…" lines. Our names
	// follow the conventions, so any output is a failure.
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

func TestRegisterTwice(t *testing.T) {
	r := NewRegistry()
	a := r.Counter("x_total", "x", "l")
	b := r.Counter("x_total", "x", "l")
	a.With("v").Inc()
	b.With("v").Inc()
	if a.With("v").Value() != 2 {
		t.Fatal("same family expected")
	}
	mustPanic(t, func() { r.Gauge("x_total", "x", "l") })
	mustPanic(t, func() { r.Counter("x_total", "x", "other") })
	mustPanic(t, func() { r.Counter("bad-name", "x") })
	mustPanic(t, func() { r.Counter("y_total", "x", "__reserved") })
	mustPanic(t, func() { r.Histogram("h", "x", nil, "le") })
	mustPanic(t, func() { r.Counter("z_total", "x", "a").With() })
}

func mustPanic(t *testing.T, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	f()
}

func TestNilRegistry(t *testing.T) {
	var r *Registry
	c := r.Counter("a_total", "a", "x")
	c.With("1").Inc()
	r.Histogram("h_seconds", "h", nil).With().Observe(1)
	r.GaugeFunc("g", "g", func() float64 { return 1 })
	if c.With("1").Value() != 1 {
		t.Fatal("nil registry metrics must still count")
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil || b.Len() != 0 {
		t.Fatal("nil registry writes nothing")
	}
}

func TestHistogramEdges(t *testing.T) {
	r := NewRegistry()
	h := r.Histogram("lat_seconds", "l", nil).With()
	h.Observe(0.0005) // on a bound: counts in that bucket (le is inclusive)
	h.Observe(11)     // over the top: +Inf only
	h.Observe(math.Inf(1))
	var b bytes.Buffer
	r.WriteText(&b)
	out := b.String()
	for _, want := range []string{`lat_seconds_bucket{le="0.0005"} 1`, `lat_seconds_bucket{le="10"} 1`,
		`lat_seconds_bucket{le="+Inf"} 3`, `lat_seconds_count 3`, `lat_seconds_sum +Inf`} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if len(DefaultBuckets) == 0 || DefaultBuckets[0] != 0.0005 || DefaultBuckets[len(DefaultBuckets)-1] != 10 {
		t.Fatal("DefaultBuckets")
	}
}

func TestConcurrentUpdates(t *testing.T) {
	r := NewRegistry()
	c := r.Counter("c_total", "c", "k")
	h := r.Histogram("h_seconds", "h", nil, "k")
	g := r.Gauge("g", "g")
	var wg sync.WaitGroup
	const n, each = 8, 2000
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			k := []string{"a", "b"}[i%2]
			for j := 0; j < each; j++ {
				c.With(k).Inc()
				h.With(k).Observe(0.25)
				g.With().Add(1)
				if j%100 == 0 {
					r.WriteText(&bytes.Buffer{}) // scrapes race with updates
				}
			}
		}(i)
	}
	wg.Wait()
	if got := c.With("a").Value() + c.With("b").Value(); got != n*each {
		t.Fatalf("counter %v", got)
	}
	if got := h.With("a").Count() + h.With("b").Count(); got != n*each {
		t.Fatalf("histogram count %v", got)
	}
	if g.With().Value() != n*each {
		t.Fatal("gauge")
	}
}

func BenchmarkCounterInc(b *testing.B) {
	c := NewRegistry().Counter("c_total", "c", "k").With("v")
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Inc()
		}
	})
}

func BenchmarkHistogramObserve(b *testing.B) {
	h := NewRegistry().Histogram("h_seconds", "h", nil, "k").With("v")
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h.Observe(0.003)
		}
	})
}

func BenchmarkWith(b *testing.B) {
	c := NewRegistry().Counter("c_total", "c", "a", "b")
	for i := 0; i < b.N; i++ {
		c.With("x", "y").Inc()
	}
}
