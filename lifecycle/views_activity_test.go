package lifecycle

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/census"
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
