package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

func rawRequest(t *testing.T, socket, method, path, body string, hdr map[string]string) (int, []byte) {
	t.Helper()
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req, _ := http.NewRequest(method, "http://skc"+path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	req.Close = true
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func decodeErr(t *testing.T, b []byte) (string, *verdict.Error) {
	t.Helper()
	var eb struct {
		Status string         `json:"status"`
		Error  *verdict.Error `json:"error"`
	}
	if err := json.Unmarshal(b, &eb); err != nil || eb.Error == nil {
		t.Fatalf("not the error shape: %s", b)
	}
	if !bytes.Contains(b, []byte(`"details":{`)) {
		t.Fatalf("details must be an object: %s", b)
	}
	return eb.Status, eb.Error
}

func wantErr(t *testing.T, status int, b []byte, wantStatus int, word, code, field string) {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("status %d, want %d: %s", status, wantStatus, b)
	}
	w, e := decodeErr(t, b)
	if w != word || e.Code != code {
		t.Fatalf("got %s/%s, want %s/%s: %s", w, e.Code, word, code, b)
	}
	if field != "" && e.Details["field"] != field {
		t.Fatalf("details.field %v, want %s: %s", e.Details["field"], field, b)
	}
}

func createBody(t *testing.T, dir string, extra string) string {
	return fmt.Sprintf(`{"state_dir":%q,"session_id":"abc","argv":["sh","-c","echo '#{pane_id}' \"$HOME\"; #(id)"]%s}`, dir, extra)
}

func TestCreateStatusesAndCanonicalSpec(t *testing.T) {
	h := start(t, os.Getuid())
	dir := sockDir(t)
	st, b := h.raw(t, "POST", "/v1/sessions", createBody(t, dir+"/./x/..", `,"env":{"B":"2","A":"1"},"label":"é l","wait_ms":250`), nil)
	if st != http.StatusCreated {
		t.Fatalf("status %d: %s", st, b)
	}
	var res CreateResponse
	if err := json.Unmarshal(b, &res); err != nil || res.Status != "published" || res.Session.Name != "skc-abc" {
		t.Fatalf("%v %s", err, b)
	}
	spec := h.fake.specs[0]
	real, _ := filepath.EvalSymlinks(dir)
	if spec.StateDir != real || spec.StateFile != filepath.Join(real, "abc.jsonl") || spec.Wait != 250*time.Millisecond ||
		strings.Join(spec.Env, ",") != "A=1,B=2" || spec.Label != "é l" {
		t.Fatalf("spec %+v", spec)
	}
	if spec.Argv[2] != `echo '#{pane_id}' "$HOME"; #(id)` {
		t.Fatalf("argv must be byte-for-byte: %q", spec.Argv[2])
	}
	h.fake.existing["abc"] = true
	st, b = h.raw(t, "POST", "/v1/sessions", createBody(t, dir, ""), nil)
	if st != http.StatusOK || !strings.Contains(string(b), `"status":"existing"`) {
		t.Fatalf("status %d: %s", st, b)
	}
	if h.fake.specs[1].Wait != DefaultWait {
		t.Fatalf("default wait %v", h.fake.specs[1].Wait)
	}
}

func TestCreateRefusedAndFailed(t *testing.T) {
	h := start(t, os.Getuid())
	dir := sockDir(t)
	cases := []struct {
		code   string
		status int
		word   string
	}{
		{verdict.CodeIdentityReservedLive, 409, "refused"},
		{verdict.CodeIdentityFenceContended, 409, "refused"},
		{verdict.CodeTmuxUnavailable, 503, "error"},
		{verdict.CodeFenceUnavailable, 503, "error"},
		{verdict.CodeSpawnFailed, 422, "error"},
	}
	for _, c := range cases {
		h.fake.err = verdict.Errorf(c.code, map[string]any{"owner_pid": 42}, "because")
		st, b := h.raw(t, "POST", "/v1/sessions", createBody(t, dir, ""), nil)
		wantErr(t, st, b, c.status, c.word, c.code, "")
		_, e := decodeErr(t, b)
		if e.Details["owner_pid"] != float64(42) || e.Message != "because" {
			t.Fatalf("details/message lost: %s", b)
		}
	}
	h.fake.err = fmt.Errorf("plain")
	st, b := h.raw(t, "GET", "/v1/sessions", "", nil)
	wantErr(t, st, b, 500, "error", verdict.CodeInternal, "")
}

func TestStrictDecoding(t *testing.T) {
	h := start(t, os.Getuid())
	dir := sockDir(t)
	cases := []struct{ name, body, field string }{
		{"unknown field", createBody(t, dir, `,"bogus":1`), "bogus"},
		{"case-folded key", `{"STATE_DIR":"/x","session_id":"a","argv":["x"]}`, "STATE_DIR"},
		{"duplicate key", createBody(t, dir, `,"label":"a","label":"b"`), "label"},
		{"wrong type argv", `{"state_dir":"/x","session_id":"a","argv":"sh"}`, "argv"},
		{"wrong type env", `{"state_dir":"/x","session_id":"a","argv":["x"],"env":{"A":1}}`, "env"},
		{"wrong type wait", `{"state_dir":"/x","session_id":"a","argv":["x"],"wait_ms":1.5}`, "wait_ms"},
		{"truncated", `{"state_dir":"/x","session_id":"a","argv":["x"`, "body"},
		{"empty", ``, "body"},
		{"array", `[]`, "body"},
		{"trailing", createBody(t, dir, "") + `{}`, "body"},
		{"not utf-8", "{\"state_dir\":\"/x\",\"session_id\":\"a\",\"argv\":[\"\xff\"]}", "body"},
		{"relative path", `{"state_dir":"rel","session_id":"a","argv":["x"]}`, "state_dir"},
		{"bad id", `{"state_dir":"/x","session_id":"-a","argv":["x"]}`, "session_id"},
		{"no argv", `{"state_dir":"/x","session_id":"a"}`, "argv"},
		{"env name", `{"state_dir":"/x","session_id":"a","argv":["x"],"env":{"1A":"v"}}`, "env"},
		{"label control", `{"state_dir":"/x","session_id":"a","argv":["x"],"label":"a\u001bb"}`, "label"},
		{"newline in path", `{"state_dir":"/x\ny","session_id":"a","argv":["x"]}`, "state_dir"},
		{"NUL in argv", `{"state_dir":"/x","session_id":"a","argv":["a\u0000b"]}`, "argv"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, b := h.raw(t, "POST", "/v1/sessions", c.body, nil)
			wantErr(t, st, b, 400, "invalid", verdict.CodeInvalidRequest, c.field)
		})
	}
	if len(h.fake.specs) != 0 {
		t.Fatalf("an invalid request reached the service: %+v", h.fake.specs)
	}
}

func TestBodyTooLarge(t *testing.T) {
	h := start(t, os.Getuid())
	big := `{"state_dir":"/x","session_id":"a","argv":["` + strings.Repeat("a", MaxBody) + `"]}`
	st, b := h.raw(t, "POST", "/v1/sessions", big, nil)
	wantErr(t, st, b, 413, "invalid", verdict.CodeBodyTooLarge, "")
	// Also where the endpoint reads no body: the limit is the API's.
	for _, m := range []string{"GET /v1/ping", "DELETE /v1/sessions/x"} {
		method, p, _ := strings.Cut(m, " ")
		st, b := h.raw(t, method, p, strings.Repeat("a", MaxBody+1), nil)
		wantErr(t, st, b, 413, "invalid", verdict.CodeBodyTooLarge, "")
	}
	// The limit with its unit, as docs/verdicts.md shows it.
	if _, e := decodeErr(t, b); e.Details["limit_bytes"] != float64(MaxBody) {
		t.Fatalf("details %v, want limit_bytes %d", e.Details, MaxBody)
	}
}

func TestPeerCredentialsRefused(t *testing.T) {
	h := start(t, os.Getuid()+1) // the daemon pretends to run as another uid
	for _, p := range []string{"/v1/ping", "/v1/sessions", "/metrics"} {
		st, b := h.raw(t, "GET", p, "", nil)
		wantErr(t, st, b, 403, "error", verdict.CodePermissionDenied, "")
	}
	_, err := h.client.List(context.Background())
	if verdict.CodeOf(err) != verdict.CodePermissionDenied || verdict.Classify(verdict.CodeOf(err)).Exit != 77 {
		t.Fatalf("client: %v", err)
	}
	if len(h.fake.refs) != 0 {
		t.Fatal("a refused peer reached the service")
	}
}

func TestHandlerWithoutPeerCredsRefused(t *testing.T) {
	srv, _ := New(Config{Service: newFake(), AllowUID: os.Getuid()})
	rec := newRecorder()
	req, _ := http.NewRequest("GET", "/v1/ping", nil)
	srv.Handler().ServeHTTP(rec, req)
	if rec.status != 403 {
		t.Fatalf("no creds must be refused, got %d", rec.status)
	}
	rec = newRecorder()
	srv.Handler().ServeHTTP(rec, req.WithContext(WithPeer(context.Background(), PeerCred{UID: uint32(os.Getuid())})))
	if rec.status != 200 {
		t.Fatalf("got %d", rec.status)
	}
}

func TestOriginRefused(t *testing.T) {
	h := start(t, os.Getuid())
	st, b := h.raw(t, "GET", "/v1/ping", "", map[string]string{"Origin": "http://evil.example"})
	wantErr(t, st, b, 403, "error", verdict.CodePermissionDenied, "")
	st, b = h.raw(t, "GET", "/v1/ping", "", map[string]string{"Origin": ""})
	wantErr(t, st, b, 403, "error", verdict.CodePermissionDenied, "")
}

func TestReadEndpoints(t *testing.T) {
	h := start(t, os.Getuid())
	cases := []struct {
		method, path string
		status       int
		want         []string
	}{
		{"GET", "/v1/ping", 200, []string{`{"ok":true}`}},
		{"GET", "/v1/info", 200, []string{`"version":"test"`, `"pid":`, `"started_at":"2026-11-30T01:02:03.456Z"`, `"home":"/h"`}},
		{"GET", "/v1/sessions", 200, []string{`"census":{"synced":true,"server_pid":1234,"server_started_at":`, `"tmux_version":"3.3a"`, `"sessions":[{"name":"skc-a","id":"$3","managed":true`}},
		{"GET", "/v1/sessions/skc-a", 200, []string{`"session":{"name":"skc-a"`, `"reservation":null`, `"verdicts":[]`}},
		{"GET", "/v1/identity?state_dir=/s&session_id=a", 200, []string{`"session":{`}},
		{"DELETE", "/v1/sessions/skc-a", 200, []string{`"status":"killed"`, `"verdict":{"@timestamp":`}},
		{"DELETE", "/v1/identity?state_dir=/s&session_id=a", 200, []string{`"status":"killed"`}},
		{"GET", "/v1/fence", 200, []string{`"reservations":[]`, `"identities":[{"state_dir":"/s"`}},
		{"GET", "/metrics", 200, []string{"skc_up 1"}},
	}
	for _, c := range cases {
		st, b := h.raw(t, c.method, c.path, "", nil)
		if st != c.status {
			t.Fatalf("%s %s: %d %s", c.method, c.path, st, b)
		}
		for _, w := range c.want {
			if !strings.Contains(string(b), w) {
				t.Fatalf("%s %s: %q not in %s", c.method, c.path, w, b)
			}
		}
	}
	last := h.fake.refs[len(h.fake.refs)-1]
	if last.StateDir != "/s" || last.SessionID != "a" || last.Name != "" {
		t.Fatalf("identity ref %+v", last)
	}
}

func TestNotFoundAndBadRefs(t *testing.T) {
	h := start(t, os.Getuid())
	st, b := h.raw(t, "GET", "/v1/sessions/missing", "", nil)
	wantErr(t, st, b, 404, "error", verdict.CodeNotFound, "")
	st, b = h.raw(t, "DELETE", "/v1/sessions/missing", "", nil)
	wantErr(t, st, b, 404, "error", verdict.CodeNotFound, "")
	st, b = h.raw(t, "GET", "/v1/nope", "", nil)
	wantErr(t, st, b, 404, "error", verdict.CodeNotFound, "")
	st, b = h.raw(t, "GET", "/v1/identity?state_dir=rel&session_id=a", "", nil)
	wantErr(t, st, b, 400, "invalid", verdict.CodeInvalidRequest, "state_dir")
	st, b = h.raw(t, "GET", "/v1/identity?state_dir=/s", "", nil)
	wantErr(t, st, b, 400, "invalid", verdict.CodeInvalidRequest, "session_id")
	st, b = h.raw(t, "GET", "/v1/verdicts?since=-1", "", nil)
	wantErr(t, st, b, 400, "invalid", verdict.CodeInvalidRequest, "since")
	// A name with a slash and a tmux format travels escaped and arrives intact.
	if _, err := h.client.Show(context.Background(), Ref{Name: "a/b #{x}"}); err != nil {
		t.Fatal(err)
	}
	if got := h.fake.refs[len(h.fake.refs)-1].Name; got != "a/b #{x}" {
		t.Fatalf("name %q", got)
	}
}

type recorder struct {
	hdr    http.Header
	status int
	body   bytes.Buffer
}

func newRecorder() *recorder                    { return &recorder{hdr: http.Header{}} }
func (r *recorder) Header() http.Header         { return r.hdr }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorder) WriteHeader(s int)           { r.status = s }

// TestForgetEndpoint: POST /v1/fence/forget takes {"host"} strictly and
// answers the service's forgotten rows and verdict.
func TestForgetEndpoint(t *testing.T) {
	h := start(t, os.Getuid())
	for _, c := range []struct{ name, body, field string }{
		{"no host", `{}`, "host"},
		{"empty host", `{"host":""}`, "host"},
		{"unknown field", `{"host":"a","bogus":1}`, "bogus"}, // named, as create names it
		{"wrong type", `{"host":1}`, "host"},                 // named, as create names its fields
		{"empty", ``, "body"},
	} {
		st, b := h.raw(t, "POST", "/v1/fence/forget", c.body, nil)
		wantErr(t, st, b, 400, "invalid", verdict.CodeInvalidRequest, c.field)
	}
	st, b := h.raw(t, "POST", "/v1/fence/forget", `{"host":"host-a"}`, nil)
	if st != 200 || !strings.Contains(string(b), `"status":"forgotten","host":"host-a","reservations":[],"identities":[],"verdict":{`) {
		t.Fatalf("forget: %d %s", st, b)
	}
}

// TestFleetQueries: ?fleet=1 lists every host's sessions (ListFleet) and
// reads the fleet's journal (FleetVerdictsSince), also as a follow that
// polls it; a bad value is invalid_request naming fleet.
func TestFleetQueries(t *testing.T) {
	h := start(t, os.Getuid())
	st, b := h.raw(t, "GET", "/v1/sessions?fleet=1", "", nil)
	if st != 200 || !strings.Contains(string(b), `"host":"host-a","attach_hint":"skc-supervisor attach 'skc-r'"`) {
		t.Fatalf("ls --fleet: %d %s", st, b)
	}
	for _, path := range []string{"/v1/sessions?fleet=2", "/v1/verdicts?fleet=yes"} {
		st, b := h.raw(t, "GET", path, "", nil)
		wantErr(t, st, b, 400, "invalid", verdict.CodeInvalidRequest, "fleet")
	}
	h.fake.emit(true)
	h.fake.emit(true)
	st, b = h.raw(t, "GET", "/v1/verdicts?fleet=1&since=1001", "", nil)
	if st != 200 || strings.Count(string(b), "\n") != 1 || !strings.Contains(string(b), `"sequence":1002`) {
		t.Fatalf("verdicts --fleet: %d %s", st, b)
	}
	c := h.client
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 8)
	done := make(chan error, 1)
	go func() {
		done <- c.FleetVerdicts(ctx, 1002, true, func(line []byte) error { got <- string(line); return nil })
	}()
	h.fake.emit(true) // never told to subscribers: only the poll finds it
	select {
	case line := <-got:
		if !strings.Contains(line, `"sequence":1003`) {
			t.Fatalf("followed %s", line)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("a fleet follow never saw the new record")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("follow ended with %v", err)
	}
}

// TestReleaseAndForgetBodies: the operator endpoints refuse a bad body with
// invalid_request naming the field when there is one (a wrong type, an
// unknown, repeated or case-folded key), the body otherwise.
func TestReleaseAndForgetBodies(t *testing.T) {
	h := start(t, os.Getuid())
	for _, c := range []struct{ path, body, field string }{
		{"/v1/fence/release", `{"reservation_id":1}`, "reservation_id"},
		{"/v1/fence/release", `{"reservation_id":"x","more":1}`, "more"},
		{"/v1/fence/release", `{"reservation_id":"x","reservation_id":"y"}`, "reservation_id"},
		{"/v1/fence/forget", `{"HOST":"a"}`, "HOST"},
		{"/v1/fence/release", `nonsense`, "body"},
		{"/v1/fence/release", ``, "body"},
		{"/v1/fence/release", `{}`, "reservation_id"},
		{"/v1/fence/forget", `{"host":["a"]}`, "host"},
	} {
		st, b := rawRequest(t, h.socket, "POST", c.path, c.body, nil)
		wantErr(t, st, b, http.StatusBadRequest, "invalid", verdict.CodeInvalidRequest, c.field)
	}
}

// TestMethodNotAllowed: a known path with the wrong method is 405 with the
// methods it takes (details.allowed); an unknown path stays 404.
func TestMethodNotAllowed(t *testing.T) {
	h := start(t, os.Getuid())
	cases := []struct {
		method, path string
		allowed      []any
	}{
		{"GET", "/v1/sessions/skc-x/input", []any{"POST"}},
		{"PUT", "/v1/sessions", []any{"GET", "HEAD", "POST"}},
		{"POST", "/v1/sessions/skc-x", []any{"GET", "HEAD", "DELETE"}},
		{"DELETE", "/v1/ping", []any{"GET", "HEAD"}},
		{"GET", "/v1/fence/release", []any{"POST"}},
	}
	for _, c := range cases {
		st, b := h.raw(t, c.method, c.path, "", nil)
		wantErr(t, st, b, 405, "invalid", verdict.CodeMethodNotAllowed, "")
		_, e := decodeErr(t, b)
		if fmt.Sprint(e.Details["allowed"]) != fmt.Sprint(c.allowed) {
			t.Errorf("%s %s: allowed %v, want %v", c.method, c.path, e.Details["allowed"], c.allowed)
		}
	}
	for _, p := range []string{"/v1/nope", "/v1/sessions/a/b/c", "/"} {
		st, b := h.raw(t, "GET", p, "", nil)
		wantErr(t, st, b, 404, "error", verdict.CodeNotFound, "")
	}
}

// TestRequestLineChecks: a path not written clean is a JSON not_found (the
// mux would redirect with an HTML page); a query parameter given twice or a
// query that does not parse is invalid_request naming it (never the first
// value silently, also not for DELETE); a restart's body, when given, must
// be empty or {}.
func TestRequestLineChecks(t *testing.T) {
	h := start(t, os.Getuid())
	st, b := h.raw(t, "GET", "//v1/ping", "", nil)
	wantErr(t, st, b, http.StatusNotFound, "error", verdict.CodeNotFound, "")
	st, b = h.raw(t, "DELETE", "/v1/identity?state_dir=/s&session_id=a&session_id=b", "", nil)
	wantErr(t, st, b, http.StatusBadRequest, "invalid", verdict.CodeInvalidRequest, "session_id")
	st, b = h.raw(t, "GET", "/v1/identity?state_dir=/s&session_id=a;x=%zz", "", nil)
	wantErr(t, st, b, http.StatusBadRequest, "invalid", verdict.CodeInvalidRequest, "query")
	st, b = h.raw(t, "POST", "/v1/sessions/x/restart", `{"x":1}`, nil)
	wantErr(t, st, b, http.StatusBadRequest, "invalid", verdict.CodeInvalidRequest, "x")
	if st, b = h.raw(t, "GET", "/v1/ping", "", nil); st != http.StatusOK {
		t.Fatalf("ping: %d %s", st, b)
	}
}

// TestEnvKeyTwiceRefused: a key repeated inside the env object is refused as
// a repeated top-level key is (encoding/json would keep the last).
func TestEnvKeyTwiceRefused(t *testing.T) {
	h := start(t, os.Getuid())
	st, b := h.raw(t, "POST", "/v1/sessions", createBody(t, sockDir(t), `,"env":{"A":"first","A":"second"}`), nil)
	wantErr(t, st, b, http.StatusBadRequest, "invalid", verdict.CodeInvalidRequest, "env")
}

// TestPartialBodyTimesOut: a client that sends its headers and only part of
// its body gets invalid_request once the body's time is up, and the
// connection's other use (a later request) is not held by it.
func TestPartialBodyTimesOut(t *testing.T) {
	old := bodyTimeout
	bodyTimeout = 100 * time.Millisecond
	t.Cleanup(func() { bodyTimeout = old })
	h := start(t, os.Getuid())
	c, err := net.Dial("unix", h.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /v1/sessions HTTP/1.1\r\nHost: skc\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"state_dir\":"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantErr(t, resp.StatusCode, b, http.StatusBadRequest, "invalid", "invalid_request", "body")
	h.fake.mu.Lock()
	n := len(h.fake.specs)
	h.fake.mu.Unlock()
	if n != 0 {
		t.Fatalf("a create ran on a partial body")
	}
	if err := h.client.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}
