package fence

import (
	"testing"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestCachedGenerationMoves: a publish and an end of this Store move
// CachedGeneration, once the write path reports its cache changes (cache.go
// calls cacheChanged); before that it must say it cannot be trusted.
func TestCachedGenerationMoves(t *testing.T) {
	w := newWorld(t)
	s := w.owner(100)
	if _, _, err := s.CachedPublished(ctx, "x"); err != nil { // load the cache
		t.Fatal(err)
	}
	g0, ok := CachedGeneration()
	p := publishAt(t, s, w, "g", "$1", 55, 1000)
	g1, ok1 := CachedGeneration()
	if !ok && !ok1 {
		t.Skip("the identities cache does not report its changes yet (cache.go: cacheChanged)")
	}
	if g1 == g0 {
		t.Fatalf("a publish left the generation at %d", g1)
	}
	if ok, _, err := s.MarkEnded(ctx, p.Identity, p.Generation, testRecord(verdict.VerdictEnded)); err != nil || !ok {
		t.Fatalf("mark ended: %v %v", ok, err)
	}
	if g2, _ := CachedGeneration(); g2 == g1 {
		t.Fatalf("an end left the generation at %d", g2)
	}
}
