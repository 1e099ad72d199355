package main

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/metrics"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// scrape returns the value of every label-less series in reg's text output.
func scrape(t *testing.T, reg *metrics.Registry) map[string]float64 {
	t.Helper()
	var buf bytes.Buffer
	if err := reg.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(buf.String(), "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") || strings.Contains(name, "{") {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		out[name] = v
	}
	return out
}

func TestDaemonMetricsRegistered(t *testing.T) {
	tm := tmuxctl.NewClient(tmuxctl.Config{Socket: "/nonexistent/s"}) // never run
	reg := metrics.NewRegistry()
	registerDaemonMetrics(reg, census.New(tm, nil), tm)
	got := scrape(t, reg)
	for _, name := range []string{"skc_census_sessions", "skc_census_sessions_managed", "skc_census_sessions_unmanaged",
		"skc_census_synced", "skc_census_relists_total", "skc_census_confirms_total", "skc_census_feed_resyncs_total",
		"skc_census_subscription_lines_total", "skc_census_last_sync_seconds", "skc_tmux_reconnects_total"} {
		if v, ok := got[name]; !ok || v != 0 {
			t.Errorf("%s = %v (present %v), want 0 on a census that never ran", name, v, ok)
		}
	}
	for _, name := range []string{"go_goroutines", "process_open_fds", "process_resident_memory_bytes"} {
		if got[name] <= 0 {
			t.Errorf("%s = %v, want > 0", name, got[name])
		}
	}
	// An fd opened between two scrapes shows up: a leak is visible.
	f, err := os.Open("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	after := scrape(t, reg)["process_open_fds"]
	f.Close()
	if after < got["process_open_fds"]+1 {
		t.Fatalf("process_open_fds %v → %v with one more file open", got["process_open_fds"], after)
	}
}
