package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

// run runs the CLI in-process with SKC_HOME pointing at an empty directory
// (so no daemon answers) and returns exit code, stdout and stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "skcm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var out, errb bytes.Buffer
	env := map[string]string{"SKC_HOME": dir, "HOME": dir, "SKC_TMUX": tmuxtest.Bin()}
	cli := &CLI{ctx: context.Background(), stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }}
	code := cli.Main(args)
	return code, out.String(), errb.String()
}

type answer struct {
	Status string `json:"status"`
	Error  *struct {
		Code    string         `json:"code"`
		Message string         `json:"message"`
		Details map[string]any `json:"details"`
	} `json:"error"`
}

// oneJSON checks that stdout is exactly one JSON document.
func oneJSON(t *testing.T, stdout string) answer {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(stdout))
	var a answer
	if err := dec.Decode(&a); err != nil {
		t.Fatalf("stdout is not JSON: %q", stdout)
	}
	if dec.More() {
		t.Fatalf("more than one JSON document: %q", stdout)
	}
	return a
}

func TestExitCodesWithoutDaemon(t *testing.T) {
	cases := []struct {
		args  []string
		code  int
		ecode string
		field string
	}{
		{[]string{"ls", "--json"}, 69, "daemon_unreachable", ""},
		{[]string{"show", "--json", "x"}, 69, "daemon_unreachable", ""},
		{[]string{"kill", "x", "--json"}, 69, "daemon_unreachable", ""},
		{[]string{"restart", "x", "--json"}, 69, "daemon_unreachable", ""},
		{[]string{"restart", "--json"}, 2, "invalid_request", "usage"},
		{[]string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", "a", "--restart", "often", "--", "true"}, 2, "invalid_request", "restart"},
		{[]string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", "a", "--restart-burst", "0", "--", "true"}, 2, "invalid_request", "restart_burst"},
		{[]string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", "a", "--restart", "always", "--resume-arg", "x", "--restart-delay", "2s", "--", "true"}, 69, "daemon_unreachable", ""},
		{[]string{"fence", "--json"}, 69, "daemon_unreachable", ""},
		{[]string{"verdicts", "--json"}, 69, "daemon_unreachable", ""},
		{[]string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", "a", "--", "true"}, 69, "daemon_unreachable", ""},
		{[]string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", "a"}, 2, "invalid_request", "argv"},
		{[]string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", ".a", "--", "true"}, 2, "invalid_request", "session_id"},
		{[]string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", "a", "--env", "NOEQ", "--", "true"}, 2, "invalid_request", "env"},
		{[]string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", "a", "--env", "A;B=1", "--", "true"}, 2, "invalid_request", "env"},
		{[]string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", "a", "--label", "a\nb", "--", "true"}, 2, "invalid_request", "label"},
		{[]string{"create", "--json", "--bogus"}, 2, "invalid_request", "usage"},
		{[]string{"show", "--json"}, 2, "invalid_request", "usage"},
		{[]string{"show", "--json", "a", "b"}, 2, "invalid_request", "usage"},
		{[]string{"show", "--json", "--state-dir", "/s", "--session-id", "-x"}, 2, "invalid_request", "session_id"},
		{[]string{"verdicts", "--json", "--since", "-1"}, 2, "invalid_request", "since"},
		// A single-valued flag given twice is refused, not "the last wins".
		{[]string{"kill", "--json", "--state-dir", "/tmp/x", "--session-id", "a", "--session-id", "b"}, 2, "invalid_request", "session_id"},
		{[]string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", "a", "--label", "x", "--label=y", "--", "true"}, 2, "invalid_request", "label"},
		{[]string{"--home", "/tmp/x", "show", "--json", "x", "--home", "/tmp/y"}, 2, "invalid_request", "home"},
		{[]string{"show", "--json", "--json", "x"}, 69, "daemon_unreachable", ""},
		// Empty is neither a value nor the default (found outside-in: an
		// empty --home acted on the default home, --env '' was dropped).
		{[]string{"--home", "", "ls", "--json"}, 2, "invalid_request", "home"},
		{[]string{"show", "x", "--json", "--runtime-dir="}, 2, "invalid_request", "runtime_dir"},
		{[]string{"show", "x", "--json", "--tmux-config", ""}, 2, "invalid_request", "tmux_config"},
		{[]string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", "a", "--env", "", "--", "true"}, 2, "invalid_request", "env"},
		{[]string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", "a", "--env", "A=1", "--env", "B=2", "--resume-arg", "x", "--resume-arg", "y", "--", "true", "--label", "twice", "--label", "again"}, 69, "daemon_unreachable", ""},
		// Numbers are decimal: flag's own Int would read 0x3 as 3, 1_0 as 10.
		{[]string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", "a", "--restart-burst", "0x3", "--", "true"}, 2, "invalid_request", "restart_burst"},
		{[]string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", "a", "--restart-burst", "1_0", "--", "true"}, 2, "invalid_request", "restart_burst"},
		{[]string{"verdicts", "--json", "--since", "0x10"}, 2, "invalid_request", "since"},
		{[]string{"screen", "--json", "x", "--lines", "0x10"}, 2, "invalid_request", "lines"},
		// The command needs "--": without it a flag of ours would run as the
		// agent's, or the agent's as ours.
		{[]string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", "z2", "sleep", "100"}, 2, "invalid_request", "argv"},
		{[]string{"create", "--json", "--state-dir", "/tmp/x", "sleep", "100", "--session-id", "z"}, 2, "invalid_request", "argv"},
		{[]string{"create", "--json", "--wait", "soon", "--state-dir", "/tmp/x", "--session-id", "a", "--", "true"}, 2, "invalid_request", "wait"},
		{[]string{"verdicts", "--json", "--since", "20", "extra"}, 2, "invalid_request", "usage"},
		{[]string{"verdicts", "--json", "--since", "abc"}, 2, "invalid_request", "since"},
		{[]string{"fence", "--json", "extra"}, 2, "invalid_request", "usage"},
		{[]string{"fence", "forget", "--json"}, 2, "invalid_request", "host"},
		{[]string{"fence", "forget", "--json", "--host", "gone", "extra"}, 2, "invalid_request", "usage"},
		{[]string{"fence", "forget", "--json", "--host", "gone"}, 69, "daemon_unreachable", ""},
		{[]string{"version", "--json", "extra"}, 2, "invalid_request", "usage"},
		// --json anywhere before "--" makes the refusal JSON, also when the
		// flag package stopped at an earlier bad flag or at the command.
		{[]string{"create", "--state-dir", "/tmp/x", "--session-id", "a", "--wait", "soon", "--json", "--", "true"}, 2, "invalid_request", "wait"},
		{[]string{"create", "--state-dir", "/tmp/x", "--session-id", "z2", "sleep", "100", "--json"}, 2, "invalid_request", "argv"},
		{[]string{"verdicts", "--since", "abc", "--json"}, 2, "invalid_request", "since"},
		// A duration between two of the API's units is refused, not cut down.
		{[]string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", "a", "--stop-timeout", "500us", "--", "true"}, 2, "invalid_request", "stop_timeout"},
		{[]string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", "a", "--restart-interval", "1.5s", "--", "true"}, 2, "invalid_request", "restart_interval"},
		{[]string{"wait", "x", "--idle", "soon", "--json=true"}, 2, "invalid_request", "idle"},
		// Global flags may come before the verb (serve's "try it" lines).
		{[]string{"--home", "/nonexistent-skc/h", "ls", "--json"}, 69, "daemon_unreachable", ""},
		{[]string{"--runtime-dir=/nonexistent-skc/r", "--home", "/nonexistent-skc/h", "show", "x", "--json"}, 69, "daemon_unreachable", ""},
	}
	for _, c := range cases {
		code, stdout, _ := run(t, c.args...)
		a := oneJSON(t, stdout)
		if code != c.code || a.Error == nil || a.Error.Code != c.ecode {
			t.Fatalf("%q: exit %d %s, want %d %s", c.args, code, stdout, c.code, c.ecode)
		}
		if c.field != "" && a.Error.Details["field"] != c.field {
			t.Fatalf("%q: field %v, want %s", c.args, a.Error.Details["field"], c.field)
		}
		if c.field == "wait" && strings.Contains(a.Error.Message, "usage") {
			t.Fatalf("%q: a bad duration is a short message, not the usage: %s", c.args, a.Error.Message)
		}
		wantStatus := map[int]string{2: "invalid", 69: "error"}[c.code]
		if a.Status != wantStatus {
			t.Fatalf("%q: status %q, want %q", c.args, a.Status, wantStatus)
		}
	}
}

// TestSubVerbUsage: a usage error of `fence release` or `fence forget` shows
// that sub-verb's synopsis (it once showed "usage: skc-supervisor " and nothing).
func TestSubVerbUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"fence", "release", "--json", "--reservation"}, "usage: skc-supervisor fence release --reservation ID"},
		{[]string{"fence", "release", "--json", "--bogus"}, "usage: skc-supervisor fence release --reservation ID"},
		{[]string{"fence", "forget", "--json", "--host"}, "usage: skc-supervisor fence forget --host NAME"},
	} {
		code, stdout, _ := run(t, c.args...)
		a := oneJSON(t, stdout)
		if code != 2 || a.Error == nil || a.Error.Details["field"] != "usage" || !strings.Contains(a.Error.Message, c.want) {
			t.Fatalf("%q: exit %d %s; want 2 and %q", c.args, code, stdout, c.want)
		}
	}
}

// TestFenceSubVerbsTakeGlobalFlags: the global flags may come before
// "fence", between it and its sub-verb, or after the sub-verb's own flags;
// the sub-verb's flags are parsed by the sub-verb (found outside-in: `--home
// DIR fence release --reservation X` was refused "flag provided but not
// defined: -reservation").
func TestFenceSubVerbsTakeGlobalFlags(t *testing.T) {
	const h = "/nonexistent-skc/h"
	for _, args := range [][]string{
		{"--home", h, "fence", "release", "--reservation", "X", "--json"},
		{"--home", h, "fence", "forget", "--host", "h", "--json"},
		{"--json", "--home", h, "fence", "release", "--reservation", "X"},
		{"fence", "--home", h, "release", "--reservation", "X", "--json"},
		{"fence", "--json", "--home=" + h, "forget", "--host", "h"},
		{"fence", "forget", "--host", "h", "--home", h, "--json"},
	} {
		code, stdout, _ := run(t, args...)
		a := oneJSON(t, stdout)
		if code != 69 || a.Error == nil || a.Error.Code != "daemon_unreachable" || !strings.Contains(a.Error.Message, h+"/api.sock") {
			t.Errorf("%q: exit %d %s; want 69, daemon_unreachable at %s", args, code, stdout, h)
		}
	}
	code, stdout, _ := run(t, "--json", "fence", "release", "--reservation", "X")
	if a := oneJSON(t, stdout); code != 69 || a.Error == nil || a.Error.Code != "daemon_unreachable" {
		t.Errorf("--json fence release (SKC_HOME): exit %d %s; want 69", code, stdout)
	}
	code, stdout, _ = run(t, "--home", h, "fence", "--json", "release")
	if a := oneJSON(t, stdout); code != 2 || a.Error == nil || a.Error.Details["field"] != "reservation" {
		t.Errorf("fence release without --reservation: exit %d %s; want 2 naming reservation", code, stdout)
	}
}

// TestVerbHelp: VERB --help (or -h) prints that verb's usage on stdout and
// exits 0, as the bare --help does; it is not a refusal. After "--" it is the
// command's word, not ours.
func TestVerbHelp(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "--help"}, "usage: skc-supervisor create --state-dir DIR"},
		{[]string{"ls", "-h"}, "usage: skc-supervisor ls"},
		{[]string{"fence", "release", "--help"}, "usage: skc-supervisor fence release --reservation ID"},
		{[]string{"wait", "--json", "--help"}, "usage: skc-supervisor wait"},
	} {
		code, stdout, stderr := run(t, c.args...)
		if code != 0 || !strings.HasPrefix(stdout, c.want) || stderr != "" {
			t.Errorf("%q: exit %d stdout %q stderr %q; want 0 and %q", c.args, code, stdout, stderr, c.want)
		}
	}
	code, stdout, _ := run(t, "create", "--json", "--state-dir", "/tmp/x", "--session-id", "h", "--", "sh", "--help")
	if code != 69 || strings.Contains(stdout, "usage") {
		t.Errorf("create … -- sh --help: exit %d %s; want the create sent (69: no daemon here)", code, stdout)
	}
}

func TestHumanErrorsGoToStderr(t *testing.T) {
	code, stdout, stderr := run(t, "ls")
	if code != 69 || stdout != "" || !strings.Contains(stderr, "api.sock") {
		t.Fatalf("exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	code, _, stderr = run(t, "frobnicate")
	if code != 2 || !strings.Contains(stderr, "unknown verb") || !strings.Contains(stderr, "skc-supervisor create") {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
	if strings.Contains(stderr, "helper") {
		t.Fatal("the hidden helper verb is listed")
	}
}

func TestEveryVerbAcceptsHomeFlags(t *testing.T) {
	for name := range verbs {
		if name == "helper" || name == "serve" || name == "attach" {
			continue // helper's arguments belong to lifecycle; serve and attach need a daemon or tmux
		}
		args := []string{name, "--home", "/nonexistent-skc/h", "--runtime-dir", "/nonexistent-skc/r"}
		if name == "tmuxctl" {
			args = append(args, "decode")
		}
		_, _, stderr := run(t, args...)
		if strings.Contains(stderr, "not defined") {
			t.Errorf("%s refused --home/--runtime-dir: %s", name, stderr)
		}
	}
}

// TestGlobalFlagsBeforeTheVerb: `skc-supervisor --home DIR VERB …` reaches the
// same daemon as `VERB --home DIR …` (and `--json VERB` answers as `VERB
// --json`); a global flag without its value, or nothing but global flags, is
// a usage error.
func TestGlobalFlagsBeforeTheVerb(t *testing.T) {
	for _, c := range []struct {
		in, want []string
	}{
		{[]string{"--home", "/h", "ls"}, []string{"ls", "--home", "/h"}},
		{[]string{"-home=/h", "--tmux", "t", "show", "x"}, []string{"show", "-home=/h", "--tmux", "t", "x"}},
		{[]string{"ls", "--home", "/h"}, []string{"ls", "--home", "/h"}},
		{[]string{"--json", "ls"}, []string{"ls", "--json"}},
		{[]string{"--json", "--home", "/h", "ls", "-x"}, []string{"ls", "--json", "--home", "/h", "-x"}},
		{[]string{"--json=false", "ls"}, []string{"ls", "--json=false"}},
		{[]string{"--home", "/h"}, nil},
	} {
		got, err := hoistGlobals(c.in)
		if err != nil || strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("%q: %q %v, want %q", c.in, got, err, c.want)
		}
	}
	if _, err := hoistGlobals([]string{"--home"}); err == nil {
		t.Error("--home without a value accepted")
	}
	code, stdout, stderr := run(t, "--home", "/nonexistent-skc/h", "ls")
	if code != 69 || stdout != "" || !strings.Contains(stderr, "/nonexistent-skc/h/api.sock") {
		t.Fatalf("exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	if code, _, _ := run(t, "--home", "/nonexistent-skc/h"); code != 2 {
		t.Fatalf("global flags alone: exit %d, want 2", code)
	}
}

// TestJSONBeforeEveryVerb: --json before the verb is accepted by every verb
// (found outside-in: `--json output NAME`, `--json attach NAME` and `--json
// tmuxctl decode` were refused "flag provided but not defined: -json"). A verb
// with a JSON answer answers one JSON document; one without ignores it there,
// and refuses it after the verb, where it asks that verb for JSON — which
// also checks verbs[…].json against each verb's flag set.
func TestJSONBeforeEveryVerb(t *testing.T) {
	const h = "/nonexistent-skc/h"
	rest := map[string][]string{
		"create": {"--state-dir", "/tmp/x", "--session-id", "a", "--", "true"},
		"show":   {"x"}, "kill": {"x"}, "restart": {"x"}, "attach": {"x"}, "screen": {"x"},
		"send": {"x", "--", "hi"}, "output": {"x"}, "wait": {"x", "--exit"},
		"tmuxctl": {"bogus"},        // a usage error after the flags parsed: stdin is not read
		"serve":   {"--pool", "-1"}, // refused after the flags parsed: nothing starts
	}
	for name, v := range verbs {
		if v.hidden {
			continue
		}
		args := append([]string{"--json", "--home", h, name}, rest[name]...)
		code, stdout, stderr := run(t, args...)
		if strings.Contains(stdout+stderr, "not defined") {
			t.Errorf("%q: exit %d, %s%s", args, code, stdout, stderr)
		}
		if v.json {
			oneJSON(t, stdout)
			continue
		}
		if stdout != "" {
			t.Errorf("%q: stdout %q; want nothing (the error on stderr, not as JSON)", args, stdout)
		}
		if _, _, stderr := run(t, append([]string{name, "--json"}, rest[name]...)...); !strings.Contains(stderr, "not defined: -json") {
			t.Errorf("%s --json: %q; want it refused after a verb with no JSON answer", name, stderr)
		}
	}
	if code, _, stderr := run(t, "--json=maybe", "output", "x"); code != 2 || !strings.Contains(stderr, "want true or false") {
		t.Errorf("--json=maybe output x: exit %d %q; want 2", code, stderr)
	}
}

func TestVersion(t *testing.T) {
	code, stdout, _ := run(t, "version")
	if code != 0 || !strings.HasPrefix(stdout, "skc-supervisor ") || strings.Count(stdout, "\n") != 1 {
		t.Fatalf("%d %q", code, stdout)
	}
	code, stdout, _ = run(t, "version", "--json")
	var v map[string]any
	if code != 0 || json.Unmarshal([]byte(stdout), &v) != nil || v["version"] == "" {
		t.Fatalf("%d %q", code, stdout)
	}
}

func TestParseArgsInterleaved(t *testing.T) {
	cases := []struct {
		args []string
		pos  []string
		json bool
	}{
		{[]string{"NAME", "--json"}, []string{"NAME"}, true},
		{[]string{"--json", "NAME"}, []string{"NAME"}, true},
		{[]string{"a", "--home", "/h", "b"}, []string{"a", "b"}, false},
		{[]string{"--", "--json", "x"}, []string{"--json", "x"}, false},
		{[]string{"a", "--", "-b"}, []string{"a", "-b"}, false},
	}
	for _, c := range cases {
		var o opts
		fs := newFlags("show", &o, true)
		pos, err := parseArgs(fs, c.args)
		if err != nil || strings.Join(pos, "|") != strings.Join(c.pos, "|") || o.json != c.json {
			t.Errorf("%q: pos %q json %v err %v", c.args, pos, o.json, err)
		}
	}
	var o opts
	if _, err := parseArgs(newFlags("show", &o, true), []string{"--nope"}); err == nil {
		t.Fatal("unknown flag accepted")
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"skc-abc":        "skc-abc",
		"é #{x} ;'\"":    "é #{x} ;'\"",
		"a\x1b[2Jb":      `"a\x1b[2Jb"`,
		"a\nb":           `"a\nb"`,
		"a\xffb":         `"a\xffb"`,
		"a\u0085b":       `"a\u0085b"`,
		"tab\tseparated": `"tab\tseparated"`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestServeRefusesBadRuntimeDir(t *testing.T) {
	dir, _ := os.MkdirTemp("", "skcm")
	defer os.RemoveAll(dir)
	long := dir + "/" + strings.Repeat("r", 100)
	var out, errb bytes.Buffer
	env := map[string]string{"SKC_HOME": dir, "SKC_RUNTIME_DIR": long}
	cli := &CLI{ctx: context.Background(), stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }}
	code := cli.Main([]string{"serve"})
	if code != 2 || !strings.Contains(errb.String(), long+"/api.sock") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

// TestServeRefusesBadHostName: a host name outside [A-Za-z0-9._-] (flag or
// SKC_HOST) refuses the start with invalid_request before anything is made.
func TestServeRefusesBadHostName(t *testing.T) {
	dir, _ := os.MkdirTemp("", "skcm")
	defer os.RemoveAll(dir)
	for _, tc := range []struct {
		args []string
		env  string
	}{{[]string{"serve", "--host-name", "a b"}, ""}, {[]string{"serve"}, "-host"}} {
		var out, errb bytes.Buffer
		env := map[string]string{"SKC_HOME": dir, "SKC_HOST": tc.env}
		cli := &CLI{ctx: context.Background(), stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }}
		code := cli.Main(tc.args)
		if code != 2 || !strings.Contains(errb.String(), "invalid_request") || !strings.Contains(errb.String(), "host name") {
			t.Fatalf("%v SKC_HOST=%q: exit %d, stderr %q", tc.args, tc.env, code, errb.String())
		}
		if _, err := os.Stat(filepath.Join(dir, "fence.sqlite")); err == nil {
			t.Fatal("a fence was made")
		}
	}
}

// TestServeRefusesExplicitEmpty: `--host-name ""` and `--fence ""` are
// mistakes, not the defaults: refused with the field named, before anything
// is made (unset, the flags fall back to SKC_HOST / SKC_FENCE and defaults).
func TestServeRefusesExplicitEmpty(t *testing.T) {
	dir, _ := os.MkdirTemp("", "skcm")
	defer os.RemoveAll(dir)
	for _, tc := range []struct {
		args []string
		says string
	}{{[]string{"serve", "--host-name", ""}, "--host-name is empty"}, {[]string{"serve", "--fence="}, "--fence is empty"}} {
		var out, errb bytes.Buffer
		env := map[string]string{"SKC_HOME": dir}
		cli := &CLI{ctx: context.Background(), stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }}
		code := cli.Main(tc.args)
		if code != 2 || !strings.Contains(errb.String(), "invalid_request") || !strings.Contains(errb.String(), tc.says) {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", tc.args, code, out.String(), errb.String())
		}
		if _, err := os.Stat(filepath.Join(dir, "fence.sqlite")); err == nil {
			t.Fatal("a fence was made")
		}
	}
}

// TestSendTextIsNeverTheName: the words after `--` are send's TEXT; with no
// NAME before them (and no identity), send is a usage error — not a send to
// a session named by the text's first word.
func TestSendTextIsNeverTheName(t *testing.T) {
	var out, errb bytes.Buffer
	cli := &CLI{ctx: context.Background(), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	if code := cli.Main([]string{"send", "--json", "--", "hi", "there"}); code != 2 ||
		!strings.Contains(out.String(), `"field":"usage"`) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

// TestWaitRefusesZeroDurations: `wait --timeout 0s` is refused naming the
// field, as the API refuses it, never taken for a wait without end; so is
// `--idle 0s`.
func TestWaitRefusesZeroDurations(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		field string
	}{
		{[]string{"wait", "x", "--exit", "--timeout", "0s", "--json"}, `"field":"timeout"`},
		{[]string{"wait", "x", "--exit", "--timeout", "-1s", "--json"}, `"field":"timeout"`},
		{[]string{"wait", "x", "--idle", "0s", "--json"}, `"field":"idle"`},
		{[]string{"wait", "x", "--text", "a\u0085b", "--json"}, `"field":"text"`}, // C1: a control character too
	} {
		var out, errb bytes.Buffer
		cli := &CLI{ctx: context.Background(), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
		if code := cli.Main(tc.args); code != 2 || !strings.Contains(out.String(), tc.field) {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", tc.args, code, out.String(), errb.String())
		}
	}
}

// TestBadDurationsSayWhatTheyWant: every duration flag refuses a value that
// is not one with the same words, naming its field (found outside-in: `wait
// --idle soon` said only "not a valid value", `create --wait soon` what it
// wants).
func TestBadDurationsSayWhatTheyWant(t *testing.T) {
	create := []string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", "a"}
	for _, tc := range []struct {
		args  []string
		field string
	}{
		{[]string{"wait", "x", "--idle", "soon", "--json"}, "idle"},
		{[]string{"wait", "x", "--exit", "--timeout", "soon", "--json"}, "timeout"},
		{append(create, "--wait", "soon", "--", "true"), "wait"},
		{append(create, "--stop-timeout", "soon", "--", "true"), "stop_timeout"},
		{append(create, "--restart-delay", "soon", "--", "true"), "restart_delay"},
		{append(create, "--restart-interval", "soon", "--", "true"), "restart_interval"},
	} {
		code, stdout, _ := run(t, tc.args...)
		a := oneJSON(t, stdout)
		if code != 2 || a.Error == nil || a.Error.Details["field"] != tc.field ||
			!strings.HasSuffix(a.Error.Message, `"soon": want a duration such as 5s, 500ms or 1m30s`) {
			t.Errorf("%q: exit %d %s; want 2, field %s and what a duration looks like", tc.args, code, stdout, tc.field)
		}
	}
}

// TestSendTooMuchStdin: text on stdin over the limit is refused with the
// limit, not with the size of the capped read (found outside-in: 1 MiB on
// stdin was "text is 65537 bytes, more than 65536").
func TestSendTooMuchStdin(t *testing.T) {
	defer func(r io.Reader) { cliStdin = r }(cliStdin)
	cliStdin = strings.NewReader(strings.Repeat("x", 1<<20))
	code, stdout, _ := run(t, "send", "x", "--json")
	a := oneJSON(t, stdout)
	if code != 2 || a.Error == nil || a.Error.Details["field"] != "text" ||
		!strings.Contains(a.Error.Message, "more than 65536 bytes") || strings.Contains(a.Error.Message, "65537") {
		t.Fatalf("1 MiB on stdin: exit %d %s; want 2, field text, more than 65536 bytes", code, stdout)
	}
}

// TestCreateRefusesExplicitEmpty: --restart "", --cwd "" and --state-file ""
// are refused naming the field, not taken for the flag left out (found
// outside-in: `create --restart ""` created with restart never).
func TestCreateRefusesExplicitEmpty(t *testing.T) {
	for flag, field := range map[string]string{"restart": "restart", "cwd": "cwd", "state-file": "state_file"} {
		args := []string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", "a", "--" + flag, "", "--", "true"}
		code, stdout, _ := run(t, args...)
		if a := oneJSON(t, stdout); code != 2 || a.Error == nil || a.Error.Details["field"] != field {
			t.Errorf("%q: exit %d %s; want 2 naming %s", args, code, stdout, field)
		}
	}
	code, stdout, _ := run(t, "create", "--json", "--state-dir", "/tmp/x", "--session-id", "a", "--label", "", "--", "true")
	if a := oneJSON(t, stdout); code != 69 || a.Error == nil || a.Error.Code != "daemon_unreachable" {
		t.Errorf("--label \"\" (no label): exit %d %s; want the create sent (69: no daemon here)", code, stdout)
	}
}

// TestUnknownVerbAndTwiceEnv: with --json an unknown verb is the one JSON
// document (field verb); `--env A=1 --env A=2` is refused (field env), not
// the last value silently.
func TestUnknownVerbAndTwiceEnv(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		field string
	}{
		{[]string{"bogusverb", "--json"}, `"field":"verb"`},
		// --json before the verb, as --home may be: the same one document.
		{[]string{"--json", "bogusverb"}, `"field":"verb"`},
		{[]string{"--home", "/tmp/x", "--json", "bogusverb"}, `"field":"verb"`},
		{[]string{"--json", "create", "--state-dir", "/tmp/x", "--session-id", "a", "--env", "A=1", "--env", "A=2", "--", "true"}, `"field":"env"`},
		{[]string{"create", "--json", "--state-dir", "/tmp/x", "--session-id", "a", "--env", "A=1", "--env", "A=2", "--", "true"}, `"field":"env"`},
	} {
		var out, errb bytes.Buffer
		cli := &CLI{ctx: context.Background(), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
		if code := cli.Main(tc.args); code != 2 || !strings.Contains(out.String(), tc.field) {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", tc.args, code, out.String(), errb.String())
		}
	}
}

// TestServeRefusesBadTmuxConfigAndWireLog: a --tmux-config that does not
// exist (tmux would start without it, silently) and a --wire-log that is a
// symlink (it holds session names and followed output) refuse the start.
func TestServeRefusesBadTmuxConfigAndWireLog(t *testing.T) {
	dir, _ := os.MkdirTemp("", "skcm")
	defer os.RemoveAll(dir)
	link := filepath.Join(dir, "wire")
	if err := os.Symlink(filepath.Join(dir, "elsewhere"), link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"serve", "--tmux-config", filepath.Join(dir, "missing.conf")}, "tmux config"},
		{[]string{"serve", "--wire-log", link}, "wire log"},
		{[]string{"serve", "--tmux", filepath.Join(dir, "no-such-tmux")}, "tmux binary"},
	} {
		var out, errb bytes.Buffer
		env := map[string]string{"SKC_HOME": filepath.Join(dir, "home")}
		cli := &CLI{ctx: context.Background(), stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }}
		if code := cli.Main(tc.args); code != 2 || !strings.Contains(errb.String(), tc.says) {
			t.Fatalf("%v: exit %d, stderr %q", tc.args, code, errb.String())
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "elsewhere")); err == nil {
		t.Fatal("the wire log was written through its symlink")
	}
}

// TestTopLevelHelpOnStdout: `skc-supervisor --help` lists the verbs on
// stdout (exit 0), as every VERB --help prints its usage; with no verb at all
// the list is a usage error on stderr.
func TestTopLevelHelpOnStdout(t *testing.T) {
	var out, errb bytes.Buffer
	cli := &CLI{ctx: context.Background(), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	if code := cli.Main([]string{"--help"}); code != 0 || !strings.Contains(out.String(), "skc-supervisor create") || errb.Len() != 0 {
		t.Fatalf("--help: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	out.Reset()
	if code := cli.Main(nil); code != 2 || out.Len() != 0 || !strings.Contains(errb.String(), "usage:") {
		t.Fatalf("no verb: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

// TestDecimalFlag: a leading zero is decimal (the flag package's Int read
// "010" as octal 8, a burst the caller did not write).
func TestDecimalFlag(t *testing.T) {
	var d decimalFlag
	for in, want := range map[string]int64{"010": 10, "5": 5, "+7": 7, "0": 0, "-1": -1} {
		if err := d.Set(in); err != nil || int64(d) != want {
			t.Errorf("Set(%q) = %d %v, want %d", in, d, err, want)
		}
	}
	for _, in := range []string{"0x3", "1_0", "0o7", " 5", "", "1e3"} {
		if err := d.Set(in); err == nil {
			t.Errorf("Set(%q) accepted", in)
		}
	}
}
