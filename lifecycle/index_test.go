package lifecycle

import (
	"context"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestShowVerdictsAcrossGenerations: Show answers the identity's verdicts from the
// fence's identity index — every generation's, oldest first, none of another
// identity's — and end detection (an indexed lookup by tmux session) writes the
// ended verdict of the generation that lived in the killed session.
func TestShowVerdictsAcrossGenerations(t *testing.T) {
	e := startEnv(t, "", "", false)
	e.create(t, "noise")
	id, first := e.create(t, "gens")
	if _, err := e.m.Kill(context.Background(), Ref{Identity: &id}); err != nil {
		t.Fatal(err)
	}
	_, second := e.create(t, "gens")
	// The second generation's session is removed behind the supervisor's back:
	// end detection must find it by its tmux id alone.
	if _, err := e.client.Command(context.Background(), "kill-session", "-t", second.Session.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second generation's end", func() bool {
		recs := e.verdicts(id)
		return count(recs, verdict.VerdictEnded) == 2
	})
	_, third := e.create(t, "gens")
	sh, err := e.m.Show(context.Background(), Ref{Identity: &id})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var last int64
	for _, r := range sh.Verdicts {
		if r.Identity == nil || r.Identity.SessionID != "gens" || r.Sequence <= last {
			t.Fatalf("show verdicts out of order or of another identity: %+v", sh.Verdicts)
		}
		last = r.Sequence
		got = append(got, r.Verdict)
	}
	want := []string{"published", "ended", "published", "ended", "published"}
	if len(got) != len(want) {
		t.Fatalf("show verdicts %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("show verdicts %v, want %v", got, want)
		}
	}
	ended := sh.Verdicts[3]
	if ended.Session == nil || ended.Session.ID != second.Session.ID || ended.Session.Generation != second.Session.Generation {
		t.Fatalf("end detection ended %+v, want the session of %+v", ended.Session, second.Session)
	}
	if first.Session.Generation >= second.Session.Generation || second.Session.Generation >= third.Session.Generation {
		t.Fatalf("generations %d %d %d", first.Session.Generation, second.Session.Generation, third.Session.Generation)
	}
}
