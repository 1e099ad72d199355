package tmuxctl

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRoundTripHostileValues sends hostile values through a real tmux with
// set-option and reads them back with show-options -v: nothing may be
// expanded or run (`#(touch …)` must not create its file), and Reply.Text
// must give back every byte string without NUL byte for byte — on every
// version for a value without a backslash, and on 3.4/3.5 (which escape
// command output without escaping the backslash) it must at least say
// "ambiguous" whenever it cannot.
func TestRoundTripHostileValues(t *testing.T) {
	cfg := testConfig(t)
	c := dialT(t, cfg)
	drain(c)
	sid := c.Info().ControlSessionID
	marker := filepath.Join(filepath.Dir(cfg.Socket), "pwned")
	values := append(hostileValues(), "#(touch "+marker+")", "$(touch "+marker+")", "`touch "+marker+"`")
	for b := 1; b < 256; b++ {
		values = append(values, string([]byte{byte(b)}))
	}
	big := make([]byte, 100<<10)
	for i := range big {
		big[i] = byte(1 + i%255)
	}
	values = append(values, string(big))
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 50; i++ {
		v := make([]byte, 1+r.IntN(64))
		for j := range v {
			v[j] = byte(1 + r.IntN(255))
		}
		values = append(values, string(v))
	}
	unsure := 0
	for i, v := range values {
		// A trailing "." keeps a CR out of the last position before LF, which
		// the line parser strips by contract; leading bytes are untouched.
		want := v + "."
		if _, err := c.Command(bg(), "set-option", "-t", sid, "--", "@skc-test", want); err != nil {
			t.Fatalf("value %d %q: set: %v", i, short(v), err)
		}
		rep, err := c.Command(bg(), "show-options", "-t", sid, "-v", "--", "@skc-test")
		if err != nil {
			t.Fatalf("value %d %q: show: %v", i, short(v), err)
		}
		got, ambiguous := rep.Text()
		switch {
		case got == want:
		case !ambiguous || !strings.Contains(want, `\`):
			t.Fatalf("value %d: sent %q, got back %q (tmux %s, escaped %v, ambiguous %v)",
				i, short(want), short(got), c.Info().Version, rep.Escaped, ambiguous)
		default:
			unsure++
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a value was executed by tmux")
	}
	t.Logf("tmux %s: %d hostile values round-tripped, %d reported ambiguous", c.Info().Version, len(values)-unsure, unsure)
}

// TestCommandOutputEscapingPerVersion pins ServerInfo.EscapesOutput to what
// the tmux under test really does: a value with control bytes, DEL, a stray
// UTF-8 byte, a valid UTF-8 character and literal backslash text is printed
// raw by 3.3a and 3.6+, and escaped by 3.4/3.5 exactly as escape.go says.
func TestCommandOutputEscapingPerVersion(t *testing.T) {
	c := dialT(t, testConfig(t))
	drain(c)
	sid := c.Info().ControlSessionID
	value := "a\x01b\x1bc\x7fd\xffe\\033f\tg\rh\u00e9i\\x."
	escaped := `a\001b\033c\177d\377e\033f` + "\tg" + `\rh` + "\u00e9i\\x."
	if _, err := c.Command(bg(), "set-option", "-t", sid, "@skc-test", value); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"show-options", "-t", sid, "-v", "@skc-test"},
		{"display-message", "-p", "-t", sid, "#{@skc-test}"},
		{"list-sessions", "-F", "#{@skc-test}", "-f", "#{==:#{session_id}," + sid + "}"},
	} {
		rep, err := c.Command(bg(), cmd...)
		if err != nil {
			t.Fatal(err)
		}
		raw := strings.Join(rep.Lines, "\n")
		want := value
		if c.Info().EscapesOutput() {
			want = escaped
		}
		if raw != want || rep.Escaped != c.Info().EscapesOutput() {
			t.Fatalf("tmux %s, %s: printed %q (escaped %v), want %q", c.Info().Version, cmd[0], raw, rep.Escaped, want)
		}
		// The literal `\033` text makes the escaped form ambiguous; Text
		// decodes it as ESC and says so.
		got, ambiguous := rep.Text()
		if ambiguous != c.Info().EscapesOutput() || (!ambiguous && got != value) {
			t.Fatalf("tmux %s, %s: Text %q ambiguous %v", c.Info().Version, cmd[0], got, ambiguous)
		}
	}
	t.Logf("tmux %s escapes command output: %v", c.Info().Version, c.Info().EscapesOutput())
}
