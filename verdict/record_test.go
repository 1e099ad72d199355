package verdict

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

var t0 = time.Date(2026, 11, 30, 1, 2, 3, 456789012, time.UTC)

func TestRecordContractShape(t *testing.T) {
	r := Record{
		Timestamp: t0, Action: ActionCreate, Outcome: OutcomeSuccess, Reason: ReasonCreated,
		Sequence: 17, Verdict: VerdictPublished,
		Identity:    &IdentityRef{StateDir: "/abs", SessionID: "abc"},
		Session:     &SessionRef{Name: "skc-x", ID: "$3", Generation: 1},
		Reservation: &ReservationRef{ID: "r1", Phase: "published"},
	}
	got, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"@timestamp":"2026-11-30T01:02:03.456789012Z",` +
		`"event":{"kind":"event","action":"create","outcome":"success","reason":"created","sequence":17},` +
		`"skc":{"verdict":"published","code":"","exit_kind":"",` +
		`"identity":{"state_dir":"/abs","session_id":"abc"},` +
		`"session":{"name":"skc-x","id":"$3","generation":1},` +
		`"reservation":{"id":"r1","phase":"published"},"evidence":{}}}`
	if string(got) != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func TestRecordEndedExit(t *testing.T) {
	cases := []struct {
		exit *Exit
		want string
	}{
		{ExitStatus(7), `"exit":{"status":7,"signal":""}`},
		{ExitSignal("SIGKILL"), `"exit":{"status":null,"signal":"SIGKILL"}`},
		{&Exit{}, `"exit":{"status":null,"signal":""}`},
	}
	for _, c := range cases {
		r := Record{Timestamp: t0, Action: ActionEnd, Outcome: OutcomeSuccess, Verdict: VerdictEnded,
			ExitKind: ExitKindExit, Exit: c.exit, Duration: 1500 * time.Millisecond}
		b, _ := json.Marshal(r)
		if !bytes.Contains(b, []byte(c.want)) || !bytes.Contains(b, []byte(`"duration":1500000000`)) {
			t.Errorf("%s lacks %s", b, c.want)
		}
		assertRoundTrip(t, r)
	}
}

func TestRecordRoundTripVocabulary(t *testing.T) {
	for _, r := range exampleRecords() {
		assertRoundTrip(t, r)
		assertECS(t, r.Line())
	}
}

func TestRecordEscaping(t *testing.T) {
	weird := "a\"b\\c\nd\re\tf\x01g\xffh\u2028i</script>"
	r := Record{Timestamp: t0, Action: ActionCreate, Outcome: OutcomeFailure, Verdict: VerdictRefused,
		Code: CodeIdentityReservedLive, Reason: weird,
		Identity: &IdentityRef{StateDir: weird, SessionID: "x"},
		Evidence: map[string]any{"k": weird, "pid": json.Number("42")}}
	b := r.Line()
	if bytes.Count(b, []byte("\n")) != 1 || !json.Valid(bytes.TrimSpace(b)) {
		t.Fatalf("not one valid JSON line: %q", b)
	}
	back, err := ParseLine(b)
	if err != nil {
		t.Fatal(err)
	}
	fixed := strings.ToValidUTF8(weird, "\ufffd")
	if back.Reason != fixed || back.Identity.StateDir != fixed || back.Evidence["k"] != fixed {
		t.Fatalf("escaping lost data: %q", back.Reason)
	}
}

func TestRecordUnencodableEvidence(t *testing.T) {
	r := Record{Timestamp: t0, Verdict: VerdictFailed, Evidence: map[string]any{"c": make(chan int)}}
	b, err := json.Marshal(r)
	if err != nil || !json.Valid(b) || !bytes.Contains(b, []byte(`"unencodable"`)) {
		t.Fatalf("%s %v", b, err)
	}
}

func TestRecordIgnoresUnknownFields(t *testing.T) {
	line := `{"@timestamp":"2026-11-30T01:02:03.5+01:00","event":{"kind":"event","action":"end",` +
		`"outcome":"unknown","sequence":3,"new":1},"skc":{"verdict":"ended","exit_kind":"owner_lost","x":{}},"host":{}}`
	r, err := ParseLine([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if r.Sequence != 3 || r.ExitKind != ExitKindOwnerLost || !r.Timestamp.Equal(time.Date(2026, 11, 30, 0, 2, 3, 5e8, time.UTC)) ||
		r.Timestamp.Location() != time.UTC {
		t.Fatalf("%+v", r)
	}
	if _, err := ParseLine([]byte(`{"@timestamp":"yesterday"}`)); err == nil {
		t.Fatal("bad timestamp accepted")
	}
}

// assertRoundTrip checks Marshal → Unmarshal gives the same record and the
// same bytes again.
func assertRoundTrip(t *testing.T, r Record) {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Record
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Fatalf("round trip changed the record:\n%#v\n%#v", r, back)
	}
	b2, _ := json.Marshal(back)
	if !bytes.Equal(b, b2) {
		t.Fatalf("re-encoding differs:\n%s\n%s", b, b2)
	}
}

// assertECS checks that line is one JSON object on one line with the ECS and
// skc fields, in the vocabulary.
func assertECS(t *testing.T, line []byte) {
	t.Helper()
	if len(line) == 0 || line[len(line)-1] != '\n' || bytes.Count(line, []byte("\n")) != 1 {
		t.Fatalf("not one line: %q", line)
	}
	var m struct {
		Timestamp string `json:"@timestamp"`
		Event     map[string]any
		Skc       map[string]any
	}
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	if _, err := time.Parse(TimeFormat, m.Timestamp); err != nil {
		t.Errorf("@timestamp %q: %v", m.Timestamp, err)
	}
	for _, k := range []string{"kind", "action", "outcome", "reason", "sequence"} {
		if _, ok := m.Event[k]; !ok {
			t.Errorf("event.%s missing in %s", k, line)
		}
	}
	for _, k := range []string{"verdict", "code", "exit_kind", "evidence"} {
		if _, ok := m.Skc[k]; !ok {
			t.Errorf("skc.%s missing in %s", k, line)
		}
	}
	checkVocabulary(t, m.Event, m.Skc, line)
}

func checkVocabulary(t *testing.T, event, skc map[string]any, line []byte) {
	t.Helper()
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	if str(event, "kind") != KindEvent || !contains(Actions, str(event, "action")) ||
		!contains(Outcomes, str(event, "outcome")) || !contains(Verdicts, str(skc, "verdict")) {
		t.Errorf("vocabulary: %s", line)
	}
	if r := str(event, "reason"); r != "" && !contains(AllReasons(), r) {
		t.Errorf("unknown reason %q: %s", r, line)
	}
	if c := str(skc, "code"); c != "" && !Known(c) {
		t.Errorf("unknown code %q: %s", c, line)
	}
	if k := str(skc, "exit_kind"); k != "" && !contains(ExitKinds, k) {
		t.Errorf("unknown exit kind %q: %s", k, line)
	}
}

// TestEscapingMatchesZerolog: the hand-built encoder escapes strings exactly as
// zerolog does, so verdict lines and operational log lines agree byte for byte.
func TestEscapingMatchesZerolog(t *testing.T) {
	for _, s := range []string{"", "plain", "a\"b\\c", "\n\r\t\x00\x1f\x7f\b\f", "\xff\xfe ok", "é ✓ \u2028", "</script>&"} {
		var buf bytes.Buffer
		zl := zerolog.New(&buf)
		zl.Log().Str("k", s).Send()
		want := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(buf.String()), `{"k":`), "}")
		if got := string(appendString(nil, s)); got != want {
			t.Errorf("%q: got %s, zerolog %s", s, got, want)
		}
	}
}
