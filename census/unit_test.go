package census

import (
	"strconv"
	"strings"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// offline returns a census that believes it is connected to life, for
// exercising apply and the feed without tmux.
func offline(life tmuxctl.ServerLife) *Census {
	c := newCensus(nil, nil, defaultConfig())
	c.info = tmuxctl.ServerInfo{ServerLife: life}
	c.online = true
	return c
}

func entryFor(id int, name, ident string) *entry {
	e := &entry{s: Session{ID: "$" + strconv.Itoa(id), Name: name}}
	if ident != "" {
		e.s.Tags = map[string]string{TagIdentity: ident}
		e.s.Managed = true
		e.exact[1] = ident
	}
	return e
}

func TestParseRowOddLines(t *testing.T) {
	good := "$3\t1796000000\t1\t%4\t42\t1\t7\t\t1796000000\t\t" + digest(1) + "\t2\t\t\t\tname with\\ttab and spaces"
	r, ok := parseRow(good)
	if !ok || r.broken || r.s.Name != `name with\ttab and spaces` || !r.s.PaneDead || *r.s.PaneDeadStatus != 7 ||
		r.list[1] != digest(1) || r.list[2] != "2" || r.s.Attached != 1 || r.s.PanePID != 42 {
		t.Fatalf("good line: %+v ok=%v", r, ok)
	}
	for _, line := range []string{"", "garbage", "%end 1 2 3", "3\tx", "$\t1"} {
		if _, ok := parseRow(line); ok {
			t.Errorf("%q: want skipped", line)
		}
	}
	broken := []string{
		"$5\t1796000000", // too few fields (a tag held a newline)
		"$5\t1796000000\t0\t%1\t9\t0\t\t\t1796000000\t\ta\tb\t\t\t\t\tn", // a tag held a tab: the name has one
		"$5\tx\t0\t%1\t9\t0\t\t\t1\t\t\t\t\t\t\tn",                       // created not a number
	}
	for _, line := range broken {
		r, ok := parseRow(line)
		if !ok || !r.broken || r.s.ID != "$5" {
			t.Errorf("%q: want broken $5, got %+v ok=%v", line, r, ok)
		}
	}
	bad := "$6\t1\t0\t%1\t9\t0\t\t\t1\t\tx y\t\t\t\t\tn"
	if r, _ := parseRow(bad); !r.badTags || r.broken {
		t.Errorf("a tag with a space must force an exact read: %+v", r)
	}
}

func TestApplyDiffAndIndexes(t *testing.T) {
	life := tmuxctl.ServerLife{Socket: "s", PID: 10, StartTime: 1}
	c := offline(life)
	sub := c.Subscribe(16)
	defer sub.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.apply(c.epoch, life, []*entry{entryFor(1, "a", digest(1)), entryFor(2, "b", "")}))
	if !c.Synced() {
		t.Fatal("not synced after apply")
	}
	must(c.apply(c.epoch, life, []*entry{entryFor(1, "a2", digest(1))}))
	want := []string{"added $1", "added $2", "changed $1", "removed $2 gone"}
	for i, w := range want {
		ch := <-sub.C()
		got := ch.Kind.String() + " " + ch.Session.ID
		if ch.Reason != "" {
			got += " " + ch.Reason
		}
		if got != w || ch.Seq != uint64(i+1) || ch.Life != life {
			t.Fatalf("change %d: got %q seq %d, want %q", i, got, ch.Seq, w)
		}
	}
	if _, ok := c.ByName("a"); ok {
		t.Fatal("old name still indexed")
	}
	if s, ok := c.ByName("a2"); !ok || s.ID != "$1" || len(c.ByIdentity(digest(1))) != 1 {
		t.Fatalf("indexes: %+v %v", s, ok)
	}
	// A sync that started before a disconnect must not apply.
	c.epoch++
	if err := c.apply(c.epoch-1, life, nil); err != errStale {
		t.Fatalf("stale apply: %v", err)
	}
	// Snapshots are copies.
	snap := c.Snapshot()
	snap.Sessions[0].Tags[TagIdentity] = "mutated"
	if s, _ := c.ByID("$1"); s.Tags[TagIdentity] != digest(1) {
		t.Fatal("snapshot aliases census state")
	}
}

// A slow subscriber never blocks the census: it gets a Resync mark, then
// later changes again.
func TestSlowSubscriberGetsResync(t *testing.T) {
	life := tmuxctl.ServerLife{PID: 1}
	c := offline(life)
	sub := c.Subscribe(2)
	defer sub.Close()
	var es []*entry
	for i := 0; i < 50; i++ {
		es = append(es, entryFor(i, "s"+strconv.Itoa(i), ""))
		if err := c.apply(c.epoch, life, es); err != nil { // never blocks
			t.Fatal(err)
		}
	}
	var kinds []string
	for len(sub.C()) > 0 {
		kinds = append(kinds, (<-sub.C()).Kind.String())
	}
	if strings.Join(kinds, ",") != "added,added,resync" {
		t.Fatalf("got %v", kinds)
	}
	if snap := c.Snapshot(); snap.Seq != 50 || len(snap.Sessions) != 50 {
		t.Fatalf("snapshot after resync: seq %d, %d sessions", snap.Seq, len(snap.Sessions))
	}
	if err := c.apply(c.epoch, life, es[:49]); err != nil {
		t.Fatal(err)
	}
	if ch := <-sub.C(); ch.Kind != Removed || ch.Seq != 51 {
		t.Fatalf("after draining: %+v", ch)
	}
}

func TestLifeChangeRemovesAll(t *testing.T) {
	life := tmuxctl.ServerLife{PID: 1, StartTime: 1}
	c := offline(life)
	if err := c.apply(c.epoch, life, []*entry{entryFor(1, "a", digest(1)), entryFor(2, "b", "")}); err != nil {
		t.Fatal(err)
	}
	sub := c.Subscribe(8)
	defer sub.Close()
	c.onConnected(tmuxctl.ServerInfo{ServerLife: tmuxctl.ServerLife{PID: 2, StartTime: 2}})
	for _, id := range []string{"$1", "$2"} {
		ch := <-sub.C()
		if ch.Kind != Removed || ch.Reason != ReasonLifeChanged || ch.Session.ID != id || ch.Life != life {
			t.Fatalf("got %+v", ch)
		}
	}
	if c.Synced() || len(c.Snapshot().Sessions) != 0 || len(c.ByIdentity(digest(1))) != 0 {
		t.Fatal("old life survived")
	}
}

func TestJudge(t *testing.T) {
	d := digest(5)
	tagged := func(id, name, ident, gen string) Session {
		return Session{ID: id, Name: name, Tags: map[string]string{TagIdentity: ident, TagGeneration: gen}}
	}
	ev := Evidence{IdentityDigest: d, AttemptName: "x", Generation: 2}
	cases := []struct {
		name  string
		found []Session
		want  Authority
	}{
		{"none", nil, Absent},
		{"published", []Session{tagged("$1", "x", d, "2")}, Authoritative},
		{"other generation", []Session{tagged("$1", "x", d, "1")}, Orphan},
		{"untagged name", []Session{{ID: "$1", Name: "x"}}, Orphan},
		{"two", []Session{tagged("$1", "x", d, "2"), tagged("$2", "y", d, "2")}, Unknown},
		{"other identity", []Session{tagged("$1", "x", digest(6), "2")}, Unknown},
	}
	for _, tc := range cases {
		if a, _, _ := judge(ev, tc.found); a != tc.want {
			t.Errorf("%s: got %v want %v", tc.name, a, tc.want)
		}
	}
	if a, _, _ := judge(Evidence{IdentityDigest: d}, []Session{tagged("$1", "x", d, "0")}); a != Orphan {
		t.Errorf("generation 0 is never authoritative: %v", a)
	}
	if Authoritative.String() != "authoritative" || Unknown.String() != "unknown" || Resync.String() != "resync" {
		t.Error("names")
	}
}

// FuzzParseRow: no input line crashes the parser, and a row it accepts has a
// valid id.
func FuzzParseRow(f *testing.F) {
	f.Add("$3\t1796000000\t1\t%4\t42\t1\t7\t\t1796000000\t\t" + digest(1) + "\t2\t\t\tname")
	f.Add("$5\t1\t0\t%1\t9\t0\t\t\t1\t\ta\tb\t\t\t\t\tn")
	f.Add("%end 1 2 3")
	f.Fuzz(func(t *testing.T, line string) {
		if r, ok := parseRow(line); ok && !validID(r.s.ID) {
			t.Fatalf("accepted %q with id %q", line, r.s.ID)
		}
	})
}
