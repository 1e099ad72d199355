package home

import (
	"testing"
	"time"
)

// waitFor polls cond with a generous deadline: tests wait for conditions, they
// never assert on timing.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
