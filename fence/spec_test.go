package fence

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestHelperSpecOutlivesRelease: the pane helper's spec is readable from Reserve
// on, stays readable after the published generation's row is released (the
// helper may start after publication), and goes when the generation ends or when
// a row is released unpublished (compensation) — an orphan's helper finds nothing.
func TestHelperSpecOutlivesRelease(t *testing.T) {
	w := newWorld(t)
	s := w.owner(100)
	spec := w.spec("a")
	spec.Argv, spec.Env, spec.Cwd = []string{"agent", "--x"}, []string{"K=V"}, w.dir
	r := mustReserve(t, s, w.id("a"), spec)
	want := func(when string, ok bool) {
		t.Helper()
		h, found, err := s.HelperSpec(ctx, r.ID)
		if err != nil || found != ok {
			t.Fatalf("%s: HelperSpec found=%v err=%v, want found=%v", when, found, err, ok)
		}
		if ok && (h.Generation != r.Generation || h.Identity != r.Identity || !reflect.DeepEqual(h.Spec, r.Spec)) {
			t.Fatalf("%s: HelperSpec %+v, want the reservation's %+v", when, h, r)
		}
	}
	want("reserved", true)
	for _, to := range []Phase{PhaseHelperInvoked, PhaseSpawned, PhaseTagged} {
		p := Patch{}
		if to == PhaseHelperInvoked {
			p.AttemptName = "skc-" + r.ID
		}
		if to == PhaseSpawned {
			p = Patch{TmuxID: "$1", PanePID: 7, ServerPID: 55, ServerStart: 1000}
		}
		if err := s.Advance(ctx, &r, to, p); err != nil {
			t.Fatal(err)
		}
	}
	pub, _, err := s.Publish(ctx, &r, testRecord(verdict.VerdictPublished))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	want("published and released", true)
	if ok, _, err := s.MarkEnded(ctx, pub.Identity, pub.Generation, testRecord(verdict.VerdictEnded)); err != nil || !ok {
		t.Fatalf("mark ended: %v %v", ok, err)
	}
	want("ended", false)

	r = mustReserve(t, s, w.id("a"), spec)
	want("second reservation", true)
	if err := s.Release(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	want("released unpublished", false)
}

// TestPublishedJSONEndedAt: `fence --json` says "ended_at": null for a
// generation that has not ended, the time once it has, and reads both back.
func TestPublishedJSONEndedAt(t *testing.T) {
	live := Published{Identity: Identity{StateDir: "/s", SessionID: "a"}, Generation: 1, PublishedAt: time.Now()}
	b, err := json.Marshal(live)
	if err != nil || !strings.Contains(string(b), `"ended_at":null`) || strings.Contains(string(b), "0001-01-01") {
		t.Fatalf("live: %s %v", b, err)
	}
	ended := live
	ended.Ended, ended.EndedAt = true, time.Date(2026, 11, 30, 1, 2, 3, 0, time.UTC)
	b, _ = json.Marshal(ended)
	var back Published
	if err := json.Unmarshal(b, &back); err != nil || !back.EndedAt.Equal(ended.EndedAt) || back.Identity != ended.Identity {
		t.Fatalf("ended: %s → %+v %v", b, back, err)
	}
}
