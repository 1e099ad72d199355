package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestHTTPAPI walks docs/contract.md's HTTP table on the raw socket.
func TestHTTPAPI(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	sd := t.TempDir()
	req := `{"state_dir":` + strconv.Quote(sd) + `,"session_id":"api-1","argv":["sleep","1000"],"env":{"A":"1"},"label":"via api"}`

	status, b := d.Do(t, "POST", "/v1/sessions", req, nil)
	var a Answer
	if status != 201 || decodeOne(string(b), &a) != nil || a.Status != "published" || a.Session == nil {
		t.Fatalf("POST /v1/sessions: %d %s, want 201 published", status, b)
	}
	d.NoteSession(t)
	var raw map[string]any
	json.Unmarshal(b, &raw)
	checkKeys(t, "POST.session", raw["session"], sessionKeys)
	name := a.Session.Name
	if status, b = d.Do(t, "POST", "/v1/sessions", req, nil); status != 200 || !strings.Contains(string(b), `"existing"`) {
		t.Errorf("POST again: %d %s, want 200 existing", status, b)
	}

	mismatch := `{"state_dir":` + strconv.Quote(sd) + `,"session_id":"api-1","state_file":` + strconv.Quote(sd+"/other.jsonl") + `,"argv":["sleep","1000"]}`
	status, b = d.Do(t, "POST", "/v1/sessions", mismatch, nil)
	if err := decodeOne(string(b), &a); status != 409 || err != nil || a.Status != "refused" || a.Error == nil ||
		a.Error.Code != "identity_state_file_mismatch" {
		t.Errorf("POST with another state_file: %d %s, want 409 refused identity_state_file_mismatch", status, b)
	}

	for _, c := range []struct {
		method, path string
		status       int
		keys         map[string]string
	}{
		{"GET", "/v1/sessions", 200, map[string]string{"census": "object", "sessions": "array"}},
		{"GET", "/v1/sessions/" + name, 200, map[string]string{"session": "object", "verdicts": "array"}},
		{"GET", "/v1/sessions/skc-none", 404, map[string]string{"status": "string", "error": "object"}},
		{"DELETE", "/v1/sessions/skc-none", 404, map[string]string{"status": "string", "error": "object"}},
		{"GET", "/v1/fence", 200, map[string]string{"reservations": "array", "identities": "array"}},
		{"GET", "/v1/ping", 200, map[string]string{"ok": "bool"}},
		{"GET", "/v1/info", 200, map[string]string{"version": "string", "pid": "number", "started_at": "string", "home": "string"}},
	} {
		status, b := d.Do(t, c.method, c.path, "", nil)
		var m map[string]any
		if status != c.status || decodeOne(string(b), &m) != nil {
			t.Errorf("%s %s: %d %s, want %d and one JSON document", c.method, c.path, status, clip(string(b)), c.status)
			continue
		}
		checkKeys(t, c.method+" "+c.path, m, c.keys)
	}

	checkVerdictsSince(t, d)
	checkMetrics(t, d)

	status, b = d.Do(t, "DELETE", "/v1/sessions/"+name, "", nil)
	if status != 200 || !strings.Contains(string(b), `"killed"`) {
		t.Errorf("DELETE: %d %s, want 200 killed", status, b)
	}
	if status, _ = d.Do(t, "GET", "/v1/sessions/"+name, "", nil); status != 404 {
		t.Errorf("GET after DELETE: %d, want 404", status)
	}
}

// checkVerdictsSince: since=N answers the verdicts after N, as JSON lines, both on
// HTTP and from the CLI.
func checkVerdictsSince(t *testing.T, d *Daemon) {
	t.Helper()
	all := d.Verdicts(t)
	if len(all) < 2 {
		t.Fatalf("want at least 2 verdicts, have %d", len(all))
	}
	n := all[0].Event.Sequence
	status, b := d.Get(t, "/v1/verdicts?since="+strconv.FormatInt(n, 10))
	vs := parseVerdicts(t, string(b))
	if status != 200 || len(vs) != len(all)-1 || vs[0].Event.Sequence != n+1 {
		t.Errorf("GET /v1/verdicts?since=%d: %d, %d verdicts, want %d starting at %d:\n%s", n, status, len(vs), len(all)-1, n+1, b)
	}
	r := d.CLI(t, "verdicts", "--since", strconv.FormatInt(n, 10))
	if vs := parseVerdicts(t, r.Stdout); r.Code != 0 || len(vs) != len(all)-1 {
		t.Errorf("verdicts --since %d: want exit 0 and %d verdicts\n%s", n, len(all)-1, r)
	}
	if status, _ := d.Get(t, "/v1/verdicts?since=-1"); status != 400 {
		t.Errorf("since=-1: %d, want 400", status)
	}
}

// checkMetrics: /metrics is Prometheus text that promtool accepts (when installed).
func checkMetrics(t *testing.T, d *Daemon) {
	t.Helper()
	status, b := d.Get(t, "/metrics")
	if status != 200 || !bytes.Contains(b, []byte("# TYPE ")) {
		t.Errorf("GET /metrics: %d %s, want Prometheus text", status, clip(string(b)))
		return
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed: format not checked")
		return
	}
	cmd := exec.Command(p, "check", "metrics")
	cmd.Stdin = bytes.NewReader(b)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// lineCollector gathers a follower's stdout lines.
type lineCollector struct {
	mu    sync.Mutex
	lines []string
}

func (c *lineCollector) add(l string) {
	c.mu.Lock()
	c.lines = append(c.lines, l)
	c.mu.Unlock()
}

func (c *lineCollector) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.lines...)
}

// TestVerdictsFollow: `verdicts --follow` streams new verdicts as they happen,
// exits 0 on SIGINT, and exits 69 when the daemon stops.
func TestVerdictsFollow(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	first := d.MustCreate(t, NewSpec(t, "follow-0"), "published")
	for _, end := range []string{"SIGINT", "daemon stops"} {
		ctx, cancel := context.WithTimeout(context.Background(), cliDeadline)
		cmd := exec.CommandContext(ctx, needBinary(t), "verdicts", "--follow")
		cmd.Env = d.Env()
		out, _ := cmd.StdoutPipe()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		got := &lineCollector{}
		drained := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(out)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				got.add(sc.Text())
			}
			close(drained)
		}()
		waitLine := func(what string) {
			WaitFor(t, waitDeadline, what+" in the follow stream", func() error {
				for _, l := range got.all() {
					if strings.Contains(l, what) {
						return nil
					}
				}
				return errorf("%d lines so far", len(got.all()))
			})
		}
		waitLine(first.Name)
		s := d.MustCreate(t, NewSpec(t, "follow-"+strings.ReplaceAll(end, " ", "-")), "published")
		waitLine(s.Name)
		want := 0
		if end == "SIGINT" {
			cmd.Process.Signal(syscall.SIGINT)
		} else {
			d.Stop(t)
			want = 69
		}
		<-drained
		err := cmd.Wait()
		cancel()
		if code := cmd.ProcessState.ExitCode(); code != want {
			t.Errorf("verdicts --follow after %s: %v (exit %d), want exit %d\nstderr: %s", end, err, code, want, stderr.String())
		}
		checkVerdictStream(t, parseVerdicts(t, strings.Join(got.all(), "\n")))
	}
}

// TestHTTPStreamingFollow: GET /v1/verdicts?follow=1 streams a verdict written
// after the request started.
func TestHTTPStreamingFollow(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), cliDeadline)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://skc/v1/verdicts?since=0&follow=1", nil)
	client := d.HTTP()
	client.Timeout = 0
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	s := d.MustCreate(t, NewSpec(t, "stream-1"), "published")
	deadline := time.After(waitDeadline)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("stream ended before the new verdict")
			}
			if strings.Contains(l, s.Name) {
				return
			}
		case <-deadline:
			t.Fatalf("no verdict for %s on the stream", s.Name)
		}
	}
}
