package integration

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestTalkCLIAndAPI drives screen, send, output and wait through the real
// binary and the raw API, against a `cat` agent (cooked terminal: it echoes
// and prints each line it reads).
func TestTalkCLIAndAPI(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	sd := t.TempDir()
	r := d.CLI(t, "create", "--state-dir", sd, "--session-id", "talk-1", "--json", "--", "cat")
	var a Answer
	mustJSON(t, r, &a)
	d.NoteSession(t)
	name := a.Session.Name
	lines := followHTTP(t, d, name) // from before the input

	hostile := `#{pane_pid} #(id) C-c $(id) ; "q' ~ é日本`
	if r := d.CLI(t, "send", name, "--enter", "--", hostile); r.Code != 0 {
		t.Fatal(r)
	}
	// Twice on the screen: the terminal's echo and cat's copy.
	WaitFor(t, 30*time.Second, "screen shows the text twice", func() error {
		r := d.CLI(t, "screen", name, "--json")
		var s struct {
			Lines []string `json:"lines"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &s); err != nil {
			return err
		}
		if n := strings.Count(strings.Join(s.Lines, "\n"), hostile); n != 2 {
			return fmt.Errorf("text shown %d times: %q", n, s.Lines)
		}
		return nil
	})
	readStream(t, lines, hostile+"\r\n"+hostile)

	// Text from stdin; wait --text sees it.
	if r := d.CLIWith(t, CLIOpts{Stdin: strings.NewReader("from stdin\n")}, "send", name); r.Code != 0 {
		t.Fatal(r)
	}
	if r := d.CLI(t, "wait", name, "--text", "from stdin", "--timeout", "30s"); r.Code != 0 || strings.TrimSpace(r.Stdout) != "text" {
		t.Fatal(r)
	}
	if r := d.CLI(t, "wait", name, "--text", "never shown", "--timeout", "200ms"); r.Code != 1 || !strings.Contains(r.Stderr, "(timeout)") {
		t.Fatalf("wait timeout: %s", r)
	}
	checkTalkRefusals(t, d, name)
	checkKillTail(t, d, name, lines)
}

// followHTTP opens GET …/output?follow=1 and returns its lines; the channel
// closes when the stream ends.
// awaitStreamEnd drains a follow stream until the daemon ends it, which it
// must do once the followed session is gone (why: what ended it), with a last
// line that says so ({"at", "end": "session_ended"}).
func awaitStreamEnd(t *testing.T, lines <-chan string, why string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	last := ""
	for {
		select {
		case l, ok := <-lines:
			if ok {
				last = l
				continue
			}
			var end struct{ At, End string }
			if json.Unmarshal([]byte(last), &end) != nil || end.End != "session_ended" || end.At == "" {
				t.Fatalf("output stream ended by %s: last line %q, want {\"at\", \"end\": \"session_ended\"}", why, last)
			}
			return
		case <-deadline:
			t.Fatalf("output stream did not end with %s", why)
		}
	}
}

func followHTTP(t *testing.T, d *Daemon, name string) <-chan string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://skc/v1/sessions/"+name+"/output?follow=1", nil)
	hc := d.HTTP()
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("output?follow=1: %v %v", resp, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return lines
}

// readStream reads output lines until their data contains want.
func readStream(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	var got []byte
	for !strings.Contains(string(got), want) {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("output stream ended; got %q", got)
			}
			var o struct {
				At   string `json:"at"`
				Data string `json:"data_b64"`
			}
			if err := json.Unmarshal([]byte(l), &o); err != nil || o.At == "" {
				t.Fatalf("output line %q: %v", l, err)
			}
			b, _ := base64.StdEncoding.DecodeString(o.Data)
			got = append(got, b...)
		case <-time.After(30 * time.Second):
			t.Fatalf("output stream: got %q", got)
		}
	}
}

// checkTalkRefusals: bad input is refused naming its field, sessions not ours
// are not found, and nothing reaches the agent.
func checkTalkRefusals(t *testing.T, d *Daemon, name string) {
	t.Helper()
	if _, err := d.Tmux("new-session", "-d", "-s", "by-hand", "sleep 1000"); err != nil {
		t.Fatal(err)
	}
	in := "/v1/sessions/" + name + "/input"
	for _, c := range []struct {
		method, path, body string
		status             int
		field              string
	}{
		{"POST", in, "{\"text\":\"a\xffb\"}", 400, "text"},
		{"POST", in, `{"text":"a\ud800b"}`, 400, "text"},
		{"POST", in, `{"text":"a\u0000b"}`, 400, "text"},
		{"POST", in, `{"keys":["Enter","rm -rf"]}`, 400, "keys"},
		{"POST", in, `{"text":"x","bogus":1}`, 400, "bogus"},
		{"POST", in, `{"text":"` + strings.Repeat("x", 64<<10+1) + `"}`, 400, "text"},
		{"GET", "/v1/sessions/" + name + "/screen?lines=10001", "", 400, "lines"},
		{"GET", "/v1/sessions/" + name + "/screen?lines=-1", "", 400, "lines"},
		{"GET", "/v1/sessions/" + name + "/wait?idle=1s&text=x", "", 400, "condition"},
		{"GET", "/v1/sessions/" + name + "/output", "", 400, "follow"},
		{"POST", "/v1/sessions/skc-none/input", `{"text":"x"}`, 404, ""},
		{"GET", "/v1/sessions/skc-none/screen", "", 404, ""},
		{"GET", "/v1/sessions/by-hand/screen", "", 404, ""}, // a session that is not ours
		{"POST", "/v1/sessions/by-hand/input", `{"text":"x"}`, 404, ""},
		{"GET", "/v1/sessions/by-hand/output?follow=1", "", 404, ""},
	} {
		status, b := d.Do(t, c.method, c.path, c.body, nil)
		var ans Answer
		_ = decodeOne(string(b), &ans)
		if status != c.status || (c.field != "" && ans.Field() != c.field) {
			t.Errorf("%s %.60s: %d %.300s, want %d on field %q", c.method, c.path, status, b, c.status, c.field)
		}
	}
	r := d.CLI(t, "screen", name)
	if strings.Contains(r.Stdout, "a\ufffdb") || strings.Contains(r.Stdout, "rm -rf") {
		t.Errorf("a refused input reached the agent:\n%s", r.Stdout)
	}
	if r := d.CLIWith(t, CLIOpts{Stdin: strings.NewReader("bad \xff")}, "send", name, "--json"); r.Code != 2 {
		t.Errorf("send of invalid UTF-8: %s", r)
	}
}

// checkKillTail: the kill verdict carries the output tail; then wait --idle is
// exit 4 (gone) and the output stream ends.
func checkKillTail(t *testing.T, d *Daemon, name string, lines <-chan string) {
	t.Helper()
	r := d.CLI(t, "kill", name, "--json")
	var k struct {
		Verdict struct {
			Skc struct {
				Output struct {
					Tail string `json:"tail"`
				} `json:"output"`
			} `json:"skc"`
		} `json:"verdict"`
	}
	mustJSON(t, r, &k)
	if !strings.Contains(k.Verdict.Skc.Output.Tail, "from stdin") {
		t.Errorf("kill verdict's output tail: %q", k.Verdict.Skc.Output.Tail)
	}
	if r := d.CLI(t, "wait", name, "--idle", "1s"); r.Code != 4 {
		t.Errorf("wait on a gone session: %s", r)
	}
	awaitStreamEnd(t, lines, "the session")
}

// TestTalkByIdentityAndAfterEnd: the four verbs name a session by identity as
// well as by NAME, and wait --exit that starts after the agent has ended
// answers exit 0 with its ended verdict (CONTRACT: "for --exit: 0 with the
// ended verdict"), by name and by identity.
func TestTalkByIdentityAndAfterEnd(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	sd := t.TempDir()
	id := []string{"--state-dir", sd, "--session-id", "talk-id"}
	r := d.CLI(t, append(append([]string{"create"}, id...), "--json", "--", "sh", "-c", `echo started; read x; echo "got $x"; read y; exit 3`)...)
	var a Answer
	mustJSON(t, r, &a)
	d.NoteSession(t)
	name := a.Session.Name
	if r := d.CLI(t, append(append([]string{"wait"}, id...), "--text", "started", "--timeout", "30s")...); r.Code != 0 {
		t.Fatal(r)
	}
	if r := d.CLI(t, append(append([]string{"screen"}, id...), "--json")...); r.Code != 0 || !strings.Contains(r.Stdout, `"started"`) {
		t.Fatal(r)
	}
	// It wrote at once (most likely within its session's first second, which
	// tmux's window_activity does not tell from no output) and then waits:
	// activity_at is set all the same.
	WaitFor(t, 30*time.Second, "activity_at set", func() error {
		var s struct {
			Session struct {
				ActivityAt *string `json:"activity_at"`
			} `json:"session"`
		}
		mustJSON(t, d.CLI(t, append(append([]string{"show"}, id...), "--json")...), &s)
		if s.Session.ActivityAt == nil {
			return fmt.Errorf("activity_at null")
		}
		return nil
	})
	if r := d.CLI(t, append(append([]string{"send"}, id...), "--enter", "--", "by", "identity")...); r.Code != 0 {
		t.Fatal(r)
	}
	// The agent exits only once its answer is on the screen: tmux stops
	// reading a pane whose process has exited once its pty shows nothing
	// unread, so output written just before an exit can still be on its way
	// through the kernel's pty and never reach the pane (docs/contract.md,
	// "Talking to agents": the tail is what the pane did show).
	if r := d.CLI(t, append(append([]string{"wait"}, id...), "--text", "got by identity", "--timeout", "30s")...); r.Code != 0 {
		t.Fatal(r)
	}
	if r := d.CLI(t, append(append([]string{"send"}, id...), "--enter")...); r.Code != 0 {
		t.Fatal(r)
	}
	exitVerdict := func(r Result) {
		t.Helper()
		var w struct {
			Status  string `json:"status"`
			Verdict struct {
				Skc struct {
					Verdict string `json:"verdict"`
					Exit    struct {
						Status *int `json:"status"`
					} `json:"exit"`
					Output struct {
						Tail string `json:"tail"`
					} `json:"output"`
				} `json:"skc"`
			} `json:"verdict"`
		}
		mustJSON(t, r, &w)
		v := w.Verdict.Skc
		if r.Code != 0 || w.Status != "exited" || v.Verdict != "ended" || v.Exit.Status == nil || *v.Exit.Status != 3 ||
			!strings.Contains(v.Output.Tail, "got by identity") {
			t.Fatalf("wait --exit: %s", r)
		}
	}
	exitVerdict(d.CLI(t, append(append([]string{"wait"}, id...), "--exit", "--timeout", "60s", "--json")...))
	// The agent has ended: both names still answer with its verdict.
	exitVerdict(d.CLI(t, "wait", name, "--exit", "--json"))
	exitVerdict(d.CLI(t, append(append([]string{"wait"}, id...), "--exit", "--json")...))
	if r := d.CLI(t, "wait", name+"0", "--exit"); r.Code != 4 || !strings.Contains(r.Stderr, "(not_found)") {
		t.Fatalf("wait --exit on a name that never was: %s", r)
	}
	if r := d.CLI(t, append([]string{"screen"}, id...)...); r.Code != 4 {
		t.Fatalf("screen of an ended session: %s", r)
	}
}

// TestTalkKeptForRestart: a session kept while its restart waits out its delay
// shows its dead pane (screen: pane_dead true, the agent's last lines), can be
// followed and waited on, and input to it is 409 agent_not_running with
// details.restarting (the delay,
// 60 s, the most there is, outlasts the checks).
func TestTalkKeptForRestart(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	sd := t.TempDir()
	r := d.CLI(t, "create", "--state-dir", sd, "--session-id", "kept", "--restart", "on-failure",
		"--restart-delay", "60s", "--json", "--", "sh", "-c", "echo last words; read x; exit 3")
	var a Answer
	mustJSON(t, r, &a)
	d.NoteSession(t)
	name := a.Session.Name
	// Exits once its words are on the screen (see TestTalkByIdentityAndAfterEnd).
	if r := d.CLI(t, "wait", name, "--text", "last words", "--timeout", "30s"); r.Code != 0 {
		t.Fatal(r)
	}
	if r := d.CLI(t, "send", name, "--enter"); r.Code != 0 {
		t.Fatal(r)
	}
	WaitFor(t, 60*time.Second, "the session waits for its restart", func() error {
		var s Answer
		mustJSON(t, d.CLI(t, "show", name, "--json"), &s)
		if s.Session == nil || s.Session.State != "exited" {
			return fmt.Errorf("show: %+v", s.Session)
		}
		return nil
	})
	var sc struct {
		Lines    []string `json:"lines"`
		PaneDead bool     `json:"pane_dead"`
	}
	// tmux's "Pane is dead" line scrolled the top row in to history.
	r = d.CLI(t, "screen", name, "--lines", "10", "--json")
	mustJSON(t, r, &sc)
	if r.Code != 0 || !sc.PaneDead || !strings.Contains(strings.Join(sc.Lines, "\n"), "last words") {
		t.Fatalf("screen of a kept session: %s", r)
	}
	r = d.CLI(t, "screen", "--state-dir", sd, "--session-id", "kept", "--lines", "10", "--json")
	if mustJSON(t, r, &sc); r.Code != 0 || !sc.PaneDead || !strings.Contains(strings.Join(sc.Lines, "\n"), "last words") {
		t.Fatalf("screen of a kept session by identity: %s", r)
	}
	if r := d.CLI(t, "send", "--state-dir", sd, "--session-id", "kept", "--", "x"); r.Code != 1 || !strings.Contains(r.Stderr, "(agent_not_running)") {
		t.Fatalf("send to a kept session by identity: %s", r)
	}
	status, b := d.Do(t, "POST", "/v1/sessions/"+name+"/input", `{"text":"x"}`, nil)
	var ans Answer
	_ = decodeOne(string(b), &ans)
	if status != 409 || ans.Error == nil || ans.Error.Code != "agent_not_running" || ans.Error.Details["restarting"] != true {
		t.Fatalf("input to a kept session: %d %s", status, b)
	}
	// It is not gone: its (dead) pane is idle, and its output can be followed
	// (the next generation's would come), until the kill ends the stream.
	if r := d.CLI(t, "wait", name, "--idle", "1s", "--timeout", "30s"); r.Code != 0 || strings.TrimSpace(r.Stdout) != "idle" {
		t.Fatalf("wait --idle on a kept session: %s", r)
	}
	lines := followHTTP(t, d, name)
	if r := d.CLI(t, "kill", name); r.Code != 0 {
		t.Fatal(r)
	}
	awaitStreamEnd(t, lines, "the kill")
}

// TestOutputEndsWithDaemonStop: a follow stream the daemon ends because it is
// stopping says so on its last line, so a reader knows to reconnect rather
// than take the session for ended.
func TestOutputEndsWithDaemonStop(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	spec := NewSpec(t, "outstop")
	spec.Argv = []string{"/bin/sh", "-c", "echo started; exec cat"}
	s := d.MustCreate(t, spec, "published")
	lines := followHTTP(t, d, s.Name)
	// A wait the stop cuts short is busy (ask the next daemon), not the
	// timeout its ended wait would look like.
	waited := make(chan Result, 1)
	go func() { waited <- d.CLI(t, "wait", s.Name, "--idle", "1h", "--json") }()
	WaitFor(t, waitDeadline, "the wait's output subscription", func() error {
		_, b := d.Get(t, "/metrics")
		if !strings.Contains(string(b), "\nskc_output_subscribers 2\n") {
			return errorf("subscribers: not 2 yet")
		}
		return nil
	})
	d.Stop(t)
	last := ""
	for l := range lines {
		last = l
	}
	var end struct{ At, End string }
	if json.Unmarshal([]byte(last), &end) != nil || end.End != "supervisor_stopping" {
		t.Fatalf("last line %q, want {\"at\", \"end\": \"supervisor_stopping\"}", last)
	}
	if r := <-waited; r.Code != 75 || !strings.Contains(r.Stdout, `"busy"`) || strings.Contains(r.Stdout, "timeout") {
		t.Errorf("wait cut short by the stop: want exit 75 (busy), no word of a timeout\n%s", r)
	}
}

// TestStuckFollowerDoesNotHoldTheStop: a follow client that stopped reading
// while its agent writes a lot holds a blocked write; the daemon's stop gives
// it a short grace and goes on — its API shutdown completes (no "API
// shutdown" warning of a bound passed) and it exits 0.
func TestStuckFollowerDoesNotHoldTheStop(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	spec := NewSpec(t, "stuckreader")
	spec.Argv = []string{"/bin/sh", "-c", "echo started; sleep 1; yes skc-stuck-reader | head -c 30000000; sleep 600"}
	s := d.MustCreate(t, spec, "published")
	conn, err := net.Dial("unix", d.APISock())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET /v1/sessions/%s/output?follow=1 HTTP/1.1\r\nHost: skc\r\n\r\n", s.Name); err != nil {
		t.Fatal(err)
	}
	// Never read: the daemon's writes fill the socket and block.
	WaitFor(t, waitDeadline, "the follower dropping output (its writes blocked)", func() error {
		_, b := d.Get(t, "/metrics")
		if !strings.Contains(string(b), "\nskc_output_dropped_bytes_total ") ||
			strings.Contains(string(b), "\nskc_output_dropped_bytes_total 0\n") {
			return errorf("nothing dropped yet")
		}
		return nil
	})
	d.Stop(t)
	if strings.Contains(d.Log(), `"API shutdown"`) {
		t.Fatalf("the stop waited out its bound for the stuck follower:\n%s", clip(d.Log()))
	}
}
