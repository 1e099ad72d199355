package lifecycle

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
)

// A session's View carries the census's activity as activity_at, null when
// the pane has produced no output; the view cache tells views apart by the
// time, not by the pointer.
func TestViewActivityAt(t *testing.T) {
	m := &Manager{}
	s := census.Session{Name: "a", ID: "$1", Created: time.Unix(1800000000, 0)}
	v := m.viewOf(&s, nil)
	b, err := json.Marshal(v)
	if err != nil || !strings.Contains(string(b), `"activity_at":null`) {
		t.Fatalf("no output: %s %v", b, err)
	}
	s.Activity = time.Unix(1800000042, 0)
	w := m.viewOf(&s, nil)
	if b, _ = json.Marshal(w); !strings.Contains(string(b), `"activity_at":"2027-01-15T08:00:42Z"`) {
		t.Fatalf("activity: %s", b)
	}
	w2 := m.viewOf(&s, nil)
	if !sameView(&w, &w2) || sameView(&v, &w) {
		t.Fatal("sameView must compare activity by value")
	}
	var vc viewCache
	vc.byID = map[string]*encodedView{}
	e1, _ := vc.encoded(&v)
	e2, _ := vc.encoded(&w)
	if string(e1) == string(e2) {
		t.Fatal("the view cache reused the JSON of another activity")
	}
}

// TestViewActivityDoubt: an activity at the session's creation second is
// told only by the pane's cursor and history, which tmux's dead-pane notice
// moves and a respawn keeps: for a dead pane, or a generation after the
// first in its session, it is not output (activity_at null); a later second
// is.
func TestViewActivityDoubt(t *testing.T) {
	m := &Manager{}
	created := time.Unix(1800000000, 0).UTC()
	pub := fence.Published{Generation: 1, TmuxID: "$1"}
	later := created.Add(10 * time.Minute) // a restart in the session: published long after its @skc-since
	cases := []struct {
		name      string
		dead      bool
		restarts  int
		published time.Time
		act       time.Time
		want      bool
	}{
		{"live first generation, first second", false, 0, created, created, true},
		{"dead pane, first second", true, 0, created, created, false},
		{"restarted in its session, first second", false, 1, later, created, false},
		{"restarted in a new session (its server died), first second", false, 1, created.Add(200 * time.Millisecond), created, true},
		{"dead pane, later output", true, 0, created, created.Add(3 * time.Second), true},
		{"restarted, later output", false, 2, later, created.Add(3 * time.Second), true},
	}
	for _, tc := range cases {
		s := census.Session{Name: "a", ID: "$1", Created: created, Managed: true, PaneDead: tc.dead, Activity: tc.act,
			Tags: map[string]string{TagIdentity: "d", TagGeneration: "1", TagSince: strconv.FormatInt(created.UnixNano(), 10)}}
		p := pub
		p.Restart.Restarts, p.PublishedAt = tc.restarts, tc.published
		v := m.viewOf(&s, &p)
		if !v.Authoritative || (v.ActivityAt != nil) != tc.want {
			t.Errorf("%s: authoritative %v, activity_at %v, want set %v", tc.name, v.Authoritative, v.ActivityAt, tc.want)
		}
	}
}
