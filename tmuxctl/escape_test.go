package tmuxctl

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// escape34 models what tmux 3.4/3.5 print for a value (utf8_strvis with
// VIS_OCTAL|VIS_CSTYLE|VIS_NOSLASH), for the tests below: valid UTF-8
// characters raw (tmux also escapes unprintable ones, which only adds
// escapes of the same kind), printable ASCII, space, tab, newline and the
// backslash raw, BEL BS VT FF CR as letters, every other byte \ooo.
func escape34(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); {
		if r, n := utf8.DecodeRuneInString(v[i:]); n > 1 && r != utf8.RuneError {
			b.WriteString(v[i : i+n])
			i += n
			continue
		}
		c := v[i]
		i++
		switch {
		case c >= 0x20 && c < 0x7f, c == '\t', c == '\n':
			b.WriteByte(c)
		case c >= '\a' && c <= '\r':
			b.WriteByte('\\')
			b.WriteByte("abtnvfr"[c-'\a'])
		default:
			fmt.Fprintf(&b, "\\%03o", c)
		}
	}
	return b.String()
}

func TestUnescapeOutputTable(t *testing.T) {
	for _, tc := range []struct {
		in, want  string
		ambiguous bool
	}{
		{"", "", false},
		{"plain text", "plain text", false},
		{`C:\Users\x`, `C:\Users\x`, false},                     // \U, \x: never an escape
		{`\101\040\011\012`, `\101\040\011\012`, false},         // printable, tab, newline: tmux writes those raw
		{`\007\010\013\014\015`, `\007\010\013\014\015`, false}, // BEL…CR have letter forms
		{`\000`, `\000`, false},                                 // NUL cannot be in a value
		{`\400\38`, `\400\38`, false},                           // not three octal digits ≤ 377
		{`\001`, "\x01", true},
		{`a\033[1mb`, "a\x1b[1mb", true},
		{`\177\200\377`, "\x7f\x80\xff", true},
		{`\a\b\v\f\r`, "\a\b\v\f\r", true},
		{`tail\`, `tail\`, false},
		{`\\001`, "\\\x01", true}, // a literal backslash before an escape
		{"é\\303", "é\xc3", true},
	} {
		got, amb := UnescapeOutput(tc.in)
		if got != tc.want || amb != tc.ambiguous {
			t.Errorf("UnescapeOutput(%q) = %q, %v; want %q, %v", tc.in, got, amb, tc.want, tc.ambiguous)
		}
	}
}

// TestUnescapeOutputInvertsEscape: every value without a backslash comes
// back byte for byte, and a value with backslashes either comes back or is
// reported ambiguous — the promise Reply.Text makes on 3.4/3.5.
func TestUnescapeOutputInvertsEscape(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte("\\abfrv0123457\x01\x07\x1b\x7f\x80\xc3\xa9\xff\t\n x")
	for i := 0; i < 20000; i++ {
		v := make([]byte, 1+r.IntN(12))
		for j := range v {
			if r.IntN(3) == 0 {
				v[j] = byte(1 + r.IntN(255))
			} else {
				v[j] = alphabet[r.IntN(len(alphabet))]
			}
		}
		got, amb := UnescapeOutput(escape34(string(v)))
		if got != string(v) && (!amb || !strings.Contains(string(v), `\`)) {
			t.Fatalf("value %q: escaped %q, decoded %q (ambiguous %v)", v, escape34(string(v)), got, amb)
		}
	}
	for b := 1; b < 256; b++ {
		v := string([]byte{byte(b)})
		if got, _ := UnescapeOutput(escape34(v)); got != v {
			t.Fatalf("byte %#x: escaped %q, decoded %q", b, escape34(v), got)
		}
	}
}

func TestReplyText(t *testing.T) {
	r := Reply{Lines: []string{`a\001`, "b"}}
	if got, amb := r.Text(); got != "a\\001\nb" || amb {
		t.Fatalf("raw reply: %q %v", got, amb)
	}
	r.Escaped = true
	if got, amb := r.Text(); got != "a\x01\nb" || !amb {
		t.Fatalf("escaped reply: %q %v", got, amb)
	}
}

func TestEscapesOutputByVersion(t *testing.T) {
	for v, want := range map[string]bool{
		"3.3a": false, "3.2": false, "3.4": true, "next-3.4": true, "3.5": true, "3.5a": true,
		"next-3.5": true, "3.6": false, "3.6a": false, "3.7c": false, "next-3.8": false, "master": false,
	} {
		if got := (ServerInfo{Version: v}).EscapesOutput(); got != want {
			t.Errorf("%s: EscapesOutput %v, want %v", v, got, want)
		}
	}
}

func TestParseIdentity(t *testing.T) {
	info, err := parseIdentity([]string{"42\t1700000000\t3.5a\t$3\t/tmp/a\\001b\tc"})
	if err != nil {
		t.Fatal(err)
	}
	want := ServerInfo{ServerLife: ServerLife{Socket: "/tmp/a\x01b\tc", PID: 42, StartTime: 1700000000},
		Version: "3.5a", ControlSessionID: "$3"}
	if info != want {
		t.Fatalf("3.5a: %+v", info)
	}
	// 3.3a and 3.7c print the path raw: nothing is decoded; a newline in
	// the path splits the reply into two lines.
	info, err = parseIdentity([]string{"42\t1700000000\t3.7c\t$3\t/tmp/a\\001b", "c"})
	if err != nil || info.Socket != "/tmp/a\\001b\nc" {
		t.Fatalf("3.7c: %+v %v", info, err)
	}
	for _, bad := range [][]string{nil, {"42\t1\t3.3a\t$3"}, {"x\t1\t3.3a\t$3\t/s"}, {"42\t1\t3.3a\t@3\t/s"}} {
		if _, err := parseIdentity(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestCorpus37 reads the tmux 3.7c transcripts (testdata/corpus/4[6-9]-*):
// what changed for a control client since 3.3a, as the parser sees it.
func TestCorpus37(t *testing.T) {
	read := func(name string) []Record {
		t.Helper()
		data, err := os.ReadFile(filepath.Join("testdata/corpus", name+".out"))
		if err != nil {
			t.Fatal(err)
		}
		return parseAll(data)
	}
	// A configuration error is a %config-error notification before
	// anything else (3.3a: the pane's view mode, corpus/24).
	if r := read("46-config-error-3.7c")[0]; r.Kind != RecordNotification || r.Name != NoteConfigError ||
		!strings.HasSuffix(r.Text, "unknown command: bogus-command") {
		t.Fatalf("46: %+v", r)
	}
	// Paste buffers are notified, outside blocks (3.3a: nothing, corpus/35);
	// replacing a buffer is a delete and a change.
	var names []string
	for _, r := range read("47-paste-buffer-notifications-3.7c") {
		if r.Kind == RecordNotification && strings.HasPrefix(r.Name, "paste-buffer-") {
			names = append(names, r.Name+" "+r.Text)
		}
	}
	want := []string{NotePasteBufferChanged + " buf1", NotePasteBufferDeleted + " buf1",
		NotePasteBufferChanged + " buf1", NotePasteBufferDeleted + " buf1"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("47: %q", names)
	}
	// Command output is raw again; only %message (display-message without
	// -p, written inside its block) is escaped.
	var lines []string
	for _, r := range read("48-command-output-raw-3.7c") {
		if r.Kind == RecordReply && r.Reply.Flags == 1 {
			lines = append(lines, r.Reply.Lines...)
		}
	}
	value := "a\x01b\x1bc\x7fd\xffe\\033f\tg\u00e9h"
	if len(lines) != 4 || lines[0] != value || lines[1] != value || lines[2] != "ctl:"+value ||
		lines[3] != "%message m:"+escape34(value) {
		t.Fatalf("48: %q", lines)
	}
	// 3.7 refuses a session name with a control byte (3.3a stored it
	// escaped, corpus/13).
	var errs []string
	for _, r := range read("49-control-bytes-in-names-refused-3.7c") {
		if r.Kind == RecordReply && r.Error {
			errs = append(errs, r.Reply.Lines...)
		}
	}
	if len(errs) != 2 || !strings.HasPrefix(errs[0], "invalid session name: tab\t") {
		t.Fatalf("49: %q", errs)
	}
}
