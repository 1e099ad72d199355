package fence

import (
	"context"
	"testing"
	"time"
)

// TestPubCacheLateUpdates: updates applied out of commit order do not regress
// the cache — an older generation put late, an end of a generation that is not
// the cached one — and the loaded rows, a later generation replacing an ended
// one, and the name index holding not-ended generations only, agree with what
// the writes said. (The suite's CachedPublished checks the cache against an
// engine's table.)
func TestPubCacheLateUpdates(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	a1 := Published{Identity: Identity{StateDir: "/s", SessionID: "a"}, Generation: 1, SessionName: "skc-a1", PublishedAt: at}
	b1 := Published{Identity: Identity{StateDir: "/s", SessionID: "b"}, Generation: 1, SessionName: "skc-b1", PublishedAt: at}
	loads := 0
	c := NewPubCache(func(context.Context) ([]Published, error) { loads++; return []Published{a1}, nil })
	c.Put(b1) // before the load: ignored, the load reads the committed row
	if _, ok, err := c.Published(ctx, b1.Identity.Digest()); err != nil || ok || loads != 1 {
		t.Fatalf("a put before the load was kept: %v %v (loads %d)", ok, err, loads)
	}
	c.Put(b1)
	c.Ended(a1.Identity, 1, at)
	a2 := a1
	a2.Generation, a2.SessionName = 2, "skc-a2"
	c.Put(a2)
	// Late: the older generation, and an end of a generation never published.
	c.Put(a1)
	c.Ended(b1.Identity, 2, at)
	if p, ok, _ := c.Published(ctx, a1.Identity.Digest()); !ok || p.Generation != 2 || p.Ended {
		t.Fatalf("a: %+v %v", p, ok)
	}
	if _, ok, _ := c.PublishedByName(ctx, "skc-a1"); ok {
		t.Fatal("the superseded generation is found by name")
	}
	if p, ok, _ := c.PublishedByName(ctx, "skc-b1"); !ok || p.Ended {
		t.Fatalf("b by name after a late end of another generation: %+v %v", p, ok)
	}
	n := 0
	if err := c.LiveEach(ctx, func(p *Published) { n++ }); err != nil || n != 2 {
		t.Fatalf("live: %d %v", n, err)
	}
	c.Reset()
	if _, _, err := c.Published(ctx, "x"); err != nil || loads != 2 {
		t.Fatalf("after Reset: loads %d %v", loads, err)
	}
}
