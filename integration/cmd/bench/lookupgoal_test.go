package main

import (
	"testing"
	"time"
)

// TestLookupGoal: figure 3 is met by a lookup 50× faster than the fork, or,
// only where the fork itself is within 50× of the HTTP floor, by a lookup
// within 1.1× of that floor.
func TestLookupGoal(t *testing.T) {
	us := time.Microsecond
	for _, c := range []struct {
		name               string
		lookup, fork, ping time.Duration
		want               bool
	}{
		{"50x the fork", 100 * us, 5000 * us, 90 * us, true},
		{"fork near the floor, lookup at it", 300 * us, 7300 * us, 290 * us, true},
		{"fork near the floor, lookup 1.22x it", 302 * us, 7300 * us, 247 * us, false},
		{"fork far above the floor, lookup slow", 300 * us, 14000 * us, 100 * us, false},
	} {
		if got, why := lookupGoal(c.lookup, c.fork, c.ping); got != c.want {
			t.Errorf("%s: met %v (%s), want %v", c.name, got, why, c.want)
		}
	}
}
