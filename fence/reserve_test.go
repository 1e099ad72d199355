package fence

import (
	"testing"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestReserveFree: with no reservation row, a published generation not
// marked ended decides the answer, and only its absence or its end lets the
// engine insert a row.
func TestReserveFree(t *testing.T) {
	id := Identity{StateDir: "/d", SessionID: "s"}
	spec := Spec{StateFile: "/d/s.jsonl"}
	pub := Published{Identity: id, Generation: 3, StateFile: spec.StateFile}
	ended := pub
	ended.Ended = true
	other := pub
	other.StateFile = "/d/other.jsonl"
	for _, c := range []struct {
		name      string
		pub       Published
		hasPub    bool
		elsewhere bool
		outcome   ReserveOutcome
		insert    bool
		code      string
	}{
		{name: "none", insert: true},
		{name: "ended", pub: ended, hasPub: true, insert: true},
		{name: "ended elsewhere", pub: ended, hasPub: true, elsewhere: true, insert: true},
		{name: "running", pub: pub, hasPub: true, outcome: MaybeExisting},
		{name: "running elsewhere", pub: pub, hasPub: true, elsewhere: true, outcome: PublishedElsewhere},
		{name: "other state file", pub: other, hasPub: true, elsewhere: true, code: verdict.CodeIdentityStateFileMismatch},
	} {
		res, insert, err := ReserveFree(id, spec, c.pub, c.hasPub, c.elsewhere)
		if verdict.CodeOf(err) != c.code && (err != nil || c.code != "") {
			t.Fatalf("%s: error %v, want code %q", c.name, err, c.code)
		}
		if c.code != "" {
			continue
		}
		if insert != c.insert || !insert && (res.Outcome != c.outcome || res.Published.Generation != 3) {
			t.Fatalf("%s: insert %v outcome %v, want %v %v", c.name, insert, res.Outcome, c.insert, c.outcome)
		}
	}
}

// TestReserveOverChecksStateFileFirst: a request naming another state file
// is refused before the owner's liveness is asked (no Owner is needed), by
// Reserve and by Reclaim; a Reclaim of a row that is gone or replaced is
// fence_lost before anything else.
func TestReserveOverChecksStateFileFirst(t *testing.T) {
	row := Reservation{ID: "ab", Identity: Identity{StateDir: "/d", SessionID: "s"}, Spec: Spec{StateFile: "/d/a.jsonl"}}
	asked := Spec{StateFile: "/d/b.jsonl"}
	if _, replace, err := ReserveOver(row, asked, nil, 1, "inc"); replace ||
		verdict.CodeOf(err) != verdict.CodeIdentityStateFileMismatch {
		t.Fatalf("reserve over: replace %v, %v", replace, err)
	}
	if err := ReclaimOver(row, true, "ab", asked, nil, 1, "inc"); verdict.CodeOf(err) != verdict.CodeIdentityStateFileMismatch {
		t.Fatalf("reclaim: %v", err)
	}
	for _, c := range []struct {
		ok  bool
		res string
	}{{false, "ab"}, {true, "cd"}} {
		if err := ReclaimOver(row, c.ok, c.res, row.Spec, nil, 1, "inc"); verdict.CodeOf(err) != verdict.CodeFenceLost {
			t.Fatalf("reclaim of %v %s: %v", c.ok, c.res, err)
		}
	}
}

// TestFindStuck: the operator's release acts on the row and on a running
// generation of the reservation, never on an ended one; neither is not_found.
func TestFindStuck(t *testing.T) {
	row := Reservation{ID: "ab"}
	running := Published{ReservationID: "ab", Generation: 2}
	ended := running
	ended.Ended = true
	if _, err := FindStuck("ab", Reservation{}, false, ended, true); verdict.CodeOf(err) != verdict.CodeNotFound {
		t.Fatalf("ended only: %v", err)
	}
	out, err := FindStuck("ab", row, true, ended, true)
	if err != nil || out.Reservation == nil || out.Published != nil {
		t.Fatalf("row and ended generation: %+v %v", out, err)
	}
	out, err = FindStuck("ab", Reservation{}, false, running, true)
	if err != nil || out.Reservation != nil || out.Published == nil || out.Published.Generation != 2 {
		t.Fatalf("running generation: %+v %v", out, err)
	}
}
