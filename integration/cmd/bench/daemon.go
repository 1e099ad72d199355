package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// daemon is one private `skc-supervisor serve` in its own temp home, with an
// HTTP client on its api.sock and the sessions the bench created in it.
type daemon struct {
	home, api, tmuxSock string
	cmd                 *exec.Cmd
	pid, serverPID      int
	hc                  *http.Client
	stream              *http.Client // no idle limits for the follow stream
	agent               []string
	perfDir             string       // -perf: profile the daemon during figures
	next                atomic.Int64 // identity counter

	mu       sync.Mutex
	live     []sess         // created by us and not yet ended, oldest first
	failures map[string]int // failed creates during fill, by error text (clipped)
}

// sess is a session the bench created through the API.
type sess struct {
	Name    string `json:"name"`
	ID      string `json:"id"`
	PanePID int    `json:"pane_pid"`
}

// startDaemon starts serve in a fresh home with SKC_TMUX_CONFIG=/dev/null and
// waits until the API answers and the census has synced.
func startDaemon(ctx context.Context, r *reaper, bin string, agent []string, wireLog bool) (*daemon, error) {
	return startDaemonEnv(ctx, r, bin, agent, wireLog)
}

// startDaemonEnv is startDaemon with extra environment for serve (the fleet
// figures' SKC_FENCE and SKC_HOST: tmuxEnv drops the caller's SKC_*).
func startDaemonEnv(ctx context.Context, r *reaper, bin string, agent []string, wireLog bool, env ...string) (*daemon, error) {
	home, err := r.newHome()
	if err != nil {
		return nil, err
	}
	d := &daemon{home: home, api: filepath.Join(home, "api.sock"), tmuxSock: filepath.Join(home, "tmux.sock"), agent: agent}
	args := []string{"serve"}
	if wireLog {
		args = append(args, "--wire-log", filepath.Join(home, "wire.log"))
	}
	logf, err := os.OpenFile(filepath.Join(home, "daemon.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	d.cmd = exec.Command(bin, args...)
	d.cmd.Env = tmuxEnv(append([]string{"SKC_HOME=" + home, "SKC_TMUX_CONFIG=/dev/null", markVar + "=" + home}, env...)...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // our cleanup, not the terminal's ^C, stops it
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	r.addDaemon(d.cmd)
	d.pid = d.cmd.Process.Pid
	d.hc = unixClient(d.api, 64)
	d.stream = unixClient(d.api, 1)
	if err := d.waitReady(ctx); err != nil {
		return nil, fmt.Errorf("daemon in %s: %w (log: %s)", home, err, tail(filepath.Join(home, "daemon.log")))
	}
	r.addServer(d.tmuxSock, d.serverPID)
	return d, nil
}

func unixClient(sock string, idle int) *http.Client {
	var dl net.Dialer
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dl.DialContext(ctx, "unix", sock)
		},
		DisableCompression: true, MaxIdleConns: idle, MaxIdleConnsPerHost: idle,
	}}
}

// waitReady polls GET /v1/sessions until the census is synced (bounded).
func (d *daemon) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		var ls struct {
			Census struct {
				Synced    bool `json:"synced"`
				ServerPID int  `json:"server_pid"`
			} `json:"census"`
		}
		code, body, err := d.do(ctx, http.MethodGet, "/v1/sessions", nil)
		if err == nil && code == http.StatusOK && json.Unmarshal(body, &ls) == nil && ls.Census.Synced {
			d.serverPID = ls.Census.ServerPID
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// do sends one request and reads the whole answer.
func (d *daemon) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://skc"+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// create asks for a new identity's session and remembers it.
func (d *daemon) create(ctx context.Context) (sess, error) {
	n := d.next.Add(1)
	body, _ := json.Marshal(map[string]any{
		"state_dir": filepath.Join(d.home, "agents"), "session_id": "b" + strconv.FormatInt(n, 10),
		"argv": d.agent, "cwd": "/",
	})
	ctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	code, b, err := d.do(ctx, http.MethodPost, "/v1/sessions", body)
	if err != nil {
		return sess{}, err
	}
	var out struct {
		Status  string `json:"status"`
		Session sess   `json:"session"`
	}
	if code != http.StatusCreated || json.Unmarshal(b, &out) != nil || out.Status != "published" {
		return sess{}, fmt.Errorf("create: HTTP %d: %.300s", code, b)
	}
	d.mu.Lock()
	d.live = append(d.live, out.Session)
	d.mu.Unlock()
	return out.Session, nil
}

// fill creates sessions with par concurrent clients until n of ours are live.
// A failed create is counted (failures) and retried by the next one; fill
// gives up after 20 failures in a row. progress, when not nil, is called
// after each successful create.
func (d *daemon) fill(ctx context.Context, n, par int, progress func(int)) error {
	var streak, inflight atomic.Int64
	var wg sync.WaitGroup
	todo := make(chan struct{})
	for w := 0; w < par; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range todo {
				_, err := d.create(ctx)
				inflight.Add(-1)
				if err != nil {
					streak.Add(1)
					d.failed(err)
				} else {
					streak.Store(0)
					if progress != nil {
						progress(d.count())
					}
				}
			}
		}()
	}
	for ctx.Err() == nil && streak.Load() < 20 {
		if int64(d.count())+inflight.Load() >= int64(n) {
			if inflight.Load() == 0 {
				break
			}
			time.Sleep(2 * time.Millisecond) // a create in flight may still fail
			continue
		}
		inflight.Add(1)
		todo <- struct{}{}
	}
	close(todo)
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if streak.Load() >= 20 {
		return fmt.Errorf("%w; failures: %v", errStreak, d.failureSummary())
	}
	return nil
}

// errStreak: 20 creates failed in a row, which at the scale run's size means
// the machine refuses more (tmux cannot fork: pids or ptys are used up).
var errStreak = errors.New("20 creates failed in a row")

func (d *daemon) failed(err error) {
	msg := err.Error()
	if len(msg) > 160 {
		msg = msg[:160]
	}
	logf("create failed: %s", msg)
	d.mu.Lock()
	if d.failures == nil {
		d.failures = map[string]int{}
	}
	d.failures[msg]++
	d.mu.Unlock()
}

// failureSummary lists the failed creates, "none" when there were none.
func (d *daemon) failureSummary() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.failures) == 0 {
		return "none"
	}
	var parts []string
	for msg, k := range d.failures {
		parts = append(parts, fmt.Sprintf("%d × `%s`", k, msg))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

func (d *daemon) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.live)
}

// pick returns the i-th live session (mod the count).
func (d *daemon) pick(i int) sess {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.live[i%len(d.live)]
}

// popOldest removes and returns the oldest live session.
func (d *daemon) popOldest() (sess, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.live) == 0 {
		return sess{}, false
	}
	s := d.live[0]
	d.live = d.live[1:]
	return s, true
}

// lookup is GET /v1/sessions/{name}.
func (d *daemon) lookup(ctx context.Context, name string) error {
	code, b, err := d.do(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(name), nil)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("lookup %s: HTTP %d: %.200s", name, code, b)
	}
	return err
}

// list is GET /v1/sessions; it returns the answer's size.
func (d *daemon) list(ctx context.Context) (int, error) {
	code, b, err := d.do(ctx, http.MethodGet, "/v1/sessions", nil)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("list: HTTP %d: %.200s", code, b)
	}
	return len(b), err
}

// listCount decodes GET /v1/sessions and counts the sessions.
func (d *daemon) listCount(ctx context.Context) (int, error) {
	code, b, err := d.do(ctx, http.MethodGet, "/v1/sessions", nil)
	if err != nil || code != http.StatusOK {
		return 0, fmt.Errorf("list: %v HTTP %d", err, code)
	}
	var ls struct {
		Sessions []json.RawMessage `json:"sessions"`
	}
	err = json.Unmarshal(b, &ls)
	return len(ls.Sessions), err
}

// waitListed waits (bounded) until GET /v1/sessions shows every session we
// created: a create answers before the census has re-listed (its quiet
// period), so a list right after a create can miss it.
func (d *daemon) waitListed(ctx context.Context) (int, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := d.listCount(ctx)
		if err != nil || n >= d.count() || time.Now().After(deadline) {
			return n, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rssKB is the daemon's VmRSS and VmHWM.
func (d *daemon) rssKB() (rss, hwm int64) {
	rss, _ = statusKB(d.pid, "VmRSS")
	hwm, _ = statusKB(d.pid, "VmHWM")
	return rss, hwm
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 1500 {
		b = b[len(b)-1500:]
	}
	return string(b)
}

// follower streams GET /v1/verdicts?follow=1 and hands every `ended` verdict
// to whoever waits for that session name.
type follower struct {
	mu      sync.Mutex
	waiters map[string]chan endSeen
	err     error
	done    chan struct{}
}

// endSeen is when the follower read an ended verdict, and the verdict's own
// @timestamp (when the daemon wrote it).
type endSeen struct {
	read, stamp time.Time
}

func (d *daemon) follow(ctx context.Context) *follower {
	f := &follower{waiters: map[string]chan endSeen{}, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		err := f.run(ctx, d)
		f.mu.Lock()
		f.err = err
		f.mu.Unlock()
	}()
	return f
}

func (f *follower) run(ctx context.Context, d *daemon) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://skc/v1/verdicts?since=0&follow=1", nil)
	if err != nil {
		return err
	}
	resp, err := d.stream.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		now := time.Now()
		var v struct {
			Stamp time.Time `json:"@timestamp"`
			Skc   struct {
				Verdict string `json:"verdict"`
				Session *struct {
					Name string `json:"name"`
				} `json:"session"`
			} `json:"skc"`
		}
		if json.Unmarshal(sc.Bytes(), &v) != nil || v.Skc.Verdict != "ended" || v.Skc.Session == nil {
			continue
		}
		f.mu.Lock()
		ch := f.waiters[v.Skc.Session.Name]
		delete(f.waiters, v.Skc.Session.Name)
		f.mu.Unlock()
		if ch != nil {
			ch <- endSeen{read: now, stamp: v.Stamp}
		}
	}
	return sc.Err()
}

// expect registers interest in name's ended verdict before the end is caused.
func (f *follower) expect(name string) chan endSeen {
	ch := make(chan endSeen, 1)
	f.mu.Lock()
	f.waiters[name] = ch
	f.mu.Unlock()
	return ch
}

func (f *follower) forget(name string) {
	f.mu.Lock()
	delete(f.waiters, name)
	f.mu.Unlock()
}
