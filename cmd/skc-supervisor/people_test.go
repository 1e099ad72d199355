package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/creack/pty"

	"github.com/skc-supervisor/skc-supervisor/home"
)

func TestVersionString(t *testing.T) {
	for _, c := range []struct {
		v    VersionInfo
		want string
	}{
		{VersionInfo{Version: "v0.2.0"}, "v0.2.0"},
		{VersionInfo{Version: "(devel)", Revision: "3f2a9c1e04b7aa55", Modified: true}, "(devel) 3f2a9c1e04b7+dirty"},
		{VersionInfo{Version: "(devel)", Revision: "3f2a9c1e04b7aa55"}, "(devel) 3f2a9c1e04b7"},
		{VersionInfo{Version: "(devel)"}, "(devel)"},
	} {
		if got := c.v.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.v, got, c.want)
		}
	}
}

func TestVersionJSON(t *testing.T) {
	code, stdout, _ := run(t, "version", "--json", "--tmux", "/nonexistent/tmux")
	var m map[string]any
	if code != 0 || json.Unmarshal([]byte(stdout), &m) != nil {
		t.Fatalf("exit %d %s", code, stdout)
	}
	for _, k := range []string{"version", "revision", "modified", "go"} {
		if _, ok := m[k]; !ok {
			t.Errorf("version --json lacks %q: %s", k, stdout)
		}
	}
	if _, ok := m["tmux"]; ok {
		t.Errorf("a tmux that does not run has no version: %s", stdout)
	}
}

func TestTryItQuotes(t *testing.T) {
	var b bytes.Buffer
	tryIt(&b, "./bin/skc-supervisor", home.Paths{Home: "/h/it's", RuntimeDir: "/r"}, true, false)
	if !strings.Contains(b.String(), `./bin/skc-supervisor --home '/h/it'\''s' ls`) || !strings.Contains(b.String(), "-- sh -c 'echo hello; exec sleep 600'") {
		t.Fatalf("%s", b.String())
	}
}

// TestServeLogger: JSON lines, debug included, when stderr is not a terminal;
// the console format at info and above on a terminal.
func TestServeLogger(t *testing.T) {
	var b bytes.Buffer
	log, forPeople := serveLogger(&b)
	log.Debug().Msg("dbg")
	log.Info().Str("k", "v").Msg("hello")
	if forPeople || !strings.Contains(b.String(), `"message":"dbg"`) || !strings.Contains(b.String(), `"k":"v"`) {
		t.Fatalf("not a terminal: %q", b.String())
	}

	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skip(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	log, forPeople = serveLogger(tty)
	log.Debug().Msg("dbg")
	log.Info().Str("k", "v").Msg("hello")
	buf := make([]byte, 4096)
	n, _ := ptmx.Read(buf)
	out := string(buf[:n])
	if !forPeople || strings.Contains(out, "dbg") || strings.Contains(out, `"message"`) || !strings.Contains(out, "hello") {
		t.Fatalf("a terminal: %v %q", forPeople, out)
	}
}
