// Package metrics is a small, dependency-free metrics registry with counters,
// gauges and histograms, exposed in the Prometheus text format 0.0.4.
//
// Updates are lock-free (atomic operations on float64 bits); looking up a
// labelled child takes a read lock on a map and is meant to be done once and
// kept where a hot path needs it. A nil *Registry hands out working metrics that
// are simply never exposed, so packages can take an optional registry without
// nil checks.
package metrics

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// DefaultBuckets are latency buckets in seconds, from 0.5 ms to 10 s: our
// operations range from a fence transaction (sub-millisecond) to a create that
// waits for tmux (seconds).
var DefaultBuckets = []float64{
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
}

// ContentType is the Content-Type of WriteText's output.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// kind is a metric family's TYPE.
type kind string

const (
	kindCounter   kind = "counter"
	kindGauge     kind = "gauge"
	kindHistogram kind = "histogram"
)

// Registry holds metric families and writes them in the text format.
type Registry struct {
	mu       sync.Mutex
	families map[string]*family
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{families: make(map[string]*family)} }

// family is one metric name: its help, type, label names and children.
type family struct {
	name    string
	help    string
	kind    kind
	labels  []string
	buckets []float64      // histograms
	fn      func() float64 // GaugeFunc/CounterFunc

	mu       sync.RWMutex
	children map[string]*child // key: label values joined by 0xff
}

// child is one labelled series. Values are float64 bits in atomics.
type child struct {
	values []string
	val    atomic.Uint64   // counter, gauge
	counts []atomic.Uint64 // histogram: per bucket, not cumulative; last is +Inf
	sum    atomic.Uint64   // histogram sum (float64 bits)
}

// register adds a family, or returns the existing one when the same name is
// registered again with the same shape (two components sharing a registry).
// A name registered with another shape is a programming error and panics.
func (r *Registry) register(f *family) *family {
	mustValidName(f.name, f.labels, f.kind)
	f.children = make(map[string]*child)
	if r == nil {
		return f
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.families[f.name]; ok {
		if old.kind != f.kind || strings.Join(old.labels, ",") != strings.Join(f.labels, ",") ||
			fmt.Sprint(old.buckets) != fmt.Sprint(f.buckets) || (old.fn != nil) != (f.fn != nil) {
			panic(fmt.Sprintf("metrics: %s registered twice with different shapes", f.name))
		}
		return old
	}
	r.families[f.name] = f
	return f
}

// with returns the child for the label values, creating it.
func (f *family) with(values []string) *child {
	if len(values) != len(f.labels) {
		panic(fmt.Sprintf("metrics: %s wants %d label values, got %d", f.name, len(f.labels), len(values)))
	}
	key := strings.Join(values, "\xff")
	f.mu.RLock()
	c, ok := f.children[key]
	f.mu.RUnlock()
	if ok {
		return c
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok = f.children[key]; ok {
		return c
	}
	c = &child{values: append([]string(nil), values...)}
	if f.kind == kindHistogram {
		c.counts = make([]atomic.Uint64, len(f.buckets)+1)
	}
	f.children[key] = c
	return c
}

// addFloat adds v to the float64 stored as bits in a.
func addFloat(a *atomic.Uint64, v float64) {
	for {
		old := a.Load()
		if a.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

func loadFloat(a *atomic.Uint64) float64 { return math.Float64frombits(a.Load()) }

// CounterVec is a counter family; With selects a series.
type CounterVec struct{ f *family }

// Counter is one counter series. It only goes up.
type Counter struct{ c *child }

// Counter registers a counter family. Label-less counters are exposed (as 0)
// from registration on.
func (r *Registry) Counter(name, help string, labels ...string) *CounterVec {
	v := &CounterVec{r.register(&family{name: name, help: help, kind: kindCounter, labels: labels})}
	if len(labels) == 0 {
		v.f.with(nil)
	}
	return v
}

// With returns the series for the label values (one per label, in order).
func (v *CounterVec) With(values ...string) *Counter { return &Counter{v.f.with(values)} }

// Inc adds one.
func (c *Counter) Inc() { addFloat(&c.c.val, 1) }

// Add adds v; a negative or NaN v is ignored, since a counter only goes up.
func (c *Counter) Add(v float64) {
	if v > 0 {
		addFloat(&c.c.val, v)
	}
}

// Value returns the current value (tests, diagnostics).
func (c *Counter) Value() float64 { return loadFloat(&c.c.val) }

// GaugeVec is a gauge family; With selects a series.
type GaugeVec struct{ f *family }

// Gauge is one gauge series.
type Gauge struct{ c *child }

// Gauge registers a gauge family.
func (r *Registry) Gauge(name, help string, labels ...string) *GaugeVec {
	v := &GaugeVec{r.register(&family{name: name, help: help, kind: kindGauge, labels: labels})}
	if len(labels) == 0 {
		v.f.with(nil)
	}
	return v
}

// With returns the series for the label values.
func (v *GaugeVec) With(values ...string) *Gauge { return &Gauge{v.f.with(values)} }

// Set sets the gauge.
func (g *Gauge) Set(v float64) { g.c.val.Store(math.Float64bits(v)) }

// Add adds v (which may be negative).
func (g *Gauge) Add(v float64) { addFloat(&g.c.val, v) }

// Inc adds one.
func (g *Gauge) Inc() { g.Add(1) }

// Dec subtracts one.
func (g *Gauge) Dec() { g.Add(-1) }

// Value returns the current value.
func (g *Gauge) Value() float64 { return loadFloat(&g.c.val) }

// GaugeFunc registers a label-less gauge whose value is f(), called at each
// WriteText. f must be cheap and safe to call from any goroutine.
func (r *Registry) GaugeFunc(name, help string, f func() float64) {
	r.register(&family{name: name, help: help, kind: kindGauge, fn: f})
}

// CounterFunc registers a label-less counter whose value is f() (a count kept
// elsewhere, such as reconnects).
func (r *Registry) CounterFunc(name, help string, f func() float64) {
	r.register(&family{name: name, help: help, kind: kindCounter, fn: f})
}

// HistogramVec is a histogram family; With selects a series.
type HistogramVec struct{ f *family }

// Histogram is one histogram series.
type Histogram struct {
	c       *child
	buckets []float64
}

// Histogram registers a histogram family with the given upper bounds (sorted
// and de-duplicated here; +Inf is implicit). nil buckets mean DefaultBuckets.
func (r *Registry) Histogram(name, help string, buckets []float64, labels ...string) *HistogramVec {
	if buckets == nil {
		buckets = DefaultBuckets
	}
	b := make([]float64, 0, len(buckets))
	for _, x := range buckets {
		if !math.IsInf(x, 1) && !math.IsNaN(x) {
			b = append(b, x)
		}
	}
	sort.Float64s(b)
	b = dedupe(b)
	v := &HistogramVec{r.register(&family{name: name, help: help, kind: kindHistogram, labels: labels, buckets: b})}
	if len(labels) == 0 {
		v.f.with(nil)
	}
	return v
}

func dedupe(b []float64) []float64 {
	out := b[:0]
	for i, x := range b {
		if i == 0 || x != b[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// With returns the series for the label values.
func (v *HistogramVec) With(values ...string) *Histogram {
	return &Histogram{c: v.f.with(values), buckets: v.f.buckets}
}

// Observe records one value (seconds, for latencies).
func (h *Histogram) Observe(v float64) {
	i := sort.SearchFloat64s(h.buckets, v) // first bucket with bound >= v
	h.c.counts[i].Add(1)
	addFloat(&h.c.sum, v)
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 {
	var n uint64
	for i := range h.c.counts {
		n += h.c.counts[i].Load()
	}
	return n
}
