package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sessionKeys are docs/contract.md's Session fields and their JSON types.
var sessionKeys = map[string]string{
	"name": "string", "id": "string", "managed": "bool", "state_dir": "string",
	"session_id": "string", "state_file": "string", "generation": "number",
	"authoritative": "bool", "label": "string", "pane_pid": "number",
	"pane_dead": "bool", "attached": "number", "created_at": "string",
	"activity_at": "string|null", "host": "string",
}

func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "bool"
	case float64:
		return "number"
	case nil:
		return "null"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "?"
}

// checkKeys fails t unless obj has every key of want with its JSON type.
func checkKeys(t testing.TB, what string, obj any, want map[string]string) {
	t.Helper()
	m, ok := obj.(map[string]any)
	if !ok {
		t.Errorf("%s: not a JSON object: %v", what, obj)
		return
	}
	for k, typ := range want {
		v, ok := m[k]
		if !ok {
			t.Errorf("%s: field %q missing (have %v)", what, k, keysOf(m))
			continue
		}
		if got := jsonType(v); got != typ && !(typ == "object|null" && (got == "object" || got == "null")) &&
			!(typ == "string|null" && (got == "string" || got == "null")) {
			t.Errorf("%s: field %q is %s (%v), want %s", what, k, got, v, typ)
		}
	}
}

func keysOf(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func rawJSON(t testing.TB, r Result) map[string]any {
	t.Helper()
	var m map[string]any
	mustJSON(t, r, &m)
	return m
}

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

func TestVersion(t *testing.T) {
	t.Parallel()
	h := NewHome(t)
	r := h.CLI(t, "version")
	if r.Code != 0 || strings.TrimSpace(r.Stdout) == "" {
		t.Fatalf("version: want exit 0 and a version on stdout\n%s", r)
	}
}

// TestNoDaemon: every client verb answers 69 when nothing serves the home, and
// with --json the error is one document on stdout.
func TestNoDaemon(t *testing.T) {
	t.Parallel()
	h := NewHome(t)
	for _, args := range [][]string{
		{"ls", "--json"}, {"show", "--json", "skc-nothing"}, {"kill", "--json", "skc-nothing"},
		{"fence", "--json"},
		NewSpec(t, "nodaemon").Args(),
	} {
		r := h.CLI(t, args...)
		var a Answer
		mustJSON(t, r, &a)
		if r.Code != 69 || a.Error == nil || a.Error.Code != "daemon_unreachable" || a.Status != "error" {
			t.Errorf("want exit 69, status error, code daemon_unreachable\n%s", r)
		}
	}
	if r := h.CLI(t, "ls"); r.Code != 69 || r.Stderr == "" {
		t.Errorf("ls without --json: want exit 69 and a message on stderr\n%s", r)
	}
	if r := h.CLI(t, "verdicts"); r.Code != 69 {
		t.Errorf("verdicts: want exit 69\n%s", r)
	}
}

// TestContract walks the CLI verbs of docs/contract.md against one daemon.
func TestContract(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	spec := NewSpec(t, "contract-1")
	spec.Label = "first session"
	var sess Session

	t.Run("info", func(t *testing.T) {
		status, body := d.Get(t, "/v1/info")
		var info map[string]any
		if status != 200 || json.Unmarshal(body, &info) != nil {
			t.Fatalf("GET /v1/info: %d %s", status, body)
		}
		checkKeys(t, "info", info, map[string]string{"version": "string", "pid": "number",
			"started_at": "string", "home": "string"})
		if pid, _ := info["pid"].(float64); int(pid) != d.PID() {
			t.Errorf("info.pid = %v, want %d", info["pid"], d.PID())
		}
		if info["home"] != d.Dir {
			t.Errorf("info.home = %v, want %s", info["home"], d.Dir)
		}
	})

	t.Run("create published", func(t *testing.T) {
		r := d.CLI(t, spec.Args()...)
		m := rawJSON(t, r)
		if r.Code != 0 || m["status"] != "published" {
			t.Fatalf("want exit 0 and status published\n%s", r)
		}
		checkKeys(t, "create.session", m["session"], sessionKeys)
		var a Answer
		mustJSON(t, r, &a)
		sess = *a.Session
		d.NoteSession(t)
		checkNewSession(t, d.Home, spec, sess)
	})
	if sess.Name == "" {
		t.Fatal("no session: the rest of the contract walk needs one")
	}

	t.Run("create existing", func(t *testing.T) {
		again := d.MustCreate(t, spec, "existing")
		if again.Name != sess.Name || again.ID != sess.ID || again.Generation != sess.Generation {
			t.Errorf("existing answered %+v, want the published %+v", again, sess)
		}
	})

	t.Run("ls", func(t *testing.T) { checkList(t, d, sess) })
	t.Run("show", func(t *testing.T) { checkShow(t, d, spec, sess) })
	t.Run("fence", func(t *testing.T) { checkFence(t, d, spec, sess) })
	t.Run("exit codes", func(t *testing.T) { checkExitCodes(t, d, spec) })
	t.Run("kill", func(t *testing.T) { checkKill(t, d, sess) })
	t.Run("kill by identity", func(t *testing.T) {
		other := NewSpec(t, "contract-2")
		s := d.MustCreate(t, other, "published")
		r := d.CLI(t, "kill", "--json", "--state-dir", other.StateDir, "--session-id", other.SessionID)
		if m := rawJSON(t, r); r.Code != 0 || m["status"] != "killed" {
			t.Errorf("kill by identity: want exit 0 and killed\n%s", r)
		}
		if r := d.CLI(t, "show", "--json", s.Name); r.Code != 4 {
			t.Errorf("show after kill by identity: want exit 4\n%s", r)
		}
	})
	t.Run("verdicts", func(t *testing.T) {
		vs := d.Verdicts(t)
		checkVerdictStream(t, vs)
		checkVerdictsFile(t, d, vs)
	})
}

// checkNewSession checks a just-published session against its spec and tmux.
func checkNewSession(t testing.TB, h *Home, spec Spec, s Session) {
	t.Helper()
	wantFile := spec.StateFile
	if wantFile == "" {
		wantFile = filepath.Join(spec.StateDir, spec.SessionID+".jsonl")
	}
	if !s.Managed || !s.Authoritative || s.Generation < 1 || s.StateDir != spec.StateDir ||
		s.SessionID != spec.SessionID || s.StateFile != wantFile || s.Label != spec.Label ||
		!strings.HasPrefix(s.ID, "$") || s.Name == "" || s.PanePID <= 0 || s.PaneDead ||
		s.CreatedAt.IsZero() {
		t.Errorf("session %+v does not match spec %+v (state_file want %s)", s, spec, wantFile)
	}
	if s.PanePID > 0 && !alive(s.PanePID) {
		t.Errorf("pane pid %d is not alive", s.PanePID)
	}
	var found *tmuxSession
	for _, ts := range h.TmuxSessions(t) {
		if ts.Name == s.Name {
			ts := ts
			found = &ts
		}
	}
	if found == nil {
		t.Fatalf("tmux has no session %q", s.Name)
	}
	if found.ID != s.ID || !hex64.MatchString(found.Identity) ||
		found.Generation != strconv.FormatUint(s.Generation, 10) || found.PanePID != s.PanePID {
		t.Errorf("tmux session %+v does not match %+v (tags: @skc-identity 64 hex, @skc-generation)", *found, s)
	}
}

func checkList(t *testing.T, d *Daemon, sess Session) {
	if _, err := d.Tmux("new-session", "-d", "-s", "by-hand", "sleep", "1000"); err != nil {
		t.Fatal(err)
	}
	var l List
	var r Result
	WaitFor(t, waitDeadline, "the unmanaged session in ls", func() error {
		r = d.CLI(t, "ls", "--json")
		l = List{}
		mustJSON(t, r, &l)
		for _, s := range l.Sessions {
			if s.Name == "by-hand" {
				return nil
			}
		}
		return errorf("not listed yet: %s", r.Stdout)
	})
	m := rawJSON(t, r)
	checkKeys(t, "ls", m, map[string]string{"census": "object", "sessions": "array"})
	checkKeys(t, "ls.census", m["census"], map[string]string{"synced": "bool", "server_pid": "number",
		"server_started_at": "string", "tmux_version": "string"})
	for i, s := range m["sessions"].([]any) {
		checkKeys(t, "ls.sessions["+strconv.Itoa(i)+"]", s, sessionKeys)
	}
	if !l.Census.Synced || !alive(l.Census.ServerPID) || l.Census.TmuxVersion == "" || l.Census.ServerStartedAt.IsZero() {
		t.Errorf("census %+v: want synced, a live server pid, a version and a start time", l.Census)
	}
	d.NoteServerPID(l.Census.ServerPID)
	control := map[string]bool{}
	for _, ts := range d.TmuxSessions(t) {
		if ts.Control != "" {
			control[ts.Name] = true
		}
	}
	if len(control) != 1 {
		t.Errorf("tmux shows %d control sessions (@skc-control), want 1", len(control))
	}
	var ours, hand int
	for _, s := range l.Sessions {
		switch {
		case control[s.Name]:
			t.Errorf("ls lists the control session %q", s.Name)
		case s.Name == sess.Name:
			ours++
			if !s.Managed || !s.Authoritative || s.ID != sess.ID || s.Generation != sess.Generation {
				t.Errorf("ls: %+v, want managed authoritative %+v", s, sess)
			}
		case s.Name == "by-hand":
			hand++
			if s.Managed || s.Authoritative {
				t.Errorf("ls: hand-made session %+v, want managed false", s)
			}
		}
	}
	if ours != 1 || hand != 1 {
		t.Errorf("ls lists our session %d times and the hand-made one %d times, want 1 and 1:\n%s", ours, hand, r.Stdout)
	}
	d.Tmux("kill-session", "-t", "=by-hand")
	if r := d.CLI(t, "ls"); r.Code != 0 || !strings.Contains(r.Stdout, sess.Name) {
		t.Errorf("ls (text): want exit 0 and the session name on stdout\n%s", r)
	}
}

func checkShow(t *testing.T, d *Daemon, spec Spec, sess Session) {
	for _, args := range [][]string{
		{"show", "--json", sess.Name},
		{"show", "--json", "--state-dir", spec.StateDir, "--session-id", spec.SessionID},
	} {
		r := d.CLI(t, args...)
		if r.Code != 0 {
			t.Errorf("want exit 0\n%s", r)
			continue
		}
		m := rawJSON(t, r)
		checkKeys(t, "show", m, map[string]string{"session": "object", "reservation": "object|null", "verdicts": "array"})
		checkKeys(t, "show.session", m["session"], sessionKeys)
		var got struct {
			Session     Session           `json:"session"`
			Reservation map[string]any    `json:"reservation"`
			Verdicts    []json.RawMessage `json:"verdicts"`
		}
		mustJSON(t, r, &got)
		if got.Session.Name != sess.Name || got.Session.ID != sess.ID || got.Session.Generation != sess.Generation {
			t.Errorf("show: session %+v, want %+v", got.Session, sess)
		}
		if got.Reservation != nil {
			t.Errorf("show: reservation %v after publish, want null (released)", got.Reservation)
		}
		published := false
		for _, raw := range got.Verdicts {
			var v Verdict
			json.Unmarshal(raw, &v)
			published = published || v.SKC.Verdict == "published"
		}
		if !published {
			t.Errorf("show: no published verdict among %d verdicts\n%s", len(got.Verdicts), r.Stdout)
		}
	}
	if r := d.CLI(t, "show", sess.Name); r.Code != 0 || !strings.Contains(r.Stdout, sess.Name) {
		t.Errorf("show (text): want exit 0 and the name\n%s", r)
	}
}

func checkFence(t *testing.T, d *Daemon, spec Spec, sess Session) {
	r := d.CLI(t, "fence", "--json")
	if r.Code != 0 {
		t.Fatalf("want exit 0\n%s", r)
	}
	m := rawJSON(t, r)
	checkKeys(t, "fence", m, map[string]string{"reservations": "array", "identities": "array"})
	var f struct {
		Reservations []map[string]any `json:"reservations"`
		Identities   []map[string]any `json:"identities"`
	}
	mustJSON(t, r, &f)
	if len(f.Reservations) != 0 {
		t.Errorf("fence: %d reservations after publish, want 0 (released): %v", len(f.Reservations), f.Reservations)
	}
	n := 0
	for _, id := range f.Identities {
		checkKeys(t, "fence.identities[]", id, map[string]string{"state_dir": "string",
			"session_id": "string", "generation": "number", "session_name": "string"})
		if id["state_dir"] == spec.StateDir && id["session_id"] == spec.SessionID {
			n++
			if id["session_name"] != sess.Name || id["generation"] != float64(sess.Generation) {
				t.Errorf("fence identity %v, want session %s generation %d", id, sess.Name, sess.Generation)
			}
		}
	}
	if n != 1 {
		t.Errorf("fence lists our identity %d times, want 1\n%s", n, r.Stdout)
	}
}

// checkExitCodes: 2 (usage, invalid input), 3 (refused), 4 (no such session).
func checkExitCodes(t *testing.T, d *Daemon, spec Spec) {
	bad := spec
	bad.SessionID = "../escape"
	expectError(t, d.CLI(t, bad.Args()...), 2, "invalid", "invalid_request", "session_id")
	if r := d.CLI(t, "frobnicate"); r.Code != 2 {
		t.Errorf("unknown verb: want exit 2\n%s", r)
	}
	// Usage errors with --json are one JSON document on stdout too.
	for _, args := range [][]string{
		{"create", "--json", "--state-dir", spec.StateDir, "--session-id", "noargv"},
		{"create", "--json", "--wait", "soon", "--state-dir", spec.StateDir, "--session-id", "w", "--", "true"},
		{"ls", "--json", "--no-such-flag"},
		{"show", "--json"},
	} {
		r := d.CLI(t, args...)
		var a Answer
		if err := decodeOne(r.Stdout, &a); err != nil || r.Code != 2 || a.Status != "invalid" || a.Error == nil {
			t.Errorf("usage error with --json: want exit 2 and one JSON document with status invalid (%v)\n%s", err, r)
		}
	}
	mismatch := spec
	mismatch.StateFile = filepath.Join(spec.StateDir, "other.jsonl")
	expectError(t, d.CLI(t, mismatch.Args()...), 3, "refused", "identity_state_file_mismatch", "")
	refused := countVerdicts(d.Verdicts(t), func(v Verdict) bool {
		return v.SKC.Verdict == "refused" && v.SKC.Code == "identity_state_file_mismatch" && v.Event.Outcome == "failure"
	})
	if refused != 1 {
		t.Errorf("%d refused verdicts with code identity_state_file_mismatch, want 1", refused)
	}
	expectError(t, d.CLI(t, "show", "--json", "skc-no-such-session"), 4, "error", "not_found", "")
	expectError(t, d.CLI(t, "kill", "--json", "skc-no-such-session"), 4, "error", "not_found", "")
	if r := d.CLI(t, "attach", "skc-no-such-session"); r.Code != 4 {
		t.Errorf("attach of nothing: want exit 4\n%s", r)
	}
	if r := d.CLI(t, "verdicts", "--since", "soon"); r.Code != 2 {
		t.Errorf("verdicts --since soon: want exit 2\n%s", r)
	}
	if r := d.CLI(t, "show", "skc-no-such-session"); r.Code != 4 || r.Stdout != "" {
		t.Errorf("show (text) of nothing: want exit 4, message on stderr only\n%s", r)
	}
}

// expectError checks an error outcome: the exit code, and (with --json) one JSON
// document with the status word, code and details.field.
func expectError(t testing.TB, r Result, exit int, status, code, field string) Answer {
	t.Helper()
	var a Answer
	if err := decodeOne(r.Stdout, &a); err != nil {
		t.Errorf("%v\n%s", err, r)
		return a
	}
	if r.Code != exit || a.Status != status || a.Error == nil || a.Error.Code != code ||
		(field != "" && a.Field() != field) {
		t.Errorf("want exit %d, status %q, code %q, field %q\n%s", exit, status, code, field, r)
	}
	return a
}

func checkKill(t *testing.T, d *Daemon, sess Session) {
	r := d.CLI(t, "kill", "--json", sess.Name)
	m := rawJSON(t, r)
	if r.Code != 0 || m["status"] != "killed" {
		t.Fatalf("kill: want exit 0 and status killed\n%s", r)
	}
	raw, _ := json.Marshal(m["verdict"])
	v := parseVerdicts(t, string(raw))[0]
	if v.SKC.Verdict != "ended" || v.SKC.ExitKind != "cleanup" || v.SessionName() != sess.Name {
		t.Errorf("kill verdict %s: want ended, exit_kind cleanup, session %s", raw, sess.Name)
	}
	for _, ts := range d.TmuxSessions(t) {
		if ts.Name == sess.Name {
			t.Errorf("tmux still has %q after kill returned", sess.Name)
		}
	}
	if r := d.CLI(t, "show", "--json", sess.Name); r.Code != 4 {
		t.Errorf("show after kill: want exit 4\n%s", r)
	}
	if alive(sess.PanePID) {
		WaitFor(t, waitDeadline, "the killed session's pane process to end", func() error {
			if alive(sess.PanePID) {
				return errorf("pid %d alive", sess.PanePID)
			}
			return nil
		})
	}
}

// checkVerdictStream: every line is a verdict of the CONTRACT shape and
// event.sequence increases by one.
func checkVerdictStream(t testing.TB, vs []Verdict) {
	t.Helper()
	if len(vs) == 0 {
		t.Fatal("no verdicts")
	}
	outcomes := map[string]bool{"success": true, "failure": true, "unknown": true}
	for i, v := range vs {
		if _, err := time.Parse(time.RFC3339Nano, v.Timestamp); err != nil {
			t.Errorf("verdict %d: @timestamp %q: %v", i, v.Timestamp, err)
		}
		if v.Event.Kind != "event" || v.Event.Action == "" || !outcomes[v.Event.Outcome] || v.SKC.Verdict == "" {
			t.Errorf("verdict %d: want event.kind event, an action, an outcome, skc.verdict: %s", i, v.Raw)
		}
		if i > 0 && v.Event.Sequence != vs[i-1].Event.Sequence+1 {
			t.Errorf("verdict %d: sequence %d after %d, want +1", i, v.Event.Sequence, vs[i-1].Event.Sequence)
		}
		var m map[string]any
		json.Unmarshal([]byte(v.Raw), &m)
		checkKeys(t, "verdict", m, map[string]string{"@timestamp": "string", "event": "object", "skc": "object"})
	}
}

// checkVerdictsFile: verdicts.jsonl holds the same records as `verdicts`, one
// per line, in the same order.
func checkVerdictsFile(t *testing.T, d *Daemon, vs []Verdict) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.Dir, "verdicts.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	file := parseVerdicts(t, string(b))
	if len(file) != len(vs) {
		t.Fatalf("verdicts.jsonl has %d records, `verdicts` %d", len(file), len(vs))
	}
	for i := range vs {
		var a, b any
		json.Unmarshal([]byte(vs[i].Raw), &a)
		json.Unmarshal([]byte(file[i].Raw), &b)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("record %d differs:\n verdicts:       %s\n verdicts.jsonl: %s", i, vs[i].Raw, file[i].Raw)
		}
	}
}
