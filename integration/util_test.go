package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// WaitFor polls cond until it returns nil; after timeout it fails t with cond's
// last error. Conditions are waited for, never assumed after a fixed sleep.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	delay := 10 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: still not true after %v: %v", what, timeout, err)
		}
		time.Sleep(delay)
		if delay < 250*time.Millisecond {
			delay *= 2
		}
	}
}

func tryGet(h *Home, path string) (int, []byte, error) {
	resp, err := h.HTTP().Get("http://skc" + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// decodeOne decodes s as exactly one JSON document (CONTRACT: "one JSON document
// on stdout") into v.
func decodeOne(s string, v any) error {
	dec := json.NewDecoder(strings.NewReader(s))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not a JSON document: %v: %q", err, clip(s))
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); err != io.EOF {
		return fmt.Errorf("more than one JSON document on stdout: %q", clip(s))
	}
	return nil
}

// mustJSON decodes r's stdout as one JSON document or fails t.
func mustJSON(t testing.TB, r Result, v any) {
	t.Helper()
	if err := decodeOne(r.Stdout, v); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
}

// Session is docs/contract.md's Session object.
type Session struct {
	Name          string    `json:"name"`
	ID            string    `json:"id"`
	Managed       bool      `json:"managed"`
	StateDir      string    `json:"state_dir"`
	SessionID     string    `json:"session_id"`
	StateFile     string    `json:"state_file"`
	Generation    uint64    `json:"generation"`
	Authoritative bool      `json:"authoritative"`
	Label         string    `json:"label"`
	PanePID       int       `json:"pane_pid"`
	PaneDead      bool      `json:"pane_dead"`
	Attached      int       `json:"attached"`
	CreatedAt     time.Time `json:"created_at"`
	State         string    `json:"state"`
	StopTimeoutMS int64     `json:"stop_timeout_ms"`
	Host          string    `json:"host"`
	AttachHint    string    `json:"attach_hint"`
}

// APIError is the error object of every refusal or failure.
type APIError struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
}

// Answer is a create (or error) answer: {"status", "session"} or {"status", "error"}.
type Answer struct {
	Status  string    `json:"status"`
	Session *Session  `json:"session"`
	Error   *APIError `json:"error"`
}

// Field is the error's details.field, "" when none.
func (a Answer) Field() string {
	if a.Error == nil {
		return ""
	}
	f, _ := a.Error.Details["field"].(string)
	return f
}

// List is `ls --json`.
type List struct {
	Census struct {
		Synced          bool      `json:"synced"`
		ServerPID       int       `json:"server_pid"`
		ServerStartedAt time.Time `json:"server_started_at"`
		TmuxVersion     string    `json:"tmux_version"`
	} `json:"census"`
	Sessions []Session `json:"sessions"`
}

// Verdict is one verdict line.
type Verdict struct {
	Timestamp string `json:"@timestamp"`
	Event     struct {
		Kind     string `json:"kind"`
		Action   string `json:"action"`
		Outcome  string `json:"outcome"`
		Reason   string `json:"reason"`
		Sequence int64  `json:"sequence"`
	} `json:"event"`
	SKC struct {
		Verdict  string `json:"verdict"`
		Code     string `json:"code"`
		ExitKind string `json:"exit_kind"`
		Identity *struct {
			StateDir  string `json:"state_dir"`
			SessionID string `json:"session_id"`
		} `json:"identity"`
		Session *struct {
			Name       string `json:"name"`
			ID         string `json:"id"`
			Generation uint64 `json:"generation"`
		} `json:"session"`
		Reservation *struct {
			ID    string `json:"id"`
			Phase string `json:"phase"`
		} `json:"reservation"`
		Exit *struct {
			Status *int   `json:"status"`
			Signal string `json:"signal"`
		} `json:"exit"`
		Evidence map[string]any `json:"evidence"`
	} `json:"skc"`
	Raw string `json:"-"`
}

func (v Verdict) String() string { return v.Raw }

// SessionName is skc.session.name, "" when none.
func (v Verdict) SessionName() string {
	if v.SKC.Session == nil {
		return ""
	}
	return v.SKC.Session.Name
}

// Spec is one create request through the CLI.
type Spec struct {
	StateDir, SessionID, StateFile, Cwd, Label, Wait string
	Env                                              []string
	Argv                                             []string
}

// Args are the CLI arguments of `create --json`.
func (s Spec) Args() []string {
	a := []string{"create", "--json", "--state-dir", s.StateDir, "--session-id", s.SessionID}
	for _, kv := range [][2]string{{"--state-file", s.StateFile}, {"--cwd", s.Cwd},
		{"--label", s.Label}, {"--wait", s.Wait}} {
		if kv[1] != "" {
			a = append(a, kv[0], kv[1])
		}
	}
	for _, e := range s.Env {
		a = append(a, "--env", e)
	}
	return append(append(a, "--"), s.Argv...)
}

// NewSpec is a spec for a fresh identity under a new state dir whose agent
// sleeps until it is killed.
func NewSpec(t testing.TB, id string) Spec {
	t.Helper()
	return Spec{StateDir: t.TempDir(), SessionID: id, Argv: []string{"sleep", "1000"}}
}

// Create runs `create --json` and decodes its answer.
func (h *Home) Create(t testing.TB, s Spec) (Result, Answer) {
	t.Helper()
	r := h.CLI(t, s.Args()...)
	var a Answer
	mustJSON(t, r, &a)
	if a.Session != nil {
		h.NoteSession(t)
	}
	return r, a
}

// MustCreate creates and requires status published or existing.
func (h *Home) MustCreate(t testing.TB, s Spec, want string) Session {
	t.Helper()
	r, a := h.Create(t, s)
	if r.Code != 0 || a.Status != want || a.Session == nil {
		t.Fatalf("create: want exit 0 and status %q with a session\n%s", want, r)
	}
	return *a.Session
}

// CreateAfterServerDeath is MustCreate right after the tmux server was
// killed: a create that reaches the dying server before the daemon has seen
// it go is answered tmux_unavailable (its outcome unknown: nothing is lost,
// recovery decides its row), and a user tries again — as this does, until the
// daemon has a server again.
func (h *Home) CreateAfterServerDeath(t testing.TB, s Spec) Session {
	t.Helper()
	var out Session
	WaitFor(t, waitDeadline, "a create on the next server", func() error {
		r, a := h.Create(t, s)
		switch {
		case r.Code == 0 && a.Status == "published" && a.Session != nil:
			out = *a.Session
			return nil
		case a.Error != nil && a.Error.Code == "tmux_unavailable":
			return errorf("%s", r)
		}
		t.Fatalf("create after the server's death: want published or tmux_unavailable\n%s", r)
		return nil
	})
	return out
}

// NoteSession records the current tmux server pid for cleanup.
func (h *Home) NoteSession(t testing.TB) {
	if pid, ok := h.liveServerPID(); ok {
		h.NoteServerPID(pid)
	}
}

// List runs `ls --json`.
func (h *Home) List(t testing.TB) List {
	t.Helper()
	r := h.CLI(t, "ls", "--json")
	if r.Code != 0 {
		t.Fatalf("ls: want exit 0\n%s", r)
	}
	var l List
	mustJSON(t, r, &l)
	h.NoteServerPID(l.Census.ServerPID)
	return l
}

// Verdicts runs `verdicts` and parses every line.
func (h *Home) Verdicts(t testing.TB) []Verdict {
	t.Helper()
	r := h.CLI(t, "verdicts")
	if r.Code != 0 {
		t.Fatalf("verdicts: want exit 0\n%s", r)
	}
	return parseVerdicts(t, r.Stdout)
}

func parseVerdicts(t testing.TB, s string) []Verdict {
	t.Helper()
	var out []Verdict
	for _, line := range strings.Split(s, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var v Verdict
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("verdict line is not JSON: %v: %q", err, line)
		}
		v.Raw = line
		out = append(out, v)
	}
	return out
}

// WaitVerdict waits until a verdict matching match exists and returns it.
func (h *Home) WaitVerdict(t testing.TB, what string, match func(Verdict) bool) Verdict {
	t.Helper()
	var found Verdict
	var last []Verdict
	WaitFor(t, waitDeadline, what, func() error {
		last = h.Verdicts(t)
		for _, v := range last {
			if match(v) {
				found = v
				return nil
			}
		}
		return fmt.Errorf("%d verdicts, none matches; last: %s", len(last), lastVerdicts(last, 5))
	})
	return found
}

func lastVerdicts(vs []Verdict, n int) string {
	if len(vs) > n {
		vs = vs[len(vs)-n:]
	}
	var b strings.Builder
	for _, v := range vs {
		b.WriteString("\n  " + v.Raw)
	}
	return b.String()
}

// tmuxSession is one session on the supervised server, as tmux itself lists it.
type tmuxSession struct {
	Name, ID, Control, Identity, Reservation, Generation string
	PanePID                                              int
}

// TmuxSessions lists the supervised server's sessions straight from tmux, the
// control session included (Control == "1").
func (h *Home) TmuxSessions(t testing.TB) []tmuxSession {
	t.Helper()
	out, err := h.Tmux("list-sessions", "-F",
		"#{session_name}\t#{session_id}\t#{@skc-control}\t#{@skc-identity}\t#{@skc-reservation}\t#{@skc-generation}\t#{pane_pid}")
	if err != nil {
		if strings.Contains(err.Error(), "no server running") || strings.Contains(err.Error(), "error connecting") {
			return nil
		}
		t.Fatalf("list-sessions: %v", err)
	}
	var ss []tmuxSession
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 7 {
			continue
		}
		s := tmuxSession{Name: f[0], ID: f[1], Control: f[2], Identity: f[3], Reservation: f[4], Generation: f[5]}
		fmt.Sscanf(f[6], "%d", &s.PanePID)
		ss = append(ss, s)
	}
	return ss
}

// AgentSessions are the supervised server's sessions other than the control one.
func (h *Home) AgentSessions(t testing.TB) []tmuxSession {
	t.Helper()
	var out []tmuxSession
	for _, s := range h.TmuxSessions(t) {
		if s.Control == "" {
			out = append(out, s)
		}
	}
	return out
}

// runHelperMode is the test binary impersonating a helper program (os/exec
// style). SKC_IT_HELPER=rawget: one raw HTTP request on SKC_IT_SOCK; prints the
// status line and body (used as another uid for the SO_PEERCRED test).
func runHelperMode(mode string) int {
	switch mode {
	case "nsinit":
		return runNSInit()
	case "stopagent":
		return runStopAgent(os.Args[1:])
	case "tmuxproxy":
		return runTmuxProxy()
	case "rawget":
		dir := strings.TrimSuffix(os.Getenv("SKC_IT_SOCK"), "/api.sock")
		h := &Home{Dir: dir, Runtime: dir}
		req, _ := http.NewRequest("GET", "http://skc"+os.Getenv("SKC_IT_PATH"), nil)
		resp, err := h.HTTP().Do(req)
		if err != nil {
			fmt.Printf("error %v\n", err)
			return 1
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		io.Copy(&b, resp.Body)
		fmt.Printf("%d\n%s", resp.StatusCode, b.String())
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown SKC_IT_HELPER mode %q\n", mode)
	return 2
}

// errorf is fmt.Errorf, short for WaitFor conditions.
func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
