package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestInputLimitsEdge: requests exactly at docs/contract.md's input limits are
// accepted and carried byte-for-byte (no off-by-one refusals, no truncation).
func TestInputLimitsEdge(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	out := t.TempDir()
	script := `for a in "$@"; do printf '%s\n' "${#a}"; done > "$OUT/lens.tmp"; env > "$OUT/env.tmp"; ` +
		`mv "$OUT/env.tmp" "$OUT/env"; mv "$OUT/lens.tmp" "$OUT/lens"; exec sleep 1000`
	base := []string{"/bin/sh", "-c", script, "sh"}
	arg := strings.Repeat("a", 16<<10)
	cases := []struct {
		name     string
		argv     []string
		env      map[string]string
		label    string
		id       string
		wantLens []int // ${#a} of each agent argument after base
	}{
		{name: "128-byte session id", argv: base, id: strings.Repeat("s", 128)},
		{name: "256-byte label", argv: base, label: strings.Repeat("é", 128)},
		{name: "256 argv", argv: append(base, repeatList("x", 252)...), wantLens: repeatInts(1, 252)},
		{name: "16 KiB arg, 64 KiB argv", argv: append(base[:3:3], arg[:16<<10-len(script)-100], arg, arg, arg[:16<<10-100]),
			wantLens: []int{16 << 10, 16 << 10, 16<<10 - 100}},
		{name: "256 env, 16 KiB value", argv: base, env: envWithBig(256, 16<<10)},
	}
	for i, c := range cases {
		dir := filepath.Join(out, strconv.Itoa(i))
		os.Mkdir(dir, 0o700)
		env := map[string]string{"OUT": dir}
		for k, v := range c.env {
			env[k] = v
		}
		if len(c.env) == 256 {
			delete(env, "V0") // OUT takes its place: 256 entries in all
		}
		id := c.id
		if id == "" {
			id = fmt.Sprintf("edge-%d", i)
		}
		body, _ := json.Marshal(map[string]any{"state_dir": t.TempDir(), "session_id": id,
			"argv": c.argv, "env": env, "label": c.label})
		status, b := d.Do(t, "POST", "/v1/sessions", string(body), nil)
		var a Answer
		if status != 201 || decodeOne(string(b), &a) != nil || a.Session == nil {
			t.Errorf("%s: %d %s, want 201 published", c.name, status, clip(string(b)))
			continue
		}
		d.NoteSession(t)
		if a.Session.Label != c.label || a.Session.SessionID != id {
			t.Errorf("%s: label/session_id not carried as given", c.name)
		}
		checkAgentGot(t, c.name, dir, c.wantLens, env)
	}
}

// checkAgentGot waits for the agent's report and compares argument lengths and
// environment values with what was asked.
func checkAgentGot(t *testing.T, name, dir string, wantLens []int, env map[string]string) {
	t.Helper()
	WaitFor(t, waitDeadline, name+": the agent's report", func() error {
		_, err := os.Stat(filepath.Join(dir, "lens"))
		return err
	})
	lens, _ := os.ReadFile(filepath.Join(dir, "lens"))
	var got []int
	for _, f := range strings.Fields(string(lens)) {
		n, _ := strconv.Atoi(f)
		got = append(got, n)
	}
	if wantLens != nil && fmt.Sprint(got) != fmt.Sprint(wantLens) {
		t.Errorf("%s: agent argument lengths %v, want %v", name, clipInts(got), clipInts(wantLens))
	}
	envOut, _ := os.ReadFile(filepath.Join(dir, "env"))
	have := map[string]string{}
	for _, l := range strings.Split(string(envOut), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			have[k] = v
		}
	}
	for k, v := range env {
		if have[k] != v {
			t.Errorf("%s: agent env %s has %d bytes, want %d", name, k, len(have[k]), len(v))
		}
	}
}

func repeatInts(v, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func clipInts(v []int) string {
	if len(v) > 8 {
		return fmt.Sprintf("%v… (%d)", v[:8], len(v))
	}
	return fmt.Sprint(v)
}

func envWithBig(n, big int) map[string]string {
	env := manyEnv(n)
	env["V1"] = strings.Repeat("v", big)
	return env
}
