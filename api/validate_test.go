package api

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

func ms(v int64) *int64 { return &v }

func good() CreateRequest {
	return CreateRequest{StateDir: "/nonexistent-skc/s", SessionID: "abc", Argv: []string{"sh"}}
}

func TestValidateLimits(t *testing.T) {
	cases := []struct {
		name  string
		mod   func(r *CreateRequest)
		field string // "" means valid
	}{
		{"ok", func(r *CreateRequest) {}, ""},
		{"id 128", func(r *CreateRequest) { r.SessionID = strings.Repeat("a", 128) }, ""},
		{"stop 1ms", func(r *CreateRequest) { r.StopTimeoutMS = ptr64(1) }, ""},
		{"stop 5min", func(r *CreateRequest) { r.StopTimeoutMS = ptr64(300000) }, ""},
		{"stop 0", func(r *CreateRequest) { r.StopTimeoutMS = ptr64(0) }, "stop_timeout_ms"},
		{"stop 5min+1", func(r *CreateRequest) { r.StopTimeoutMS = ptr64(300001) }, "stop_timeout_ms"},
		{"stop negative", func(r *CreateRequest) { r.StopTimeoutMS = ptr64(-1) }, "stop_timeout_ms"},
		{"restart always", func(r *CreateRequest) { r.Restart = "always" }, ""},
		{"restart bogus", func(r *CreateRequest) { r.Restart = "sometimes" }, "restart"},
		{"restart delay 0", func(r *CreateRequest) { r.RestartDelayMS = ptr64(0) }, ""},
		{"restart delay 60s+1", func(r *CreateRequest) { r.RestartDelayMS = ptr64(60001) }, "restart_delay_ms"},
		{"restart burst 0", func(r *CreateRequest) { r.RestartBurst = ptr64(0) }, "restart_burst"},
		{"restart burst 101", func(r *CreateRequest) { r.RestartBurst = ptr64(101) }, "restart_burst"},
		{"restart interval 0", func(r *CreateRequest) { r.RestartIntervalS = ptr64(0) }, "restart_interval_s"},
		{"resume empty", func(r *CreateRequest) { r.ResumeArgv = []string{} }, "resume_argv"},
		{"resume NUL", func(r *CreateRequest) { r.ResumeArgv = []string{"a\x00"} }, "resume_argv"},
		{"id 129", func(r *CreateRequest) { r.SessionID = strings.Repeat("a", 129) }, "session_id"},
		{"id empty", func(r *CreateRequest) { r.SessionID = "" }, "session_id"},
		{"id dot", func(r *CreateRequest) { r.SessionID = ".a" }, "session_id"},
		{"id dash", func(r *CreateRequest) { r.SessionID = "-a" }, "session_id"},
		{"id inner ok", func(r *CreateRequest) { r.SessionID = "a.b_c-D9" }, ""},
		{"id slash", func(r *CreateRequest) { r.SessionID = "a/b" }, "session_id"},
		{"id space", func(r *CreateRequest) { r.SessionID = "a b" }, "session_id"},
		{"id format", func(r *CreateRequest) { r.SessionID = "#{x}" }, "session_id"},
		{"state_dir missing", func(r *CreateRequest) { r.StateDir = "" }, "state_dir"},
		{"state_dir relative", func(r *CreateRequest) { r.StateDir = "a/b" }, "state_dir"},
		{"state_dir 1024", func(r *CreateRequest) { r.StateDir = "/" + strings.Repeat("a", 1023); r.StateFile = "/f" }, ""},
		{"state_dir 1025", func(r *CreateRequest) { r.StateDir = "/" + strings.Repeat("a", 1024) }, "state_dir"},
		{"state_dir CR", func(r *CreateRequest) { r.StateDir = "/a\rb" }, "state_dir"},
		{"state_dir NUL", func(r *CreateRequest) { r.StateDir = "/a\x00b" }, "state_dir"},
		{"state_dir non-utf8", func(r *CreateRequest) { r.StateDir = "/a\xffb" }, "state_dir"},
		{"state_file default too long", func(r *CreateRequest) {
			r.StateDir = "/" + strings.Repeat("a", 1020)
		}, "state_file"},
		{"state_file relative", func(r *CreateRequest) { r.StateFile = "x.jsonl" }, "state_file"},
		{"cwd relative", func(r *CreateRequest) { r.Cwd = "." }, "cwd"},
		{"cwd LF", func(r *CreateRequest) { r.Cwd = "/a\n" }, "cwd"},
		{"argv empty", func(r *CreateRequest) { r.Argv = nil }, "argv"},
		{"argv 256", func(r *CreateRequest) { r.Argv = make([]string, 256); r.Argv[0] = "x" }, ""},
		{"argv 257", func(r *CreateRequest) { r.Argv = make([]string, 257); r.Argv[0] = "x" }, "argv"},
		{"argv0 empty", func(r *CreateRequest) { r.Argv = []string{""} }, "argv"},
		{"arg 16KiB", func(r *CreateRequest) { r.Argv = []string{strings.Repeat("a", 16<<10)} }, ""},
		{"arg 16KiB+1", func(r *CreateRequest) { r.Argv = []string{strings.Repeat("a", 16<<10+1)} }, "argv"},
		{"argv 64KiB", func(r *CreateRequest) { r.Argv = repeatArgs(4, 16<<10) }, ""},
		{"argv 64KiB+1", func(r *CreateRequest) { r.Argv = append(repeatArgs(4, 16<<10), "b") }, "argv"},
		{"argv NUL", func(r *CreateRequest) { r.Argv = []string{"a", "b\x00"} }, "argv"},
		{"argv hostile ok", func(r *CreateRequest) { r.Argv = []string{"sh", "-c", "#{pane_pid} #(id) ';' \"\n"} }, ""},
		{"env 256", func(r *CreateRequest) { r.Env = envN(256) }, ""},
		{"env 257", func(r *CreateRequest) { r.Env = envN(257) }, "env"},
		{"env name digit", func(r *CreateRequest) { r.Env = map[string]string{"1A": ""} }, "env"},
		{"env name dash", func(r *CreateRequest) { r.Env = map[string]string{"A-B": ""} }, "env"},
		{"env name empty", func(r *CreateRequest) { r.Env = map[string]string{"": "x"} }, "env"},
		{"env name eq", func(r *CreateRequest) { r.Env = map[string]string{"A=B": "x"} }, "env"},
		{"env ok", func(r *CreateRequest) { r.Env = map[string]string{"_a9": "x=y\n#{z}"} }, ""},
		{"env value NUL", func(r *CreateRequest) { r.Env = map[string]string{"A": "\x00"} }, "env"},
		{"env value 16KiB+1", func(r *CreateRequest) { r.Env = map[string]string{"A": strings.Repeat("v", 16<<10+1)} }, "env"},
		{"label 256", func(r *CreateRequest) { r.Label = strings.Repeat("é", 128) }, ""},
		{"label 257", func(r *CreateRequest) { r.Label = strings.Repeat("a", 257) }, "label"},
		{"label tab", func(r *CreateRequest) { r.Label = "a\tb" }, "label"},
		{"label DEL", func(r *CreateRequest) { r.Label = "a\x7fb" }, "label"},
		{"label C1", func(r *CreateRequest) { r.Label = "a\u0085b" }, "label"},
		{"label bad utf8", func(r *CreateRequest) { r.Label = "a\xc3" }, "label"},
		{"wait negative", func(r *CreateRequest) { r.WaitMS = ms(-1) }, "wait_ms"},
		{"wait zero", func(r *CreateRequest) { r.WaitMS = ms(0) }, ""},
		{"wait huge", func(r *CreateRequest) { r.WaitMS = ms(MaxWait.Milliseconds() + 1) }, "wait_ms"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := good()
			c.mod(&r)
			_, err := Validate(r)
			if c.field == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			e := verdict.AsError(err)
			if e == nil || e.Code != verdict.CodeInvalidRequest || e.Details["field"] != c.field {
				t.Fatalf("want invalid_request on %s, got %v", c.field, err)
			}
		})
	}
}

func repeatArgs(n, size int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strings.Repeat("a", size)
	}
	return out
}

func envN(n int) map[string]string {
	m := map[string]string{}
	for i := 0; i < n; i++ {
		m["V"+strings.Repeat("x", i)] = "1"
	}
	return m
}

func TestCanonical(t *testing.T) {
	d := sockDir(t)
	real, _ := filepath.EvalSymlinks(d)
	os.Mkdir(filepath.Join(d, "real"), 0o700)
	os.Symlink(filepath.Join(d, "real"), filepath.Join(d, "link"))
	cases := map[string]string{
		d + "/link":               real + "/real",
		d + "/link/new/dir":       real + "/real/new/dir",
		d + "/./link/../link/x/":  real + "/real/x",
		"/nonexistent-skc/a/../b": "/nonexistent-skc/b",
		"/":                       "/",
		d + "/link/../real2/x":    real + "/real2/x", // lexical "..", before and after real2 exists
	}
	for in, want := range cases {
		if got, err := Canonical(in); err != nil || got != want {
			t.Errorf("Canonical(%q) = %q %v, want %q", in, got, err, want)
		}
	}
	s, err := Validate(CreateRequest{StateDir: d + "/link/sub", SessionID: "a", Argv: []string{"x"}})
	if err != nil || s.StateDir != real+"/real/sub" || s.StateFile != real+"/real/sub/a.jsonl" {
		t.Fatalf("%+v %v", s, err)
	}
}

func TestValidateRef(t *testing.T) {
	if _, err := ValidateRef(Ref{Name: "x", SessionID: "a"}); verdict.CodeOf(err) != verdict.CodeInvalidRequest {
		t.Fatal(err)
	}
	if _, err := ValidateRef(Ref{Name: "a\nb"}); verdict.CodeOf(err) != verdict.CodeInvalidRequest {
		t.Fatal(err)
	}
	r, err := ValidateRef(Ref{StateDir: "/nonexistent-skc/./s/", SessionID: "a"})
	if err != nil || r.StateDir != "/nonexistent-skc/s" {
		t.Fatalf("%+v %v", r, err)
	}
}

// checkSpec asserts every docs/contract.md limit on an accepted spec, independently
// of the code that enforced them.
func checkSpec(t *testing.T, s CreateSpec) {
	t.Helper()
	if s.SessionID == "" || len(s.SessionID) > MaxSessionID || strings.IndexAny(s.SessionID[:1], ".-") == 0 ||
		strings.Trim(s.SessionID, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
		t.Fatalf("bad session_id %q accepted", s.SessionID)
	}
	for _, p := range []string{s.StateDir, s.StateFile, s.Cwd} {
		if p == "" && p != s.Cwd || p != "" && (!filepath.IsAbs(p) || len(p) > MaxPath || strings.ContainsAny(p, "\x00\r\n") || !utf8.ValidString(p)) {
			t.Fatalf("bad path %q accepted", p)
		}
	}
	total := 0
	if len(s.Argv) < 1 || len(s.Argv) > MaxArgv || s.Argv[0] == "" {
		t.Fatalf("bad argv count %d", len(s.Argv))
	}
	for _, a := range s.Argv {
		total += len(a)
		if len(a) > MaxArg || strings.ContainsRune(a, 0) || !utf8.ValidString(a) {
			t.Fatalf("bad arg %q", a)
		}
	}
	if total > MaxArgvTotal || len(s.Env) > MaxEnv || len(s.Label) > MaxLabel || !utf8.ValidString(s.Label) {
		t.Fatalf("limits broken: %+v", s)
	}
	for _, kv := range s.Env {
		k, v, _ := strings.Cut(kv, "=")
		if !validEnvName(k) || len(v) > MaxEnvValue || strings.ContainsRune(v, 0) {
			t.Fatalf("bad env %q", kv)
		}
	}
	if s.Wait < 0 || s.Wait > MaxWait {
		t.Fatalf("bad wait %v", s.Wait)
	}
}

// FuzzValidate: Validate never panics, everything it accepts is within the
// limits, and validating its own output again is a fixed point.
func FuzzValidate(f *testing.F) {
	f.Add("/tmp/s", "abc", "", "sh", "-c", "", "A", "1", "label", int64(5000))
	f.Add("/tmp/../tmp/./s", "a.b-c_D", "/tmp/f.jsonl", "#{pane_id}", "#(id)", "/", "_X", "\n", "é", int64(0))
	f.Add("rel", "-x", "x", "", "a\x00b", "a\nb", "1A", "", "\x1b", int64(-1))
	f.Fuzz(func(t *testing.T, dir, id, file, a0, a1, cwd, k, v, label string, wait int64) {
		req := CreateRequest{StateDir: dir, SessionID: id, StateFile: file, Argv: []string{a0, a1},
			Cwd: cwd, Env: map[string]string{k: v}, Label: label, WaitMS: &wait}
		s, err := Validate(req)
		if err != nil {
			if e := verdict.AsError(err); e.Code != verdict.CodeInvalidRequest || e.Details["field"] == nil {
				t.Fatalf("refusal without a field: %v", err)
			}
			return
		}
		checkSpec(t, s)
		again, err := Validate(CreateRequest{StateDir: s.StateDir, SessionID: s.SessionID, StateFile: s.StateFile,
			Argv: s.Argv, Cwd: s.Cwd, Env: req.Env, Label: s.Label, WaitMS: &wait})
		if err != nil || again.StateDir != s.StateDir || again.StateFile != s.StateFile || again.Cwd != s.Cwd {
			t.Fatalf("not a fixed point: %+v vs %+v (%v)", s, again, err)
		}
		if a0 != s.Argv[0] || a1 != s.Argv[1] {
			t.Fatal("argv changed")
		}
	})
}

// TestSessionIDByteNamed: a refused byte is named as the character the caller
// sent, never as its Latin-1 reading.
func TestSessionIDByteNamed(t *testing.T) {
	for id, want := range map[string]string{"aü": "byte 1 (0xc3, the start of 'ü')", "a b": "byte 1 (' ')",
		"a\xff": "byte 1 (0xff)", "a\n": `byte 1 ('\n')`} {
		r := CreateRequest{StateDir: "/tmp/s", SessionID: id, Argv: []string{"sh"}}
		if _, err := Validate(r); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", id, err, want)
		}
	}
}

// TestDecodeCreateSurrogates: an unpaired surrogate escape in any field is
// refused naming the field (encoding/json would have made it U+FFFD and run
// the agent with an argument nobody sent); pairs and escaped backslashes pass.
func TestDecodeCreateSurrogates(t *testing.T) {
	base := `"state_dir":"/tmp/s","session_id":"a"`
	for _, c := range []struct{ body, field string }{
		{`{` + base + `,"argv":["sleep","\ud800"]}`, "argv"},
		{`{` + base + `,"argv":["x"],"label":"a\udfffb"}`, "label"},
		{`{"state_dir":"/tmp/s\uD800\u0041","session_id":"a","argv":["x"]}`, "state_dir"},
		{`{` + base + `,"argv":["x"],"env":{"K":"\ud800\ud800"}}`, "env"},
		{`{` + base + `,"argv":["x"],"cwd":"/\ud800"}`, "cwd"},
		{`{` + base + `,"argv":["\ud83d\ude00","\\ud800"]}`, ""},
	} {
		_, err := DecodeCreate([]byte(c.body))
		if got := fieldOf(err); (c.field == "" && err != nil) || (c.field != "" && got != c.field) {
			t.Errorf("%s: %v, want field %q", c.body, err, c.field)
		}
	}
}

// TestDecodeCreateNulls: a null where an element or a value is required (an
// argv or resume_argv element, an env value) is refused naming the field —
// encoding/json would have made it "", an argument or a variable nobody
// wrote; a null field is an absent one.
func TestDecodeCreateNulls(t *testing.T) {
	base := `"state_dir":"/tmp/s","session_id":"a"`
	for _, c := range []struct{ body, field string }{
		{`{` + base + `,"argv":["sleep",null]}`, "argv"},
		{`{` + base + `,"argv":[ "sleep" , null ]}`, "argv"},
		{`{` + base + `,"argv":["x"],"resume_argv":[null]}`, "resume_argv"},
		{`{` + base + `,"argv":["x"],"env":{"A":null}}`, "env"},
		{`{` + base + `,"argv":["x"],"env":{"A":"1", "B" : null}}`, "env"},
		{`{` + base + `,"argv":["x"],"env":null,"label":null,"wait_ms":null}`, ""},
		{`{` + base + `,"argv":["null"],"env":{"A":"null"}}`, ""},
	} {
		_, err := DecodeCreate([]byte(c.body))
		if got := fieldOf(err); (c.field == "" && err != nil) || (c.field != "" && got != c.field) {
			t.Errorf("%s: %v, want field %q", c.body, err, c.field)
		}
	}
}

// TestDecodeCreateEmptyStrings: state_file, cwd and restart given as ""
// are refused naming the field (found outside-in: each was taken for absent,
// its default silently used); absent or null they keep their defaults.
func TestDecodeCreateEmptyStrings(t *testing.T) {
	base := `"state_dir":"/tmp/s","session_id":"a","argv":["x"]`
	for _, c := range []struct{ body, field string }{
		{`{` + base + `,"restart":""}`, "restart"},
		{`{` + base + `,"cwd":""}`, "cwd"},
		{`{` + base + `,"state_file":""}`, "state_file"},
		{`{` + base + `,"restart":5}`, "restart"},
		{`{` + base + `,"restart":null,"cwd":null,"state_file":null}`, ""},
		{`{` + base + `,"restart":"always","cwd":"/tmp","state_file":"/tmp/s/a.jsonl","label":""}`, ""},
	} {
		_, err := DecodeCreate([]byte(c.body))
		if got := fieldOf(err); (c.field == "" && err != nil) || (c.field != "" && got != c.field) {
			t.Errorf("%s: %v, want field %q", c.body, err, c.field)
		}
	}
}

// FuzzDecodeCreate: decoding arbitrary bodies never panics; an accepted body
// either validates within the limits or is refused with a field.
func FuzzDecodeCreate(f *testing.F) {
	f.Add([]byte(`{"state_dir":"/tmp/s","session_id":"a","argv":["sh","-c","echo #{x}"],"env":{"A":"1"},"wait_ms":10}`))
	f.Add([]byte(`{"state_dir":"/tmp/s","session_id":"a","argv":["x"],"argv":["y"]}`))
	f.Add([]byte(`{"STATE_DIR":"/x"}`))
	f.Add([]byte(`{"state_dir":"/x","session_id":"a","argv":["x"]} []`))
	f.Add([]byte("{\"label\":\"\xff\"}"))
	f.Add([]byte(`{"env":{"A":null},"wait_ms":null,"argv":null}`))
	f.Add([]byte(`{"state_dir":"/x","session_id":"a","argv":["\ud800"]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeCreate(body)
		if err == nil && strings.ContainsRune(fmt.Sprint(req.Argv, req.Env, req.Label), utf8.RuneError) &&
			!bytes.ContainsRune(body, utf8.RuneError) && !bytes.Contains(bytes.ToLower(body), []byte(`\ufffd`)) {
			t.Fatalf("accepted %q with a U+FFFD the body did not carry: %q", body, req.Argv)
		}
		if err != nil {
			if e := verdict.AsError(err); e.Code != verdict.CodeInvalidRequest || e.Details["field"] == nil {
				t.Fatalf("refusal without a field: %v", err)
			}
			return
		}
		s, err := Validate(req)
		if err != nil {
			if verdict.AsError(err).Details["field"] == nil {
				t.Fatalf("refusal without a field: %v", err)
			}
			return
		}
		checkSpec(t, s)
	})
}

func ptr64(v int64) *int64 { return &v }

// TestStopTimeoutDefault: no stop_timeout_ms is the contract's 10 s.
func TestStopTimeoutDefault(t *testing.T) {
	spec, err := Validate(CreateRequest{StateDir: "/tmp", SessionID: "a", Argv: []string{"x"}})
	if err != nil || spec.StopTimeout != DefaultStopTimeout {
		t.Fatalf("%+v %v", spec, err)
	}
	body := `{"state_dir": "/tmp", "session_id": "a", "argv": ["x"], "stop_timeout_ms": 500}`
	req, err := DecodeCreate([]byte(body))
	if err != nil || req.StopTimeoutMS == nil || *req.StopTimeoutMS != 500 {
		t.Fatalf("decode: %+v %v", req, err)
	}
}

// TestRestartDefaults: no restart fields are the contract's defaults (never,
// 1 s, 5 starts in 300 s); the body's fields decode strictly.
func TestRestartDefaults(t *testing.T) {
	spec, err := Validate(CreateRequest{StateDir: "/tmp", SessionID: "a", Argv: []string{"x"}})
	if err != nil || spec.Restart.Policy != RestartNever || spec.Restart.Delay != DefaultRestartDelay ||
		spec.Restart.Burst != 5 || spec.Restart.Interval != 300*time.Second || spec.Restart.ResumeArgv != nil {
		t.Fatalf("%+v %v", spec.Restart, err)
	}
	body := `{"state_dir": "/tmp", "session_id": "a", "argv": ["x"], "restart": "on-failure", "resume_argv": ["x", "--resume"],
		"restart_delay_ms": 0, "restart_burst": 3, "restart_interval_s": 60}`
	req, err := DecodeCreate([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	spec, err = Validate(req)
	if err != nil || spec.Restart.Policy != RestartOnFailure || spec.Restart.Delay != 0 || spec.Restart.Burst != 3 ||
		spec.Restart.Interval != time.Minute || len(spec.Restart.ResumeArgv) != 2 {
		t.Fatalf("%+v %v", spec.Restart, err)
	}
	if _, err := DecodeCreate([]byte(`{"state_dir": "/tmp", "session_id": "a", "argv": ["x"], "restart_burst": "5"}`)); err == nil {
		t.Fatal("a string restart_burst was accepted")
	}
}

// TestValidateRefusesUnresolvedSymlinks: a state_dir, state_file or cwd that
// is or passes through a symlink that does not resolve (dangling, a loop met
// on the way) is refused at the API, naming the field, for a create and for
// a lookup alike — the fence's own rule (internal/canon), checked before a
// create is admitted, so no verdict is written for it and no lookup reads the
// fence with it.
func TestValidateRefusesUnresolvedSymlinks(t *testing.T) {
	d := sockDir(t)
	dangling, l1, l2 := filepath.Join(d, "dangling"), filepath.Join(d, "l1"), filepath.Join(d, "l2")
	for _, l := range [][2]string{{filepath.Join(d, "missing"), dangling}, {l2, l1}, {l1, l2}} {
		if err := os.Symlink(l[0], l[1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{dangling, dangling + "/x", l1, l1 + "/sub", l2 + "/a/b"} {
		_, err := Validate(CreateRequest{StateDir: p, SessionID: "a", Argv: []string{"x"}})
		if e := verdict.AsError(err); e == nil || e.Code != verdict.CodeInvalidRequest || e.Details["field"] != "state_dir" {
			t.Errorf("create state_dir %s: %v", p, err)
		}
		_, err = ValidateRef(Ref{StateDir: p, SessionID: "a"})
		if e := verdict.AsError(err); e == nil || e.Code != verdict.CodeInvalidRequest || e.Details["field"] != "state_dir" {
			t.Errorf("lookup state_dir %s: %v", p, err)
		}
		_, err = Validate(CreateRequest{StateDir: d, SessionID: "a", Argv: []string{"x"}, StateFile: p + "/f.jsonl"})
		if e := verdict.AsError(err); e == nil || e.Code != verdict.CodeInvalidRequest || e.Details["field"] != "state_file" {
			t.Errorf("state_file under %s: %v", p, err)
		}
		_, err = Validate(CreateRequest{StateDir: d, SessionID: "a", Argv: []string{"x"}, Cwd: p})
		if e := verdict.AsError(err); e == nil || e.Code != verdict.CodeInvalidRequest || e.Details["field"] != "cwd" {
			t.Errorf("cwd %s: %v", p, err)
		}
	}
}
