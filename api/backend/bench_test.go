package backend_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/skc-supervisor/skc-supervisor/api"
	"github.com/skc-supervisor/skc-supervisor/api/backend"
	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/sqlite"
	"github.com/skc-supervisor/skc-supervisor/lifecycle"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"

	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

// TestMain lets the test binary be the pane helper the daemon starts in every pane.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "helper" {
		os.Exit(lifecycle.RunHelper(os.Args[2:], func(home string) (fence.Fence, error) {
			s, err := sqlite.Open(filepath.Join(home, "fence.sqlite"), fence.Options{})
			if err != nil {
				return nil, err // a nil Fence, not a Fence holding a nil *Store
			}
			return s, nil
		}))
	}
	os.Exit(m.Run())
}

// daemon is the real stack in this process — tmux server, census, fence,
// lifecycle, backend, API server on a unix socket — and a keep-alive client.
type daemon struct {
	home, tmuxSock string
	hc             *http.Client
	reqLog         *syncBuffer // the API's request log (server-side durations)
	names          []string
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// startDaemon starts the stack and creates n sessions running sleep.
func startDaemon(b *testing.B, n int) *daemon {
	home, err := os.MkdirTemp("", "skcb")
	if err != nil {
		b.Fatal(err)
	}
	d := &daemon{home: home, tmuxSock: filepath.Join(home, "tmux.sock"), reqLog: &syncBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	store, err := sqlite.Open(filepath.Join(home, "fence.sqlite"), fence.Options{})
	if err != nil {
		b.Fatal(err)
	}
	w, err := verdict.NewWriter(store, filepath.Join(home, "verdicts.jsonl"), zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	client := tmuxctl.NewClient(tmuxctl.Config{Tmux: tmuxtest.Bin(), Socket: d.tmuxSock, ConfigFile: "/dev/null"})
	cs := census.New(client, nil)
	exe, _ := os.Executable()
	m, err := lifecycle.New(lifecycle.Config{Home: home, Tmux: client, Census: cs, Fence: store, Verdicts: w, HelperPath: exe})
	if err != nil {
		b.Fatal(err)
	}
	for _, run := range []func(context.Context) error{client.Run, cs.Run, m.Run} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(ctx) }()
	}
	log := zerolog.New(d.reqLog)
	srv, err := api.New(api.Config{Service: &backend.Service{Manager: m, Store: store, Verdicts: w},
		AllowUID: os.Geteuid(), Log: &log})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := api.Listen(filepath.Join(home, "api.sock"))
	if err != nil {
		b.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Serve(ln) }()
	b.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = srv.Shutdown(sctx)
		_ = m.Shutdown(sctx)
		scancel()
		cancel()
		wg.Wait()
		_ = w.Close()
		_ = store.Close()
		_ = tmuxtest.Command("-S", d.tmuxSock, "kill-server").Run()
		_ = os.RemoveAll(home)
	})
	var dl net.Dialer
	d.hc = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dl.DialContext(ctx, "unix", filepath.Join(home, "api.sock"))
	}}}
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	if err := cs.WaitSynced(wctx); err != nil {
		b.Fatal(err)
	}
	d.create(b, n)
	return d
}

// create makes n sessions through the API, 8 at a time.
func (d *daemon) create(b *testing.B, n int) {
	var mu sync.Mutex
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			body, _ := json.Marshal(map[string]any{"state_dir": filepath.Join(d.home, "agents"),
				"session_id": "b" + strconv.Itoa(i), "argv": []string{"/usr/bin/sleep", "1000000"}, "cwd": "/"})
			code, resp, err := d.do(http.MethodPost, "/v1/sessions", body)
			if err != nil || code != http.StatusCreated {
				b.Errorf("create: %v %d %s", err, code, resp)
				return
			}
			var cr api.CreateResponse
			_ = json.Unmarshal(resp, &cr)
			mu.Lock()
			d.names = append(d.names, cr.Session.Name)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	slices.Sort(d.names)
}

func (d *daemon) do(method, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, "http://skc"+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// get times one GET that must answer 200.
func (d *daemon) get(b *testing.B, path string) (time.Duration, int) {
	t0 := time.Now()
	code, body, err := d.do(http.MethodGet, path, nil)
	dt := time.Since(t0)
	if err != nil || code != http.StatusOK {
		b.Fatalf("GET %s: %v %d %.200s", path, err, code, body)
	}
	return dt, len(body)
}

// fork times one tmux client fork on the daemon's server.
func (d *daemon) fork(b *testing.B, args ...string) time.Duration {
	t0 := time.Now()
	if out, err := tmuxtest.Command(append([]string{"-S", d.tmuxSock}, args...)...).CombinedOutput(); err != nil {
		b.Fatalf("tmux %v: %v %s", args, err, out)
	}
	return time.Since(t0)
}

// serverP50 is the median duration the API logged for requests on path
// (prefix) since the log offset from.
func (d *daemon) serverP50(b *testing.B, from int, prefix string) time.Duration {
	d.reqLog.mu.Lock()
	lines := bytes.Split(d.reqLog.b.Bytes()[from:], []byte("\n"))
	d.reqLog.mu.Unlock()
	var ds []time.Duration
	for _, l := range lines {
		var rec struct {
			Path     string  `json:"path"`
			Duration float64 `json:"duration"` // zerolog: milliseconds
		}
		if json.Unmarshal(l, &rec) == nil && len(rec.Path) >= len(prefix) && rec.Path[:len(prefix)] == prefix &&
			(prefix != "/v1/sessions" || rec.Path == prefix) {
			ds = append(ds, time.Duration(rec.Duration*float64(time.Millisecond)))
		}
	}
	return p50(ds)
}

func p50(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

func (d *daemon) logLen() int {
	d.reqLog.mu.Lock()
	defer d.reqLog.mu.Unlock()
	return d.reqLog.b.Len()
}

// BenchmarkReads measures the benchmark's figures 3 and 4 in one process: GET
// /v1/sessions/{name} against a `tmux has-session -t =NAME` fork, and GET
// /v1/sessions against a `tmux list-sessions -F` fork, interleaved, on the same
// tmux server with SKC_BENCH_SESSIONS sessions (default 200; the goals are at
// 1,000). Reported: client-side p50 of each side, the server-side p50 from the
// API's request log, and fork-p50 / api-p50 (goals: ≥ 50 for lookups, ≥ 10 for
// lists).
//
//	SKC_BENCH_SESSIONS=1000 go test -run '^$' -bench Reads -benchtime 200x ./api/backend/
func BenchmarkReads(b *testing.B) {
	n := 200
	if v, err := strconv.Atoi(os.Getenv("SKC_BENCH_SESSIONS")); err == nil && v > 0 {
		n = v
	}
	d := startDaemon(b, n)
	d.get(b, "/v1/sessions") // warm: the fence's identity cache and the encodings
	// ping is the HTTP round trip alone: the floor under both figures.
	b.Run("ping", func(b *testing.B) {
		var api, forked []time.Duration
		from := d.logLen()
		for i := 0; i < b.N; i++ {
			dt, _ := d.get(b, "/v1/ping")
			api = append(api, dt)
			forked = append(forked, d.fork(b, "has-session", "-t", "="+d.names[(i*7)%len(d.names)]))
		}
		report(b, api, forked, d.serverP50(b, from, "/v1/ping"))
	})
	b.Run(fmt.Sprintf("lookup-%d", n), func(b *testing.B) {
		var api, forked []time.Duration
		from := d.logLen()
		for i := 0; i < b.N; i++ {
			name := d.names[(i*7)%len(d.names)]
			dt, _ := d.get(b, "/v1/sessions/"+name)
			api = append(api, dt)
			forked = append(forked, d.fork(b, "has-session", "-t", "="+name))
		}
		report(b, api, forked, d.serverP50(b, from, "/v1/sessions/"))
	})
	b.Run(fmt.Sprintf("list-%d", n), func(b *testing.B) {
		var api, forked []time.Duration
		from := d.logLen()
		size := 0
		for i := 0; i < b.N; i++ {
			dt, sz := d.get(b, "/v1/sessions")
			api, size = append(api, dt), sz
			forked = append(forked, d.fork(b, "list-sessions", "-F",
				"#{session_id}\t#{session_name}\t#{session_created}\t#{session_attached}\t#{@skc-identity}"))
		}
		report(b, api, forked, d.serverP50(b, from, "/v1/sessions"))
		b.ReportMetric(float64(size), "B/list")
	})
}

func report(b *testing.B, api, forked []time.Duration, server time.Duration) {
	b.ReportMetric(float64(p50(api).Microseconds()), "api-p50-µs")
	b.ReportMetric(float64(server.Microseconds()), "server-p50-µs")
	b.ReportMetric(float64(p50(forked).Microseconds()), "fork-p50-µs")
	b.ReportMetric(float64(p50(forked))/float64(p50(api)), "fork/api")
}
