package lifecycle

import (
	"time"

	"github.com/skc-supervisor/skc-supervisor/metrics"
)

// lcMetrics are the lifecycle's counters and histogram. A nil *lcMetrics (no
// registry configured) records nothing.
type lcMetrics struct {
	creates    *metrics.CounterVec
	refusals   *metrics.CounterVec
	failures   *metrics.CounterVec
	recoveries *metrics.CounterVec
	ends       *metrics.CounterVec
	stops      *metrics.CounterVec
	latency    *metrics.HistogramVec
	fenceOps   *metrics.HistogramVec
}

var createBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// fenceBuckets: a fence transition is a fraction of a millisecond on a calm
// host (SQLite, WAL) and a round trip or more on PostgreSQL.
var fenceBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

// Fence transitions timed by skc_fence_transition_duration_seconds.
const (
	fenceOpReserve = "reserve"
	fenceOpAdvance = "advance"
	fenceOpPublish = "publish"
	fenceOpRelease = "release"
	fenceOpEnd     = "end"
)

func newMetrics(r *metrics.Registry) *lcMetrics {
	if r == nil {
		return nil
	}
	return &lcMetrics{
		creates:    r.Counter("skc_creates_total", "Create requests by outcome.", "outcome"),
		refusals:   r.Counter("skc_create_refusals_total", "Refused creates by code.", "code"),
		failures:   r.Counter("skc_create_failures_total", "Failed creates by code.", "code"),
		recoveries: r.Counter("skc_recoveries_total", "Abandoned reservations resolved, by branch.", "branch"),
		ends:       r.Counter("skc_sessions_ended_total", "Ended sessions by exit kind.", "exit_kind"),
		stops: r.Counter("skc_stops_total", "Generation stops by outcome: gone (within the grace), "+
			"sigkill (gone after SIGKILL), unproven, interrupted (left to the next start).", "outcome"),
		latency: r.Histogram("skc_create_duration_seconds", "Create latency by outcome.",
			createBuckets, "outcome"),
		fenceOps: r.Histogram("skc_fence_transition_duration_seconds",
			"Fence write transactions of the create saga and of ends, by op: reserve, advance, publish, release, end.",
			fenceBuckets, "op"),
	}
}

// fenceOp records one fence transition of op that began at start.
func (m *lcMetrics) fenceOp(op string, start time.Time) {
	if m != nil {
		m.fenceOps.With(op).Observe(time.Since(start).Seconds())
	}
}

func (m *lcMetrics) create(outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.creates.With(outcome).Inc()
	m.latency.With(outcome).Observe(d.Seconds())
}

func (m *lcMetrics) refused(code string) {
	if m != nil {
		m.refusals.With(code).Inc()
	}
}

func (m *lcMetrics) failed(code string) {
	if m != nil {
		m.failures.With(code).Inc()
	}
}

func (m *lcMetrics) recovered(branch string) {
	if m != nil {
		m.recoveries.With(branch).Inc()
	}
}

func (m *lcMetrics) ended(kind string) {
	if m != nil {
		m.ends.With(kind).Inc()
	}
}

// Stop outcomes (skc_stops_total).
const (
	stopGone        = "gone"
	stopSigkill     = "sigkill"
	stopUnproven    = "unproven"
	stopInterrupted = "interrupted"
)

func (m *lcMetrics) stopped(outcome string) {
	if m != nil {
		m.stops.With(outcome).Inc()
	}
}
