package fence

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// wantReads is what the uncached reads answer for id, encoded as `show` encodes them.
func wantReads(t *testing.T, s *Store, id Identity, limit int) (res, verds []byte) {
	t.Helper()
	row, ok, err := s.ReservationFor(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	res = []byte("null")
	if ok {
		if res, err = json.Marshal(&row); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := s.VerdictsFor(ctx, id, limit)
	if err != nil {
		t.Fatal(err)
	}
	if verds, err = json.Marshal(recs); err != nil {
		t.Fatal(err)
	}
	return res, verds
}

// checkReads fails unless the cached reads of id equal the uncached ones.
func checkReads(t *testing.T, s *Store, id Identity, limit int, when string) IdentityReads {
	t.Helper()
	got, err := s.CachedIdentityReads(ctx, id, limit)
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	res, verds := wantReads(t, s, id, limit)
	if !bytes.Equal(got.ReservationJSON, res) || !bytes.Equal(got.VerdictsJSON, verds) {
		t.Fatalf("%s: cached\n%s\n%s\nwant\n%s\n%s", when, got.ReservationJSON, got.VerdictsJSON, res, verds)
	}
	if (got.Reservation == nil) != bytes.Equal(res, []byte("null")) {
		t.Fatalf("%s: reservation %+v for %s", when, got.Reservation, res)
	}
	recs, err := got.Verdicts()
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(recs); !bytes.Equal(b, verds) {
		t.Fatalf("%s: decoded verdicts re-encode to\n%s\nwant\n%s", when, b, verds)
	}
	return got
}

func identityRecord(id Identity, v string, evidence map[string]any) verdict.Record {
	r := testRecord(v)
	r.Identity = &verdict.IdentityRef{StateDir: id.StateDir, SessionID: id.SessionID}
	r.Evidence = evidence
	return r
}

// TestCachedIdentityReads: the cached reads follow every kind of write — a
// reservation's phases, publish and release by the reading Store, verdicts from
// another Store (another connection) and a reservation made by another process —
// and keep only the latest verdicts up to the limit.
func TestCachedIdentityReads(t *testing.T) {
	w := newWorld(t)
	a, b := w.owner(100), w.owner(200)
	id := w.id("r")
	checkReads(t, a, id, 3, "empty")
	r := mustReserve(t, a, id, w.spec("r"))
	checkReads(t, a, id, 3, "reserved")
	if err := a.Advance(ctx, &r, PhaseHelperInvoked, Patch{AttemptName: "skc-" + r.ID}); err != nil {
		t.Fatal(err)
	}
	checkReads(t, a, id, 3, "helper_invoked")
	for i := 0; i < 5; i++ { // another connection; <&> and U+2028 as json.Marshal escapes them
		rec := identityRecord(id, verdict.VerdictRefused, map[string]any{"i": i, "s": "<&>\u2028"})
		if _, err := b.AppendVerdict(ctx, rec); err != nil {
			t.Fatal(err)
		}
		checkReads(t, a, id, 3, fmt.Sprintf("verdict %d from another store", i))
	}
	checkReads(t, a, id, 100, "a longer limit")
	for _, st := range []struct {
		to Phase
		p  Patch
	}{{PhaseSpawned, Patch{TmuxID: "$4", PanePID: 7, ServerPID: 9, ServerStart: 1}}, {PhaseTagged, Patch{}}} {
		if err := a.Advance(ctx, &r, st.to, st.p); err != nil {
			t.Fatal(err)
		}
		checkReads(t, a, id, 100, st.to.String())
	}
	if _, _, err := a.Publish(ctx, &r, identityRecord(id, verdict.VerdictPublished, nil)); err != nil {
		t.Fatal(err)
	}
	checkReads(t, a, id, 100, "published")
	if err := a.Release(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if got := checkReads(t, a, id, 100, "released"); got.Reservation != nil {
		t.Fatalf("released, still %+v", got.Reservation)
	}
	c := startChild(t, "worker", "FENCE_DB="+w.path)
	defer c.stop()
	p := w.id("p")
	checkReads(t, a, p, 100, "before the other process")
	c.send(t, fmt.Sprintf("reserve %s %s 0", p.StateDir, p.SessionID))
	if reply := c.recv(t); !strings.HasPrefix(reply, "ok reserved") {
		t.Fatalf("worker: %s", reply)
	}
	if got := checkReads(t, a, p, 100, "reserved by another process"); got.Reservation == nil {
		t.Fatal("a reservation made by another process is not seen")
	}
}

// TestCachedIdentityReadsLongTail: more verdicts than one tail read while an
// identity is held, and the cache's reset after its connection is closed.
func TestCachedIdentityReadsLongTail(t *testing.T) {
	w := newWorld(t)
	a, b := w.owner(100), w.owner(200)
	id, other := w.id("t"), w.id("u")
	checkReads(t, a, id, 5, "empty")
	checkReads(t, a, other, 5, "empty")
	for i := 0; i < readCacheTail+10; i++ {
		for _, x := range []Identity{id, other} {
			if _, err := b.AppendVerdict(ctx, identityRecord(x, verdict.VerdictRefused, map[string]any{"i": i})); err != nil {
				t.Fatal(err)
			}
		}
	}
	checkReads(t, a, id, 5, "after a long tail")
	checkReads(t, a, other, 5, "after a long tail")
	if _, err := b.AppendVerdict(ctx, identityRecord(id, verdict.VerdictRefused, nil)); err != nil {
		t.Fatal(err)
	}
	checkReads(t, a, id, 5, "one more")
	closeReadCache(a)
	checkReads(t, a, id, 5, "after closeReadCache")
}

// TestCachedIdentityReadsConcurrent: a read that starts after a write returned
// sees it, while other writers and readers run (go test -race).
func TestCachedIdentityReadsConcurrent(t *testing.T) {
	w := newWorld(t)
	a, b := w.owner(100), w.owner(200)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for k, s := range []*Store{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := w.id(fmt.Sprintf("c%d", k%2))
			for i := 0; i < 30; i++ {
				rec, err := s.AppendVerdict(ctx, identityRecord(id, verdict.VerdictRefused, map[string]any{"k": k}))
				if err != nil {
					errs <- err
					return
				}
				got, err := a.CachedIdentityReads(ctx, id, 100)
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Contains(got.VerdictsJSON, []byte(fmt.Sprintf(`"sequence":%d}`, rec.Sequence))) {
					errs <- fmt.Errorf("verdict %d written, not read back: %s", rec.Sequence, got.VerdictsJSON)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkReads(t, a, w.id("c0"), 100, "after")
	checkReads(t, a, w.id("c1"), 100, "after")
}

// TestCachedIdentityReadsBeyondBulk: identities whose verdicts are older than
// the newest readCacheBulk ones are read on their own, and followed after that.
func TestCachedIdentityReadsBeyondBulk(t *testing.T) {
	defer func(n int) { readCacheBulk = n }(readCacheBulk)
	readCacheBulk = 10
	w := newWorld(t)
	a, b := w.owner(100), w.owner(200)
	var ids []Identity
	for i := 0; i < 8; i++ {
		id := w.id(fmt.Sprintf("o%d", i))
		ids = append(ids, id)
		for j := 0; j <= i; j++ {
			if _, err := b.AppendVerdict(ctx, identityRecord(id, verdict.VerdictRefused, map[string]any{"j": j})); err != nil {
				t.Fatal(err)
			}
		}
	}
	for round := 0; round < 2; round++ {
		for _, id := range append(ids, w.id("none")) {
			checkReads(t, a, id, 3, fmt.Sprintf("round %d, %s", round, id.SessionID))
		}
		if _, err := b.AppendVerdict(ctx, identityRecord(ids[0], verdict.VerdictRefused, nil)); err != nil {
			t.Fatal(err)
		}
	}
}
