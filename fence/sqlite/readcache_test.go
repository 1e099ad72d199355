package sqlite

import (
	"fmt"
	"strings"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/fencetest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestCachedIdentityReadsLongTail: more verdicts than one tail read while an
// identity is held, and the cache's reset after its connection is closed.
func TestCachedIdentityReadsLongTail(t *testing.T) {
	w := newWorld(t)
	a, b := w.owner(100), w.owner(200)
	id, other := w.ID("t"), w.ID("u")
	fencetest.CheckReads(t, a, id, 5, "empty")
	fencetest.CheckReads(t, a, other, 5, "empty")
	for i := 0; i < fence.ReadCacheTail+10; i++ {
		for _, x := range []fence.Identity{id, other} {
			if _, err := b.AppendVerdict(ctx, fencetest.IdentityRecord(x, verdict.VerdictRefused, map[string]any{"i": i})); err != nil {
				t.Fatal(err)
			}
		}
	}
	fencetest.CheckReads(t, a, id, 5, "after a long tail")
	fencetest.CheckReads(t, a, other, 5, "after a long tail")
	if _, err := b.AppendVerdict(ctx, fencetest.IdentityRecord(id, verdict.VerdictRefused, nil)); err != nil {
		t.Fatal(err)
	}
	fencetest.CheckReads(t, a, id, 5, "one more")
	a.rc.Drop()
	fencetest.CheckReads(t, a, id, 5, "after the cache was dropped")
}

// TestCachedIdentityReadsOtherProcess: a reservation made by another process
// (its own SQLite connections and locks) is seen by the cached reads: the
// part of the suite's CachedIdentityReads that takes a real process.
func TestCachedIdentityReadsOtherProcess(t *testing.T) {
	w := newWorld(t)
	a := w.owner(100)
	p := w.ID("p")
	fencetest.CheckReads(t, a, p, 100, "before the other process")
	c := startChild(t, "worker", "FENCE_DB="+w.path)
	defer c.Stop()
	c.Send(t, fmt.Sprintf("reserve %s %s 0", p.StateDir, p.SessionID))
	if reply := c.Recv(t); !strings.HasPrefix(reply, "ok reserved") {
		t.Fatalf("worker: %s", reply)
	}
	if got := fencetest.CheckReads(t, a, p, 100, "reserved by another process"); got.Reservation == nil {
		t.Fatal("a reservation made by another process is not seen")
	}
}
