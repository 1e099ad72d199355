package integration

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestTmuxctlDecode drives `skc-supervisor tmuxctl decode` with a raw
// control-mode stream and checks every record against docs/contract.md.
func TestTmuxctlDecode(t *testing.T) {
	t.Parallel()
	h := NewHome(t)
	in := strings.Join([]string{
		"%begin 1604279270 310 1\r",
		"line one",
		"%1 is data inside a block",
		"%end 1604279270 310 1",
		"%begin 1604279271 311 1",
		"bad command",
		"%error 1604279271 311 1",
		`%output %1 a\012b\x\134c`,
		"%extended-output %2 40 : hi\\040there",
		"%sessions-changed",
		"%window-renamed @1 new name",
		"%brand-new-notification with text",
		"%session-renamed $1 bad\xffbyte",
		"not a notification",
		"%begin 1604279272 312 1",
		"inside",
		"%end 1604279272 999 1",
		"tail without LF",
	}, "\n")
	r := h.CLIWith(t, CLIOpts{Stdin: strings.NewReader(in)}, "tmuxctl", "decode")
	if r.Code != 0 {
		t.Fatalf("want exit 0\n%s", r)
	}
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	want := []map[string]any{
		{"type": "reply", "time": 1604279270.0, "number": 310.0, "flags": 1.0, "error": false,
			"lines": []any{"line one", "%1 is data inside a block"}},
		{"type": "reply", "time": 1604279271.0, "number": 311.0, "flags": 1.0, "error": true,
			"lines": []any{"bad command"}},
		{"type": "output", "pane": "%1", "data_b64": b64("a\nb\\x\\c")},
		{"type": "output", "pane": "%2", "data_b64": b64("hi there"), "age": 40.0},
		{"type": "notification", "name": "sessions-changed", "text": ""},
		{"type": "notification", "name": "window-renamed", "text": "@1 new name"},
		{"type": "notification", "name": "brand-new-notification", "text": "with text"},
		{"type": "notification", "name": "session-renamed", "text": "$1 bad\ufffdbyte"},
		{"type": "unexpected", "text": "not a notification"},
		{"type": "incomplete", "time": 1604279272.0, "number": 312.0, "flags": 1.0,
			"lines": []any{"inside", "%end 1604279272 999 1", "tail without LF"}},
	}
	lines := strings.Split(strings.TrimRight(r.Stdout, "\n"), "\n")
	if len(lines) != len(want) {
		t.Errorf("%d records, want %d:\n%s", len(lines), len(want), r.Stdout)
	}
	for i := 0; i < len(lines) && i < len(want); i++ {
		var got map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
			t.Errorf("record %d is not JSON: %q", i, lines[i])
			continue
		}
		for k, v := range want[i] {
			if !reflect.DeepEqual(got[k], v) {
				t.Errorf("record %d: %s = %#v, want %#v\n%s", i, k, got[k], v, lines[i])
			}
		}
	}
}
