package tmuxctl

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRoundTripHostileValues sends hostile values through a real tmux with
// set-option and reads them back with show-options -v: every byte string
// without NUL must come back byte for byte, and nothing may be expanded or
// run (`#(touch …)` must not create its file).
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
		if got := strings.Join(rep.Lines, "\n"); got != want {
			t.Fatalf("value %d: sent %q, got back %q", i, short(want), short(got))
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a value was executed by tmux")
	}
	t.Logf("%d hostile values round-tripped", len(values))
}
