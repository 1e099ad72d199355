package tmuxctl

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func parseAll(chunks ...[]byte) []Record {
	var recs []Record
	p := NewParser(func(r Record) { recs = append(recs, r) })
	for _, c := range chunks {
		_, _ = p.Write(c)
	}
	p.Close()
	return recs
}

// chunked feeds data in pieces whose sizes come from seed.
func chunked(data []byte, seed uint64) []Record {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var chunks [][]byte
	for len(data) > 0 {
		n := 1 + r.IntN(min(len(data), 64))
		if r.IntN(8) == 0 {
			n = len(data)
		}
		chunks = append(chunks, data[:n])
		data = data[n:]
	}
	return parseAll(chunks...)
}

func TestParserChunkingCorpus(t *testing.T) {
	outs, _ := filepath.Glob("testdata/corpus/*.out")
	for _, out := range outs {
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		whole := parseAll(data)
		for seed := uint64(1); seed <= 3; seed++ {
			if got := chunked(data, seed); !reflect.DeepEqual(got, whole) {
				t.Fatalf("%s: chunking (seed %d) changed the records", out, seed)
			}
		}
	}
}

func TestParserRules(t *testing.T) {
	in := "%begin 1 2 1\r\n%end 1 2 0\n%end 1 3 1\n%error 1 2 1x\n%begin 9 9 9\n%end 1 2 1\n" +
		"%session-renamed $1 a b\nbare\n%sessions-changed\n%output %1 a\\134b\\015\\012\\9x\\\n" +
		"%extended-output %2 17 x y : d\\033\n%output bad\n%begin 5 6 1\npartial"
	recs := parseAll([]byte(in))
	want := []Record{
		{Kind: RecordReply, Reply: Reply{Time: 1, Number: 2, Flags: 1,
			Lines: []string{"%end 1 2 0", "%end 1 3 1", "%error 1 2 1x", "%begin 9 9 9"}}},
		{Kind: RecordNotification, Name: "session-renamed", Text: "$1 a b"},
		{Kind: RecordUnexpected, Text: "bare"},
		{Kind: RecordNotification, Name: "sessions-changed", Text: ""},
		{Kind: RecordOutput, Pane: "%1", Data: []byte("a\\b\r\n\\9x\\")},
		{Kind: RecordOutput, Pane: "%2", Data: []byte("d\x1b"), Extended: true, Age: 17},
		{Kind: RecordNotification, Name: "output", Text: "bad"},
		{Kind: RecordIncomplete, Reply: Reply{Time: 5, Number: 6, Flags: 1, Lines: []string{"partial"}}},
	}
	if !reflect.DeepEqual(recs, want) {
		t.Fatalf("got  %+v\nwant %+v", recs, want)
	}
}

func TestNotificationAccessors(t *testing.T) {
	id, name, err := Notification{NoteSessionRenamed, "$3 has space"}.Session()
	if err != nil || id != "$3" || name != "has space" {
		t.Fatal(id, name, err)
	}
	if _, _, err := (Notification{NoteSessionChanged, "nope"}).Session(); err == nil {
		t.Fatal("malformed session-changed accepted")
	}
	for _, n := range []string{NoteWindowAdd, NoteWindowClose, NoteUnlinkedWindowAdd, NoteUnlinkedWindowClose} {
		if w, err := (Notification{n, "@7"}).Window(); err != nil || w != "@7" {
			t.Fatal(n, w, err)
		}
	}
	s, err := Notification{NoteSubscriptionChanged, "census $0 - - - : $0=ctl:one : x,"}.Subscription()
	if err != nil || s.Name != "census" || s.SessionID != "$0" || s.Value != "$0=ctl:one : x," {
		t.Fatal(s, err)
	}
	s, err = Notification{NoteSubscriptionChanged, "p $0 @1 0 %2 extra : "}.Subscription()
	if err != nil || s.PaneID != "%2" || s.WindowID != "@1" || s.Value != "" {
		t.Fatal(s, err)
	}
	if p, err := (Notification{NotePause, "%4"}).Pane(); err != nil || p != "%4" {
		t.Fatal(p, err)
	}
	if r := (Notification{NoteExit, "too far behind"}).ExitReason(); r != "too far behind" {
		t.Fatal(r)
	}
	var pe *ProtocolError
	if _, err := (Notification{NoteSubscriptionChanged, "garbage"}).Subscription(); err == nil || !asProtocol(err, &pe) {
		t.Fatal(err)
	}
}

func asProtocol(err error, pe **ProtocolError) bool {
	p, ok := err.(*ProtocolError)
	*pe = p
	return ok
}

func TestVersionAtLeast(t *testing.T) {
	for v, want := range map[string]bool{"3.3a": true, "3.2": false, "3.4": true, "next-3.5": true, "4.0": true, "master": true} {
		if got := (ServerInfo{Version: v}).VersionAtLeast(3, 3); got != want {
			t.Errorf("%s: %v", v, got)
		}
	}
}

// FuzzParser: no panic, and any chunking of the same bytes yields the same
// records.
func FuzzParser(f *testing.F) {
	outs, _ := filepath.Glob("testdata/corpus/*.out")
	for _, out := range outs {
		if data, err := os.ReadFile(out); err == nil && len(data) < 8192 {
			f.Add(data, uint64(len(data)))
		}
	}
	f.Add([]byte("%begin 1 2 1\n%end 1 2 1\r\n%output %1 \\00"), uint64(7))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		whole := parseAll(data)
		if got := chunked(data, seed); !reflect.DeepEqual(got, whole) {
			t.Fatalf("chunking changed the records:\n%+v\n%+v", got, whole)
		}
		var split [][]byte
		for i := range data {
			split = append(split, data[i:i+1])
		}
		if got := parseAll(split...); !reflect.DeepEqual(got, whole) {
			t.Fatal("byte-by-byte feeding changed the records")
		}
	})
}
