package main

import (
	"testing"
	"time"
)

func TestIdleText(t *testing.T) {
	now := time.Unix(1800000000, 0)
	at := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	for _, tc := range []struct {
		at   *time.Time
		want string
	}{
		{nil, "-"}, {at(2 * time.Second), "active"}, {at(42 * time.Second), "idle 42s"},
		{at(3*time.Minute + 10*time.Second), "idle 3m"}, {at(5 * time.Hour), "idle 5h"}, {at(72 * time.Hour), "idle 3d"},
	} {
		if got := idleText(now, tc.at); got != tc.want {
			t.Errorf("idleText(%v) = %q, want %q", tc.at, got, tc.want)
		}
	}
}
