package integration

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// scrapeMetrics is GET /metrics as series → value ("name{labels}" as written).
func scrapeMetrics(t *testing.T, d *Daemon) (map[string]float64, string) {
	t.Helper()
	status, b := d.Get(t, "/metrics")
	if status != 200 {
		t.Fatalf("GET /metrics: %d %s", status, clip(string(b)))
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("GET /metrics: unparsable sample line %q", line)
		}
		out[line[:i]] = v
	}
	return out, string(b)
}

// metricDeltas compares after-before with want (series → delta); "" when all match.
func metricDeltas(before, after map[string]float64, want map[string]float64) string {
	var bad []string
	for series, delta := range want {
		if got := after[series] - before[series]; got != delta {
			bad = append(bad, fmt.Sprintf("%s moved by %v, want %v", series, got, delta))
		}
	}
	sort.Strings(bad)
	return strings.Join(bad, "; ")
}

// TestMetricsMoved: a create, an existing, a refusal, an agent that exits and a
// kill move exactly the counters they should (creates by outcome, refusals by
// code, ended by exit kind, the latency histogram); the census gauge follows;
// no series carries a per-session label; promtool accepts the exposition.
func TestMetricsMoved(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("promtool"); err != nil && os.Getenv("CI") != "" {
		t.Fatal("promtool is not installed but CI is set (Debian: apt-get install prometheus; `make test-deps` does it)")
	}
	d := StartDaemon(t, DaemonOpts{})
	before, _ := scrapeMetrics(t, d)

	spec := NewSpec(t, "metrics-a")
	a := d.MustCreate(t, spec, "published")
	waitGauge(t, d, "skc_census_sessions", 1)
	d.MustCreate(t, spec, "existing")
	other := spec
	other.StateFile = filepath.Join(spec.StateDir, "other.jsonl")
	if r, ans := d.Create(t, other); r.Code == 0 || ans.Error == nil || ans.Error.Code != "identity_state_file_mismatch" {
		t.Fatalf("create with another state file: want refused identity_state_file_mismatch\n%s", r)
	}
	quick := NewSpec(t, "metrics-b")
	quick.Argv = []string{"/bin/sh", "-c", "exit 0"}
	b := d.MustCreate(t, quick, "published")
	d.WaitVerdict(t, "ended verdict of "+b.Name, endedFor(b.Name))
	if r := d.CLI(t, "kill", "--json", a.Name); r.Code != 0 {
		t.Fatalf("kill: want exit 0\n%s", r)
	}

	want := map[string]float64{
		`skc_creates_total{outcome="published"}`:                            2,
		`skc_creates_total{outcome="existing"}`:                             1,
		`skc_creates_total{outcome="refused"}`:                              1,
		`skc_create_refusals_total{code="identity_state_file_mismatch"}`:    1,
		`skc_sessions_ended_total{exit_kind="exit"}`:                        1,
		`skc_sessions_ended_total{exit_kind="cleanup"}`:                     1,
		`skc_stops_total{outcome="gone"}`:                                   2,
		`skc_create_duration_seconds_count{outcome="published"}`:            2,
		`skc_create_duration_seconds_bucket{outcome="published",le="+Inf"}`: 2,
		`skc_create_duration_seconds_count{outcome="existing"}`:             1,
		`skc_create_duration_seconds_count{outcome="refused"}`:              1,
		`skc_create_failures_total{code="spawn_failed"}`:                    0,
		`skc_sessions_ended_total{exit_kind="unknown"}`:                     0,
		`skc_creates_total{outcome="failed"}`:                               0,
		`skc_create_duration_seconds_bucket{outcome="existing",le="+Inf"}`:  1,
		`skc_create_duration_seconds_bucket{outcome="refused",le="+Inf"}`:   1,
		`skc_fence_transition_duration_seconds_count{op="publish"}`:         2,
		`skc_fence_transition_duration_seconds_count{op="end"}`:             2,
	}
	var text string
	WaitFor(t, waitDeadline, "the counters to move", func() error {
		var after map[string]float64
		after, text = scrapeMetrics(t, d)
		if bad := metricDeltas(before, after, want); bad != "" {
			return errorf("%s\n%s", bad, clip(text))
		}
		return nil
	})
	waitGauge(t, d, "skc_census_sessions", 0)
	for _, s := range []string{a.Name, b.Name, spec.StateDir, quick.StateDir, a.ID} {
		if strings.Contains(text, s) {
			t.Errorf("/metrics carries a per-session value %q:\n%s", s, clip(text))
		}
	}
	for _, family := range []string{"skc_census_sessions", "skc_tmux_reconnects_total", "skc_recoveries_total",
		"skc_create_failures_total"} {
		if !strings.Contains(text, "# TYPE "+family+" ") {
			t.Errorf("/metrics has no %s family:\n%s", family, clip(text))
		}
	}
	checkMetrics(t, d) // promtool check metrics
}

// waitGauge waits until the unlabelled series name has value want.
func waitGauge(t *testing.T, d *Daemon, name string, want float64) {
	t.Helper()
	WaitFor(t, waitDeadline, fmt.Sprintf("%s to be %v", name, want), func() error {
		m, _ := scrapeMetrics(t, d)
		if v, ok := m[name]; !ok || v != want {
			return errorf("%s = %v (present %v)", name, v, ok)
		}
		return nil
	})
}
