package verdict

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/creack/pty"
)

func TestOpsLoggerJSON(t *testing.T) {
	var buf bytes.Buffer
	log := NewOpsLogger(&buf, "")
	log.Debug().Msg("hidden at info")
	log.Info().Str(FieldPath, "/x").Int64(FieldSequence, 3).Msg("hello")
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("%q: %v", buf.String(), err)
	}
	if m["message"] != "hello" || m["path"] != "/x" || m["level"] != "info" || m["time"] == nil {
		t.Fatalf("%v", m)
	}
	buf.Reset()
	dl := NewOpsLogger(&buf, "DEBUG")
	dl.Debug().Msg("shown")
	if !strings.Contains(buf.String(), "shown") {
		t.Fatal("debug level")
	}
}

func TestOpsLoggerConsoleOnTerminal(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if !IsTerminal(tty) {
		t.Fatal("pty not seen as a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) || IsTerminal(&bytes.Buffer{}) {
		t.Fatal("file or buffer seen as a terminal")
	}
	tl := NewOpsLogger(tty, "info")
	tl.Info().Str(FieldPath, "/x").Msg("hello")
	buf := make([]byte, 4096)
	n, err := ptmx.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	out := string(buf[:n])
	if strings.HasPrefix(strings.TrimSpace(out), "{") || !strings.Contains(out, "hello") {
		t.Fatalf("not console output: %q", out)
	}
}

func TestValidate(t *testing.T) {
	for _, r := range exampleRecords() {
		if err := r.Validate(); err != nil {
			t.Errorf("%v", err)
		}
	}
	bad := Record{Action: "create", Outcome: "meh", Verdict: "killed", Code: "nope"}
	err := bad.Validate()
	if err == nil || CodeOf(err) != CodeInvalidRequest || !strings.Contains(err.Error(), `skc.verdict "killed"`) {
		t.Fatalf("%v", err)
	}
}
