package api

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

func fieldOf(err error) any {
	if e, ok := err.(*verdict.Error); ok {
		return e.Details["field"]
	}
	return nil
}

func TestDecodeInput(t *testing.T) {
	for _, c := range []struct {
		body  string
		field string // "" = accepted
		text  string
	}{
		{`{"text":"#{pane_pid} $(id) C-c","enter":true}`, "", "#{pane_pid} $(id) C-c"},
		{`{"text":"a\u0001\u001b[A"}`, "", "a\x01\x1b[A"},
		{`{"text":"keep \ufffd as sent"}`, "", "keep \ufffd as sent"},
		{"{\"text\":\"raw \xef\xbf\xbd too\"}", "", "raw \ufffd too"},
		{"{\"text\":\"a\xffb\"}", "text", ""},
		{`{"text":"a\ud800b"}`, "text", ""},
		{`{"text":"a\udc00"}`, "text", ""},
		{`{"text":"\ud83d\ude00 \\ud800 kept"}`, "", "\U0001F600 \\ud800 kept"},
		{`{"keys":["C-c"],"bogus":true}`, "bogus", ""},
		{`{"text":"FIRST","text":"SECOND"}`, "text", ""},
		{`{"TEXT":"UPPER"}`, "TEXT", ""},
		{``, "body", ""},
		{`{"text":5}`, "text", ""},
		{`{"keys":"C-c"}`, "keys", ""},
		{`{"text":"x","enter":"yes"}`, "enter", ""},
		{`{"text":"a"} {"text":"b"}`, "body", ""},
		{`[1]`, "body", ""},
	} {
		in, err := DecodeInput([]byte(c.body))
		switch {
		case c.field == "" && (err != nil || in.Text != c.text):
			t.Errorf("%s: %q %v", c.body, in.Text, err)
		case c.field != "" && fieldOf(err) != c.field:
			t.Errorf("%s: %v, want a refusal of %s", c.body, err, c.field)
		}
	}
}

func TestParseWait(t *testing.T) {
	for _, c := range []struct {
		query string
		field string
		want  WaitRequest
	}{
		{"exit=1", "", WaitRequest{Exit: true}},
		{"idle=1.5s&timeout=1m", "", WaitRequest{Idle: 1500 * time.Millisecond, Timeout: time.Minute}},
		{"text=Done%20%23%7Bx%7D", "", WaitRequest{Text: "Done #{x}"}},
		{"", "condition", WaitRequest{}},
		{"exit=1&text=x", "condition", WaitRequest{}},
		{"idle=-1s", "idle", WaitRequest{}},
		{"idle=5", "idle", WaitRequest{}},
		{"exit=yes", "exit", WaitRequest{}},
		{"text=x&timeout=0s", "timeout", WaitRequest{}},
	} {
		r := httptest.NewRequest("GET", "/v1/sessions/x/wait?"+c.query, nil)
		got, err := parseWait(r)
		switch {
		case c.field == "" && (err != nil || got != c.want):
			t.Errorf("%s: %+v %v", c.query, got, err)
		case c.field != "" && fieldOf(err) != c.field:
			t.Errorf("%s: %v, want a refusal of %s", c.query, err, c.field)
		}
	}
	if p := talkPath(Ref{Name: "a b/c"}, "screen", url.Values{}); p != "/v1/sessions/a%20b%2Fc/screen" {
		t.Error(p)
	}
	if p := talkPath(Ref{StateDir: "/s d", SessionID: "x"}, "wait", url.Values{"exit": {"1"}}); p != "/v1/identity/wait?exit=1&session_id=x&state_dir=%2Fs+d" {
		t.Error(p)
	}
}

// TestOutputFollowIsOne: output serves follow=1 alone; anything else is
// refused naming follow and the value (follow=true was served, follow=0
// told "only follow=1 is served").
func TestOutputFollowIsOne(t *testing.T) {
	if err := outputFollow("1"); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"", "0", "true", "false", "yes", "01"} {
		err := outputFollow(v)
		if fieldOf(err) != "follow" || !strings.Contains(err.Error(), fmt.Sprintf("got %q", v)) {
			t.Errorf("follow=%q: %v; want refused, naming the value", v, err)
		}
	}
}

// FuzzDecodeInput: whatever the body, an accepted input's text is valid UTF-8
// and survives a JSON round trip unchanged (what the daemon types is what was
// sent).
func FuzzDecodeInput(f *testing.F) {
	for _, s := range []string{`{"text":"a\u0000"}`, `{"text":"\ud800"}`, "{\"text\":\"\xff\"}", `{"keys":["C-c"]}`, `{"text":"\ufffd"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in, err := DecodeInput(body)
		if err != nil {
			return
		}
		if !utf8.ValidString(in.Text) {
			t.Fatalf("accepted invalid UTF-8 %q", in.Text)
		}
		b, _ := json.Marshal(in)
		back, err := DecodeInput(b)
		if err != nil || back.Text != in.Text {
			t.Fatalf("round trip of %q: %q %v", in.Text, back.Text, err)
		}
	})
}
