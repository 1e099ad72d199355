package integration

import (
	"encoding/json"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// showAnswer is `show --json`: session null when an identity's session is gone.
type showAnswer struct {
	Session     *Session        `json:"session"`
	Reservation json.RawMessage `json:"reservation"`
	Verdicts    []Verdict       `json:"verdicts"`
	Error       *APIError       `json:"error"`
}

// TestEveryNameReachesTheSession: after a rename by hand, show, kill, attach
// and GET/DELETE /v1/sessions/{name} take the current name, the $id, the name
// create printed, or the identity; show of an unmanaged session that ls lists
// works; show by identity after the session is gone answers its history.
func TestEveryNameReachesTheSession(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	spec := NewSpec(t, "renamed-1")
	s := d.MustCreate(t, spec, "published")
	if out, err := d.Tmux("rename-session", "-t", "="+s.Name, "my-renamed"); err != nil {
		t.Fatalf("rename: %v %s", err, out)
	}
	if out, err := d.Tmux("new-session", "-d", "-s", "by-hand", "sleep 1000"); err != nil {
		t.Fatalf("new-session: %v %s", err, out)
	}
	// create answers existing with the current name; that name is the way in.
	again := d.MustCreate(t, spec, "existing")
	if again.Name != "my-renamed" || again.ID != s.ID {
		t.Fatalf("existing after rename: %+v", again)
	}
	for _, ref := range [][]string{{"my-renamed"}, {s.ID}, {s.Name}, {"--state-dir", spec.StateDir, "--session-id", spec.SessionID}} {
		var sh showAnswer
		r := d.CLI(t, append([]string{"show", "--json"}, ref...)...)
		mustJSON(t, r, &sh)
		if r.Code != 0 || sh.Session == nil || sh.Session.ID != s.ID || sh.Session.Name != "my-renamed" || len(sh.Verdicts) == 0 {
			t.Errorf("show %q: want the renamed session\n%s", ref, r)
		}
	}
	for _, name := range []string{"my-renamed", s.ID} {
		if status, body := d.Get(t, "/v1/sessions/"+url.PathEscape(name)); status != 200 || !strings.Contains(string(body), `"id":"`+s.ID+`"`) {
			t.Errorf("GET /v1/sessions/%s: %d %s", name, status, body)
		}
	}
	var sh showAnswer
	r := d.CLI(t, "show", "--json", "by-hand")
	mustJSON(t, r, &sh)
	if r.Code != 0 || sh.Session == nil || sh.Session.Managed || string(sh.Reservation) != "null" || sh.Verdicts == nil || len(sh.Verdicts) != 0 {
		t.Errorf("show of an unmanaged session: want managed false, no reservation, no verdicts\n%s", r)
	}
	expectError(t, d.CLI(t, "kill", "--json", "by-hand"), 4, "error", "not_found", "")
	expectError(t, d.CLI(t, "show", "--json", "my-renam"), 4, "error", "not_found", "")

	if status, body := d.Do(t, "DELETE", "/v1/sessions/"+url.PathEscape(s.ID), "", nil); status != 200 || !strings.Contains(string(body), `"killed"`) {
		t.Fatalf("DELETE by $id: %d %s", status, body)
	}
	sh = showAnswer{}
	r = d.CLI(t, "show", "--json", "--state-dir", spec.StateDir, "--session-id", spec.SessionID)
	mustJSON(t, r, &sh)
	if r.Code != 0 || sh.Session != nil || !strings.Contains(r.Stdout, `"session":null`) || len(sh.Verdicts) < 2 ||
		sh.Verdicts[len(sh.Verdicts)-1].SKC.Verdict != "ended" {
		t.Errorf("show by identity after the kill: want session null and the history\n%s", r)
	}
	expectError(t, d.CLI(t, "show", "--json", "my-renamed"), 4, "error", "not_found", "")
	expectError(t, d.CLI(t, "kill", "--json", "--state-dir", spec.StateDir, "--session-id", spec.SessionID), 4, "error", "not_found", "")
	r = d.CLI(t, "attach", "--state-dir", spec.StateDir, "--session-id", spec.SessionID)
	if r.Code != 4 {
		t.Errorf("attach to an identity without a session: want exit 4\n%s", r)
	}
	other := NewSpec(t, "never")
	expectError(t, d.CLI(t, "show", "--json", "--state-dir", other.StateDir, "--session-id", "never"), 4, "error", "not_found", "")
}

// TestCommandThatCannotStart: spawn_failed (exit 1, HTTP 422) with
// details.reason before published, nothing in tmux, the verdict in the
// identity's history.
func TestCommandThatCannotStart(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	noExec := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(t.TempDir(), "orphan")
	if err := os.WriteFile(orphan, []byte("#!/no/such/interpreter\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, reason string
		mod          func(*Spec)
	}{
		{"missing", "executable_not_found", func(s *Spec) { s.Argv = []string{"/no/such/binary"} }},
		{"not-on-path", "executable_not_found", func(s *Spec) { s.Argv = []string{"no-such-command-skc"} }},
		{"request-path", "executable_not_found", func(s *Spec) { s.Argv = []string{"sleep", "1"}; s.Env = []string{"PATH=/nonexistent"} }},
		{"no-exec", "not_executable", func(s *Spec) { s.Argv = []string{noExec} }},
		{"interpreter", "executable_not_found", func(s *Spec) { s.Argv = []string{orphan} }},
		{"cwd", "cwd_missing", func(s *Spec) { s.Cwd = "/nonexistent/dir" }},
	}
	for _, c := range cases {
		spec := NewSpec(t, "cannot-"+c.name)
		c.mod(&spec)
		a := expectError(t, d.CLI(t, spec.Args()...), 1, "error", "spawn_failed", "")
		if a.Error != nil && a.Error.Details["reason"] != c.reason {
			t.Errorf("%s: details.reason %v, want %s", c.name, a.Error.Details["reason"], c.reason)
		}
		var sh showAnswer
		r := d.CLI(t, "show", "--json", "--state-dir", spec.StateDir, "--session-id", spec.SessionID)
		mustJSON(t, r, &sh)
		if r.Code != 0 || sh.Session != nil || len(sh.Verdicts) != 1 || sh.Verdicts[0].SKC.Code != "spawn_failed" ||
			sh.Verdicts[0].SKC.Evidence["reason"] != c.reason {
			t.Errorf("%s: show by identity: want the spawn_failed verdict\n%s", c.name, r)
		}
	}
	if n := len(d.AgentSessions(t)); n != 0 {
		t.Errorf("%d sessions left in tmux", n)
	}
	body := `{"state_dir":"` + t.TempDir() + `","session_id":"http","argv":["/no/such/binary"]}`
	if status, b := d.Do(t, "POST", "/v1/sessions", body, nil); status != 422 || !strings.Contains(string(b), `"executable_not_found"`) {
		t.Errorf("POST with a missing executable: %d %s, want 422", status, b)
	}
}

// TestExistingHomeTightened: serve tightens a hand-made 0755 home with a 0644
// fence to 0700/0600, refuses a fence file with a second hard link, and a
// too-long runtime path leaves no directory behind.
func TestExistingHomeTightened(t *testing.T) {
	t.Parallel()
	h := NewHome(t)
	d := h.Start(t, DaemonOpts{})
	d.Stop(t)
	if err := os.Chmod(h.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fence := filepath.Join(h.Dir, "fence.sqlite")
	if err := os.Chmod(fence, 0o644); err != nil {
		t.Fatal(err)
	}
	d = h.Start(t, DaemonOpts{})
	for p, want := range map[string]os.FileMode{h.Dir: 0o700, fence: 0o600} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %04o", p, fi.Mode().Perm(), want)
		}
	}
	if !strings.Contains(d.Log(), "tightened") || !strings.Contains(d.Log(), fence) {
		t.Errorf("serve did not say what it tightened:\n%s", clip(d.Log()))
	}
	d.Stop(t)

	link := filepath.Join(t.TempDir(), "second-name")
	if err := os.Link(fence, link); err != nil {
		t.Skip(err)
	}
	r := h.CLI(t, "serve")
	if r.Code != 2 || !strings.Contains(r.Stderr, "hard link") || !strings.Contains(r.Stderr, fence) {
		t.Errorf("serve with a hard-linked fence: want exit 2 naming the file\n%s", r)
	}
	os.Remove(link)

	root := t.TempDir()
	long := filepath.Join(root, "a", strings.Repeat("x", 100))
	r = h.CLI(t, "serve", "--runtime-dir", long)
	if r.Code != 2 {
		t.Errorf("serve with a too-long runtime dir: want exit 2\n%s", r)
	}
	if _, err := os.Lstat(filepath.Join(root, "a")); err == nil {
		t.Errorf("a refused runtime dir left %s behind", filepath.Join(root, "a"))
	}
}

// TestFenceJSONEndedAtNull: a live identity's ended_at is null in fence --json.
func TestFenceJSONEndedAtNull(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	d.MustCreate(t, NewSpec(t, "fence-null"), "published")
	r := d.CLI(t, "fence", "--json")
	if r.Code != 0 || !strings.Contains(r.Stdout, `"ended_at":null`) || strings.Contains(r.Stdout, "0001-01-01") {
		t.Errorf("fence --json: want ended_at null for the live identity\n%s", r)
	}
}

// TestServeOnATerminal: serve on a terminal logs in zerolog's console format
// (no JSON lines), says where it listens and prints commands to try; the `ls`
// it prints reaches this daemon from a shell without SKC_HOME (the home is
// given on the command line, before the verb); Ctrl-C (SIGINT) ends it with
// status 0.
func TestServeOnATerminal(t *testing.T) {
	t.Parallel()
	h := NewHome(t)
	cmd := exec.Command(needBinary(t), "serve")
	cmd.Env = h.Env("TERM=xterm-256color", "NO_COLOR=1")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 50, Cols: 250})
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	screen := &ptyScreen{}
	go io.Copy(screen, ptmx)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped { // a failure before the SIGINT: end our serve by its pid
			cmd.Process.Kill()
			<-exited
		}
	}()
	WaitFor(t, startDeadline, "serve's try-it lines", func() error {
		if s := screen.String(); !strings.Contains(s, "stop with Ctrl-C") {
			return errorf("screen so far: %q", s)
		}
		return nil
	})
	out := screen.String()
	if strings.Contains(out, `"level"`) || !strings.Contains(out, "INF") || !strings.Contains(out, h.APISock()) {
		t.Errorf("serve on a terminal: want console logs at info naming %s, got %q", h.APISock(), clip(out))
	}
	var lsLine string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); strings.HasSuffix(l, " ls") {
			lsLine = l
		}
	}
	if lsLine == "" {
		t.Fatalf("no ls line among the try-it lines: %q", clip(out))
	}
	sh := exec.Command("/bin/sh", "-c", lsLine)
	for _, kv := range h.Env() {
		if !strings.HasPrefix(kv, "SKC_HOME=") {
			sh.Env = append(sh.Env, kv)
		}
	}
	if b, err := sh.CombinedOutput(); err != nil || !strings.Contains(string(b), "session(s)") {
		t.Errorf("the printed %q: %v\n%s", lsLine, err, b)
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("serve after Ctrl-C: %v, want status 0\n%s", err, clip(screen.String()))
		}
	case <-time.After(waitDeadline):
		t.Fatalf("serve did not stop after SIGINT\n%s", clip(screen.String()))
	}
}
