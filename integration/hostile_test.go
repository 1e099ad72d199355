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

// body is a valid create request body with overrides applied (a nil value
// deletes the key).
func body(stateDir, id string, over map[string]any) string {
	m := map[string]any{"state_dir": stateDir, "session_id": id, "argv": []string{"sleep", "1000"}}
	for k, v := range over {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func manyEnv(n int) map[string]string {
	env := map[string]string{}
	for i := range n {
		env["V"+strconv.Itoa(i)] = "x"
	}
	return env
}

func repeatList(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestHostileHTTP: malformed and out-of-limit create requests on raw HTTP each
// get a 4xx with a code (and the field), leave no trace, and the daemon stays
// healthy with an intact fence database.
func TestHostileHTTP(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	sd := t.TempDir()
	big := strings.Repeat("x", 17<<10)
	cases := []struct {
		name, body string
		status     []int
		field      string
	}{
		{"relative state_dir", body("rel/dir", "h1", nil), []int{400}, "state_dir"},
		{"dotdot relative", body("../../etc", "h1", nil), []int{400}, "state_dir"},
		{"NUL in state_dir", body(sd+"/a\x00b", "h1", nil), []int{400}, "state_dir"},
		{"newline in state_dir", body(sd+"/a\nb", "h1", nil), []int{400}, "state_dir"},
		{"CR in state_dir", body(sd+"/a\rb", "h1", nil), []int{400}, "state_dir"},
		{"long state_dir", body("/"+strings.Repeat("d", 1100), "h1", nil), []int{400}, "state_dir"},
		{"relative state_file", body(sd, "h1", map[string]any{"state_file": "x.jsonl"}), []int{400}, "state_file"},
		{"relative cwd", body(sd, "h1", map[string]any{"cwd": "."}), []int{400}, "cwd"},
		{"empty session_id", body(sd, "", nil), []int{400}, "session_id"},
		{"dot session_id", body(sd, ".hidden", nil), []int{400}, "session_id"},
		{"dash session_id", body(sd, "-rf", nil), []int{400}, "session_id"},
		{"slash session_id", body(sd, "a/b", nil), []int{400}, "session_id"},
		{"format session_id", body(sd, "#{pid}", nil), []int{400}, "session_id"},
		{"shell session_id", body(sd, "a;touch x", nil), []int{400}, "session_id"},
		{"long session_id", body(sd, strings.Repeat("a", 129), nil), []int{400}, "session_id"},
		{"no argv", body(sd, "h1", map[string]any{"argv": nil}), []int{400}, "argv"},
		{"empty argv", body(sd, "h1", map[string]any{"argv": []string{}}), []int{400}, "argv"},
		{"257 argv", body(sd, "h1", map[string]any{"argv": repeatList("a", 257)}), []int{400}, "argv"},
		{"17 KiB arg", body(sd, "h1", map[string]any{"argv": []string{"echo", big}}), []int{400}, "argv"},
		{"65 KiB argv", body(sd, "h1", map[string]any{"argv": repeatList(strings.Repeat("y", 13<<10), 5)}), []int{400}, "argv"},
		{"NUL in argv", body(sd, "h1", map[string]any{"argv": []string{"echo", "a\x00b"}}), []int{400}, "argv"},
		{"257 env", body(sd, "h1", map[string]any{"env": manyEnv(257)}), []int{400}, "env"},
		{"10000 env", body(sd, "h1", map[string]any{"env": manyEnv(10000)}), []int{400}, "env"},
		{"bad env name", body(sd, "h1", map[string]any{"env": map[string]string{"A;B": "1"}}), []int{400}, "env"},
		{"digit env name", body(sd, "h1", map[string]any{"env": map[string]string{"1A": "1"}}), []int{400}, "env"},
		{"NUL env value", body(sd, "h1", map[string]any{"env": map[string]string{"A": "a\x00"}}), []int{400}, "env"},
		{"17 KiB env value", body(sd, "h1", map[string]any{"env": map[string]string{"A": big}}), []int{400}, "env"},
		{"long label", body(sd, "h1", map[string]any{"label": strings.Repeat("l", 257)}), []int{400}, "label"},
		{"newline label", body(sd, "h1", map[string]any{"label": "a\nb"}), []int{400}, "label"},
		{"escape label", body(sd, "h1", map[string]any{"label": "\x1b[31mred"}), []int{400}, "label"},
		{"1 MiB label", body(sd, "h1", map[string]any{"label": strings.Repeat("l", 1<<20)}), []int{413}, ""},
		{"argv string", body(sd, "h1", map[string]any{"argv": "sleep 1000"}), []int{400}, ""},
		{"session_id number", body(sd, "h1", map[string]any{"session_id": 5}), []int{400}, ""},
		{"env list", body(sd, "h1", map[string]any{"env": []string{"A=1"}}), []int{400}, ""},
		{"wait_ms string", body(sd, "h1", map[string]any{"wait_ms": "soon"}), []int{400}, ""},
		{"truncated", body(sd, "h1", nil)[:20], []int{400}, ""},
		{"empty body", "", []int{400}, ""},
		{"null", "null", []int{400}, ""},
		{"array", "[]", []int{400}, ""},
		{"not JSON", "state_dir=/tmp", []int{400}, ""},
		{"two documents", body(sd, "h1", nil) + body(sd, "h2", nil), []int{400}, ""},
	}
	for _, c := range cases {
		status, b := d.Do(t, "POST", "/v1/sessions", c.body, nil)
		var a Answer
		err := decodeOne(string(b), &a)
		ok := false
		for _, s := range c.status {
			ok = ok || s == status
		}
		if !ok || err != nil || a.Error == nil || a.Error.Code == "" || (c.field != "" && a.Field() != c.field) ||
			(status == 400 && (a.Error.Code != "invalid_request" || a.Status != "invalid")) {
			t.Errorf("%s: got %d %s, want %v, status invalid, a code, field %q", c.name, status, clip(string(b)), c.status, c.field)
		}
	}
	// An unknown field is refused or ignored, never a server error.
	status, b := d.Do(t, "POST", "/v1/sessions", body(sd, "unknown-field", map[string]any{"bogus": 1}), nil)
	if status != 400 && status != 201 {
		t.Errorf("unknown field: %d %s, want 400 or 201", status, b)
	}
	if status == 201 {
		d.NoteSession(t)
		d.CLI(t, "kill", "--state-dir", sd, "--session-id", "unknown-field")
	}
	if ents, _ := os.ReadDir(sd); len(ents) != 0 {
		t.Errorf("refused creates left %d entries in state_dir (refusal must leave no trace)", len(ents))
	}
	checkHealthy(t, d)
}

// checkHealthy: the daemon answers, creates, stops cleanly, and the fence
// database passes PRAGMA integrity_check.
func checkHealthy(t *testing.T, d *Daemon) {
	t.Helper()
	if d.Exited() {
		t.Fatalf("daemon died: %v", d.state)
	}
	s := d.MustCreate(t, NewSpec(t, "healthy"), "published")
	if r := d.CLI(t, "kill", "--json", s.Name); r.Code != 0 {
		t.Errorf("kill: want exit 0\n%s", r)
	}
	d.Stop(t)
	integrityCheck(t, filepath.Join(d.Dir, "fence.sqlite"))
}

// hostile is a string of everything that must never be expanded or executed.
func hostile(pwn string) string {
	return "#{pid} #{session_name} #(touch " + pwn + ") $HOME ${HOME} `id` $(id) 'sq' \"dq\" ; & | \\ ~ {a,b} *?[x] é 日本"
}

// TestHostileCarried: hostile strings within the limits are carried byte-for-byte
// to the agent's argv, env and cwd and shown back as given; nothing is executed.
func TestHostileCarried(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	pwn := filepath.Join(os.TempDir(), fmt.Sprintf("skcpwn-%d", os.Getpid()))
	os.Remove(pwn)
	evil := hostile(pwn)
	dir := filepath.Join(t.TempDir(), "d #{pid} #(touch skcpwn) $HOME 'q' \"dq\" ; é")
	out := t.TempDir()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	argv1 := evil + "\n\ttab\x01ctl"
	envVal := evil + "\nline2"
	spec := Spec{StateDir: dir, SessionID: "hostile-1", Cwd: dir, Label: evil,
		Env: []string{"OUT=" + out, "HOSTILE_VAL=" + envVal},
		Argv: []string{"/bin/sh", "-c",
			`printf %s "$1" > "$OUT/argv"; printf %s "$HOSTILE_VAL" > "$OUT/env"; pwd -P > "$OUT/pwd"; : > "$OUT/done"; exec sleep 1000`,
			"sh", argv1}}
	s := d.MustCreate(t, spec, "published")
	WaitFor(t, waitDeadline, "the agent to write what it got", func() error {
		_, err := os.Stat(filepath.Join(out, "done"))
		return err
	})
	for file, want := range map[string]string{"argv": argv1, "env": envVal, "pwd": dir + "\n"} {
		got, _ := os.ReadFile(filepath.Join(out, file))
		if string(got) != want {
			t.Errorf("agent's %s: %q, want byte-for-byte %q", file, got, want)
		}
	}
	r := d.CLI(t, "show", "--json", s.Name)
	var shown struct {
		Session Session `json:"session"`
	}
	mustJSON(t, r, &shown)
	if shown.Session.Label != evil || shown.Session.StateDir != dir || shown.Session.StateFile != dir+"/hostile-1.jsonl" {
		t.Errorf("show: label %q state_dir %q state_file %q, want them byte-for-byte", shown.Session.Label, shown.Session.StateDir, shown.Session.StateFile)
	}
	v := d.WaitVerdict(t, "published verdict", func(v Verdict) bool { return v.SKC.Verdict == "published" })
	if v.SKC.Identity == nil || v.SKC.Identity.StateDir != dir {
		t.Errorf("verdict identity %s, want state_dir byte-for-byte", v)
	}
	d.MustCreate(t, spec, "existing")
	if _, err := os.Stat(pwn); err == nil {
		t.Errorf("%s exists: a #(…) was executed", pwn)
	}
	for _, where := range []string{dir, d.Dir, "/", serverCwd(d.Home)} {
		if _, err := os.Stat(filepath.Join(where, "skcpwn")); err == nil {
			t.Errorf("%s/skcpwn exists: a #(…) in a path was executed", where)
		}
	}
	checkHealthy(t, d)
}

func serverCwd(h *Home) string {
	pid, ok := h.liveServerPID()
	if !ok {
		return "/"
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		return "/"
	}
	return cwd
}

// TestHostileCLI: the CLI resolves relative paths against its working directory,
// canonicalises `..`, and refuses out-of-limit input with exit 2 and the field.
func TestHostileCLI(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	base := t.TempDir()
	os.MkdirAll(filepath.Join(base, "a"), 0o700)
	for _, c := range []struct{ arg, want string }{
		{"rel/x", filepath.Join(base, "rel/x")},
		{"a/../b", filepath.Join(base, "b")},
	} {
		spec := Spec{StateDir: c.arg, SessionID: "rel", Argv: []string{"sleep", "1000"}}
		r := d.CLIWith(t, CLIOpts{Dir: base}, spec.Args()...)
		var a Answer
		mustJSON(t, r, &a)
		d.NoteSession(t)
		if r.Code != 0 || a.Session == nil || a.Session.StateDir != c.want {
			t.Errorf("--state-dir %q from %s: want state_dir %q\n%s", c.arg, base, c.want, r)
		} else {
			d.CLI(t, "kill", a.Session.Name)
		}
	}
	// --state-file and --cwd are resolved the same way.
	os.MkdirAll(filepath.Join(base, "work"), 0o700)
	rel := Spec{StateDir: base, SessionID: "relfile", StateFile: "f.jsonl", Cwd: "work", Argv: []string{"sleep", "1000"}}
	r := d.CLIWith(t, CLIOpts{Dir: base}, rel.Args()...)
	var ra Answer
	mustJSON(t, r, &ra)
	d.NoteSession(t)
	if r.Code != 0 || ra.Session == nil || ra.Session.StateFile != filepath.Join(base, "f.jsonl") {
		t.Errorf("relative --state-file: want %s\n%s", filepath.Join(base, "f.jsonl"), r)
	} else {
		if cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", waitAgent(t, ra.Session.PanePID, "sleep"))); cwd != filepath.Join(base, "work") {
			t.Errorf("relative --cwd: agent runs in %q, want %s", cwd, filepath.Join(base, "work"))
		}
		d.CLI(t, "kill", ra.Session.Name)
	}
	spec := NewSpec(t, "cli-bad")
	tooMany := spec
	tooMany.Env = nil
	for i := range 10000 {
		tooMany.Env = append(tooMany.Env, "V"+strconv.Itoa(i)+"=x")
	}
	for _, c := range []struct {
		name  string
		spec  func(Spec) Spec
		field string
	}{
		{"format session id", func(s Spec) Spec { s.SessionID = "#{pid}"; return s }, "session_id"},
		{"bad env name", func(s Spec) Spec { s.Env = []string{"A;B=1"}; return s }, "env"},
		{"env without =", func(s Spec) Spec { s.Env = []string{"JUSTNAME"}; return s }, "env"},
		{"10000 env", func(Spec) Spec { return tooMany }, "env"},
		{"newline label", func(s Spec) Spec { s.Label = "a\nb"; return s }, "label"},
		{"non-UTF-8 label", func(s Spec) Spec { s.Label = "a\xffb"; return s }, "label"},
		{"newline state dir", func(s Spec) Spec { s.StateDir += "/a\nb"; return s }, "state_dir"},
		{"long cwd", func(s Spec) Spec { s.Cwd = "/" + strings.Repeat("c", 1100); return s }, "cwd"},
	} {
		r := d.CLI(t, c.spec(spec).Args()...)
		t.Run(c.name, func(t *testing.T) { expectError(t, r, 2, "invalid", "invalid_request", c.field) })
	}
	if n := len(d.AgentSessions(t)); n != 0 {
		t.Errorf("%d agent sessions left after refused creates", n)
	}
	checkHealthy(t, d)
}

// TestNonUTF8Argv: argv may hold any byte but NUL; a non-UTF-8 argument is either
// refused (exit 2, field argv) or reaches the agent byte-for-byte, never mangled
// (e.g. into U+FFFD by a JSON encoder).
func TestNonUTF8Argv(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	out := filepath.Join(t.TempDir(), "argv")
	spec := NewSpec(t, "non-utf8")
	spec.Env = []string{"OUT=" + out}
	spec.Argv = []string{"/bin/sh", "-c", `printf %s "$1" > "$OUT.tmp"; mv "$OUT.tmp" "$OUT"; exec sleep 1000`, "sh", "a\xff\xfeb"}
	r, a := d.Create(t, spec)
	if r.Code == 2 {
		expectError(t, r, 2, "invalid", "invalid_request", "argv")
		return
	}
	if r.Code != 0 || a.Status != "published" {
		t.Fatalf("want published or exit 2\n%s", r)
	}
	WaitFor(t, waitDeadline, "the agent's argv file", func() error { _, err := os.Stat(out); return err })
	if got, _ := os.ReadFile(out); string(got) != "a\xff\xfeb" {
		t.Errorf("agent got argv[1] %q, want %q byte-for-byte", got, "a\xff\xfeb")
	}
}

// TestCanonicalIdentity: state_dir is canonicalised (realpath where it exists),
// so a symlink, a trailing slash or a "." names the same identity: one session.
func TestCanonicalIdentity(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	base := t.TempDir()
	real := filepath.Join(base, "real")
	link := filepath.Join(base, "link")
	os.Mkdir(real, 0o700)
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	spec := Spec{StateDir: link, SessionID: "canon", Argv: []string{"sleep", "1000"}}
	first := d.MustCreate(t, spec, "published")
	if first.StateDir != real || first.StateFile != filepath.Join(real, "canon.jsonl") {
		t.Errorf("state_dir %q state_file %q, want the realpath %s", first.StateDir, first.StateFile, real)
	}
	for _, alias := range []string{real, real + "/", real + "/.", link + "/../real"} {
		spec.StateDir = alias
		if s := d.MustCreate(t, spec, "existing"); s.Name != first.Name {
			t.Errorf("--state-dir %q answered %s, want the existing %s", alias, s.Name, first.Name)
		}
	}
	if n := len(d.AgentSessions(t)); n != 1 {
		t.Errorf("%d agent sessions, want 1", n)
	}
}

// TestUnresolvedSymlinkRefused: a state_dir that passes through a symlink
// loop (or a dangling link) is refused invalid_request naming the field, by
// create — before it is admitted: no verdict — and by every lookup alike;
// once the loop were fixed it would name another directory, and one
// directory would be two identities.
func TestUnresolvedSymlinkRefused(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	base := t.TempDir()
	l1, l2, dangling := filepath.Join(base, "l1"), filepath.Join(base, "l2"), filepath.Join(base, "dangling")
	for _, l := range [][2]string{{l2, l1}, {l1, l2}, {filepath.Join(base, "missing"), dangling}} {
		if err := os.Symlink(l[0], l[1]); err != nil {
			t.Fatal(err)
		}
	}
	before := d.CLI(t, "verdicts").Stdout
	for _, dir := range []string{filepath.Join(l1, "sub"), filepath.Join(l2, "a", "b"), filepath.Join(dangling, "x")} {
		r := d.CLI(t, "create", "--state-dir", dir, "--session-id", "s", "--json", "--", "sleep", "1000")
		var a Answer
		mustJSON(t, r, &a)
		if r.Code != 2 || a.Error == nil || a.Error.Code != "invalid_request" || a.Error.Details["field"] != "state_dir" {
			t.Fatalf("create under %s: %s", dir, r)
		}
		for _, verb := range []string{"show", "kill", "screen"} {
			if r := d.CLI(t, verb, "--state-dir", dir, "--session-id", "s"); r.Code != 2 || !strings.Contains(r.Stderr, "(invalid_request)") {
				t.Errorf("%s under %s: %s", verb, dir, r)
			}
		}
	}
	if after := d.CLI(t, "verdicts").Stdout; after != before {
		t.Errorf("refused creates wrote verdicts:\n%s", strings.TrimPrefix(after, before))
	}
	if n := len(d.AgentSessions(t)); n != 0 {
		t.Errorf("%d agent sessions, want 0", n)
	}
}
