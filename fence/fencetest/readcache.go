package fencetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// wantReads is what the uncached reads answer for id, encoded as `show` encodes them.
func wantReads(t *testing.T, s fence.Fence, id fence.Identity, limit int) (res, verds []byte) {
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

// CheckReads fails unless the cached reads of id equal the uncached ones.
func CheckReads(t *testing.T, s fence.Fence, id fence.Identity, limit int, when string) fence.IdentityReads {
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

// IdentityRecord is Record(v) about id with evidence.
func IdentityRecord(id fence.Identity, v string, evidence map[string]any) verdict.Record {
	r := Record(v)
	r.Identity = &verdict.IdentityRef{StateDir: id.StateDir, SessionID: id.SessionID}
	r.Evidence = evidence
	return r
}

// testCachedIdentityReads: the cached reads follow every kind of write — a
// reservation's phases, publish and release by the reading handle, verdicts
// and a reservation from another handle (another owner, its own connections)
// — and keep only the latest verdicts up to the limit. (fence/sqlite's
// TestCachedIdentityReadsOtherProcess has a reservation by a real process.)
func testCachedIdentityReads(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	a, b := w.Owner(100), w.Owner(200)
	id := w.ID("r")
	CheckReads(t, a, id, 3, "empty")
	r := MustReserve(t, a, id, w.Spec("r"))
	CheckReads(t, a, id, 3, "reserved")
	if err := a.Advance(ctx, &r, fence.PhaseHelperInvoked, fence.Patch{AttemptName: "skc-" + r.ID}); err != nil {
		t.Fatal(err)
	}
	CheckReads(t, a, id, 3, "helper_invoked")
	for i := 0; i < 5; i++ { // another connection; <&> and U+2028 as json.Marshal escapes them
		rec := IdentityRecord(id, verdict.VerdictRefused, map[string]any{"i": i, "s": "<&>\u2028"})
		if _, err := b.AppendVerdict(ctx, rec); err != nil {
			t.Fatal(err)
		}
		CheckReads(t, a, id, 3, fmt.Sprintf("verdict %d from another store", i))
	}
	CheckReads(t, a, id, 100, "a longer limit")
	for _, st := range []struct {
		to fence.Phase
		p  fence.Patch
	}{{fence.PhaseSpawned, fence.Patch{TmuxID: "$4", PanePID: 7, ServerPID: 9, ServerStart: 1}}, {fence.PhaseTagged, fence.Patch{}}} {
		if err := a.Advance(ctx, &r, st.to, st.p); err != nil {
			t.Fatal(err)
		}
		CheckReads(t, a, id, 100, st.to.String())
	}
	if _, _, err := a.Publish(ctx, &r, IdentityRecord(id, verdict.VerdictPublished, nil)); err != nil {
		t.Fatal(err)
	}
	CheckReads(t, a, id, 100, "published")
	if err := a.Release(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if got := CheckReads(t, a, id, 100, "released"); got.Reservation != nil {
		t.Fatalf("released, still %+v", got.Reservation)
	}
	p := w.ID("p")
	CheckReads(t, a, p, 100, "before the other owner")
	MustReserve(t, b, p, w.Spec("p"))
	if got := CheckReads(t, a, p, 100, "reserved by another owner"); got.Reservation == nil {
		t.Fatal("a reservation made by another owner is not seen")
	}
}

// testCachedIdentityReadsConcurrent: a read that starts after a write returned
// sees it, while other writers and readers run (go test -race).
func testCachedIdentityReadsConcurrent(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	a, b := w.Owner(100), w.Owner(200)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for k, s := range []fence.Fence{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := w.ID(fmt.Sprintf("c%d", k%2))
			for i := 0; i < 30; i++ {
				rec, err := s.AppendVerdict(ctx, IdentityRecord(id, verdict.VerdictRefused, map[string]any{"k": k}))
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
	CheckReads(t, a, w.ID("c0"), 100, "after")
	CheckReads(t, a, w.ID("c1"), 100, "after")
}

// testCachedIdentityReadsBeyondBulk: identities whose verdicts are older than
// the newest fence.ReadCacheBulk ones are read on their own, and followed after that.
func testCachedIdentityReadsBeyondBulk(t *testing.T, h Harness) {
	defer func(n int) { fence.ReadCacheBulk = n }(fence.ReadCacheBulk)
	fence.ReadCacheBulk = 10
	w := NewWorld(t, h)
	a, b := w.Owner(100), w.Owner(200)
	var ids []fence.Identity
	for i := 0; i < 8; i++ {
		id := w.ID(fmt.Sprintf("o%d", i))
		ids = append(ids, id)
		for j := 0; j <= i; j++ {
			if _, err := b.AppendVerdict(ctx, IdentityRecord(id, verdict.VerdictRefused, map[string]any{"j": j})); err != nil {
				t.Fatal(err)
			}
		}
	}
	for round := 0; round < 2; round++ {
		for _, id := range append(ids, w.ID("none")) {
			CheckReads(t, a, id, 3, fmt.Sprintf("round %d, %s", round, id.SessionID))
		}
		if _, err := b.AppendVerdict(ctx, IdentityRecord(ids[0], verdict.VerdictRefused, nil)); err != nil {
			t.Fatal(err)
		}
	}
}
