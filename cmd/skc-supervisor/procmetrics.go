package main

import (
	"bytes"
	"os"
	"runtime"
	"strconv"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/metrics"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// registerDaemonMetrics exposes the census, the control connection and the
// process itself as label-less gauges and counters read at each scrape, so
// that an unsynced census, a reconnect storm, or a goroutine or fd leak is
// visible from outside the daemon.
func registerDaemonMetrics(reg *metrics.Registry, c *census.Census, tm *tmuxctl.Client) {
	st := func(f func(census.Stats) float64) func() float64 {
		return func() float64 { return f(c.Stats()) }
	}
	reg.GaugeFunc("skc_census_sessions", "Sessions on the supervised tmux server (control session excluded).",
		st(func(s census.Stats) float64 { return float64(s.Managed + s.Unmanaged) }))
	reg.GaugeFunc("skc_census_sessions_managed", "Sessions carrying @skc-identity.",
		st(func(s census.Stats) float64 { return float64(s.Managed) }))
	reg.GaugeFunc("skc_census_sessions_unmanaged", "Sessions without @skc-identity (control session excluded).",
		st(func(s census.Stats) float64 { return float64(s.Unmanaged) }))
	reg.GaugeFunc("skc_census_synced", "1 while the census reflects the current server life; creates are refused at 0.",
		st(func(s census.Stats) float64 { return boolFloat(s.Synced) }))
	reg.CounterFunc("skc_census_relists_total", "Full re-lists of the tmux server.",
		st(func(s census.Stats) float64 { return float64(s.Relists) }))
	reg.CounterFunc("skc_census_confirms_total", "Exact per-session tag reads (show-options).",
		st(func(s census.Stats) float64 { return float64(s.Confirms) }))
	reg.CounterFunc("skc_census_feed_resyncs_total", "Resync marks sent to change subscribers that fell behind.",
		st(func(s census.Stats) float64 { return float64(s.Resyncs) }))
	reg.CounterFunc("skc_census_subscription_lines_total", "Lines of the census refresh-client -B subscription.",
		st(func(s census.Stats) float64 { return float64(s.SubscriptionLines) }))
	reg.CounterFunc("skc_census_polls_total", "Reads of every session by the census in its subscription's place (above 1,000 sessions).",
		st(func(s census.Stats) float64 { return float64(s.Polls) }))
	reg.GaugeFunc("skc_census_last_sync_seconds", "Duration of the last successful full sync.",
		st(func(s census.Stats) float64 { return s.LastSyncDuration.Seconds() }))
	reg.CounterFunc("skc_tmux_reconnects_total", "Reconnects of the tmux control connection.",
		func() float64 { return float64(tm.Reconnects()) })
	reg.GaugeFunc("go_goroutines", "Number of goroutines that currently exist.",
		func() float64 { return float64(runtime.NumGoroutine()) })
	reg.GaugeFunc("process_open_fds", "Number of open file descriptors.", openFDs)
	reg.GaugeFunc("process_resident_memory_bytes", "Resident memory size in bytes.", residentBytes)
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// openFDs counts /proc/self/fd (the directory's own fd, open while it is
// read, is not counted); -1 when it cannot be read.
func openFDs() float64 {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return -1
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return -1
	}
	return float64(len(names) - 1)
}

// residentBytes reads the resident set (pages, second field) from
// /proc/self/statm; -1 when it cannot be read.
func residentBytes() float64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return -1
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return -1
	}
	pages, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return -1
	}
	return float64(pages * int64(os.Getpagesize()))
}
