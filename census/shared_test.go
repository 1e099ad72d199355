package census

import (
	"math/rand"
	"reflect"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// TestSnapshotSharedEqualsSnapshot: the shared snapshot lists what Snapshot
// lists, in the same order (ids of several digit counts, an odd id, the control
// session left out), reusing the buffer it is given.
func TestSnapshotSharedEqualsSnapshot(t *testing.T) {
	life := tmuxctl.ServerLife{Socket: "s", PID: 10, StartTime: 1}
	c := offline(life)
	c.info.ControlSessionID = "$0"
	var entries []*entry
	for _, n := range rand.Perm(300) {
		entries = append(entries, entryFor(n, "s"+string(rune('a'+n%26)), digest(n%7)))
	}
	odd := entryFor(5, "odd", "")
	odd.s.ID = "$x"
	entries = append(entries, odd)
	if err := c.apply(c.epoch, life, entries); err != nil {
		t.Fatal(err)
	}
	var buf []Session
	for round := 0; round < 2; round++ {
		want, got := c.Snapshot(), c.SnapshotShared(buf)
		if len(got.Sessions) != 300 || !reflect.DeepEqual(want, got) {
			t.Fatalf("round %d: shared snapshot differs (%d sessions)", round, len(got.Sessions))
		}
		buf = got.Sessions
	}
}
