package main

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// samples is a set of latencies of one side of one figure.
type samples []time.Duration

// q returns the nearest-rank quantile p (0 < p ≤ 1); 0 when empty.
func (s samples) q(p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := append(samples(nil), s...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	i := int(math.Ceil(p*float64(len(c)))) - 1
	if i < 0 {
		i = 0
	}
	return c[i]
}

func (s samples) p50() time.Duration { return s.q(0.50) }
func (s samples) p99() time.Duration { return s.q(0.99) }
func (s samples) max() time.Duration { return s.q(1) }

// ms formats a duration in milliseconds with 3 significant-ish digits.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	case v >= 1:
		return fmt.Sprintf("%.2f ms", v)
	default:
		return fmt.Sprintf("%.3f ms", v)
	}
}

// ratio is a/b, formatted "1.23×".
func ratio(a, b float64) string {
	if b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func ratioD(a, b time.Duration) string { return ratio(float64(a), float64(b)) }

// verdictWord is "met" or "**missed**".
func verdictWord(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}
