package fencetest

import (
	"encoding/json"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

func testPublishedByTmux(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	s := w.Owner(100)
	a := PublishAt(t, s, w, "a", "$1", 55, 1000)
	PublishAt(t, s, w, "b", "$2", 55, 1000)
	PublishAt(t, s, w, "c", "$1", 66, 2000) // the same id in another server life
	p, ok, err := s.PublishedByTmux(ctx, 55, 1000, "$1")
	if err != nil || !ok || p.Identity != a.Identity || p.Generation != a.Generation {
		t.Fatalf("lookup: %+v %v %v, want %+v", p, ok, err, a)
	}
	for _, miss := range []struct {
		pid   int
		start int64
		id    string
	}{{55, 1001, "$1"}, {56, 1000, "$1"}, {55, 1000, "$9"}, {0, 0, ""}} {
		if p, ok, err := s.PublishedByTmux(ctx, miss.pid, miss.start, miss.id); err != nil || ok {
			t.Fatalf("lookup %+v: %+v %v %v", miss, p, ok, err)
		}
	}
	if ok, _, err := s.MarkEnded(ctx, a.Identity, a.Generation, Record(verdict.VerdictEnded)); err != nil || !ok {
		t.Fatalf("mark ended: %v %v", ok, err)
	}
	if _, ok, err := s.PublishedByTmux(ctx, 55, 1000, "$1"); err != nil || ok {
		t.Fatalf("ended generation still found: %v %v", ok, err)
	}
}

func testVerdictsFor(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	s := w.Owner(100)
	a, b := w.ID("a"), w.ID("b")
	var wantA []int64
	for i, rec := range []verdict.Record{
		IdentRecord(verdict.VerdictPublished, &a), IdentRecord(verdict.VerdictPublished, &b),
		IdentRecord(verdict.VerdictEnded, &a), IdentRecord(verdict.VerdictRefused, nil),
		IdentRecord(verdict.VerdictPublished, &a),
	} {
		got, err := s.AppendVerdict(ctx, rec)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 || i == 2 || i == 4 {
			wantA = append(wantA, got.Sequence)
		}
	}
	all, err := s.VerdictsFor(ctx, a, 0)
	if err != nil || Seqs(all) != FmtSeqs(wantA) {
		t.Fatalf("all of a: %v %v, want %v", Seqs(all), err, wantA)
	}
	last2, err := s.VerdictsFor(ctx, a, 2)
	if err != nil || Seqs(last2) != FmtSeqs(wantA[1:]) {
		t.Fatalf("last 2 of a: %v %v, want %v", Seqs(last2), err, wantA[1:])
	}
	none, err := s.VerdictsFor(ctx, w.ID("nobody"), 0)
	if err != nil || none == nil || len(none) != 0 {
		t.Fatalf("unknown identity: %v %v", none, err)
	}
}

// Seqs is the JSON array of the records' sequences.
func Seqs(recs []verdict.Record) string {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.Sequence
	}
	return FmtSeqs(out)
}

// FmtSeqs is the JSON array of s.
func FmtSeqs(s []int64) string { b, _ := json.Marshal(s); return string(b) }
