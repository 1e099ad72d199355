package api

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/skc-supervisor/skc-supervisor/internal/testwatch"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

func TestMain(m *testing.M) {
	testwatch.Arm()
	goleak.VerifyTestMain(m)
}

// fakeService is the Service the HTTP tests drive: canned answers, the last
// create spec, and a verdict journal with a live feed.
type fakeService struct {
	mu       sync.Mutex
	specs    []CreateSpec
	refs     []Ref
	records  []verdict.Record
	subs     map[int]chan verdict.Record
	nextSub  int
	existing map[string]bool // session_id → answer existing
	err      error           // answer every call with this
}

func newFake() *fakeService {
	return &fakeService{subs: map[int]chan verdict.Record{}, existing: map[string]bool{}}
}

var t0 = time.Date(2026, 11, 30, 1, 2, 3, 456000000, time.UTC)

func sessionFor(spec CreateSpec) Session {
	return Session{Name: "skc-" + spec.SessionID, ID: "$3", Managed: true, StateDir: spec.StateDir,
		SessionID: spec.SessionID, StateFile: spec.StateFile, Generation: 1, Authoritative: true,
		Label: spec.Label, PanePID: 4242, CreatedAt: t0}
}

func (f *fakeService) Create(ctx context.Context, spec CreateSpec) (CreateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return CreateResponse{}, f.err
	}
	f.specs = append(f.specs, spec)
	st := StatusPublished
	if f.existing[spec.SessionID] {
		st = StatusExisting
	}
	return CreateResponse{Status: st, Session: sessionFor(spec)}, nil
}

func (f *fakeService) List(ctx context.Context) (ListResponse, error) {
	if f.err != nil {
		return ListResponse{}, f.err
	}
	return ListResponse{Census: CensusInfo{Synced: true, ServerPID: 1234, ServerStartedAt: t0, TmuxVersion: "3.3a"},
		Sessions: []Session{sessionFor(CreateSpec{SessionID: "a", StateDir: "/s"})}}, nil
}

func (f *fakeService) lookup(ref Ref) (Session, error) {
	f.mu.Lock()
	f.refs = append(f.refs, ref)
	f.mu.Unlock()
	if f.err != nil {
		return Session{}, f.err
	}
	if ref.Name == "missing" || ref.SessionID == "missing" {
		return Session{}, verdict.Errorf(verdict.CodeNotFound, map[string]any{"name": ref.Name}, "no such session")
	}
	return sessionFor(CreateSpec{SessionID: "a", StateDir: "/s"}), nil
}

func (f *fakeService) Show(ctx context.Context, ref Ref) (ShowResponse, error) {
	s, err := f.lookup(ref)
	return ShowResponse{Session: &s}, err
}

func (f *fakeService) Restart(ctx context.Context, ref Ref) (RestartResponse, error) {
	return RestartResponse{Status: StatusRestarted, Session: Session{Name: ref.Name, Managed: true, State: "running"}}, nil
}

func (f *fakeService) Kill(ctx context.Context, ref Ref) (KillResponse, error) {
	_, err := f.lookup(ref)
	return KillResponse{Status: StatusKilled, Verdict: verdict.Record{Timestamp: t0, Action: "kill",
		Outcome: "success", Verdict: "ended", Sequence: 9}}, err
}

func (f *fakeService) Forget(ctx context.Context, host string) (ForgetResponse, error) {
	return ForgetResponse{Status: "forgotten", Host: host, Reservations: []json.RawMessage{}, Identities: []json.RawMessage{},
		Verdict: verdict.Record{Verdict: verdict.VerdictReleased}}, nil
}

func (f *fakeService) Release(ctx context.Context, resID string) (ReleaseResponse, error) {
	return ReleaseResponse{Status: "released", Verdict: verdict.Record{Verdict: verdict.VerdictReleased}}, nil
}

func (f *fakeService) Fence(ctx context.Context) (FenceResponse, error) {
	if f.err != nil {
		return FenceResponse{}, f.err
	}
	return FenceResponse{Identities: []json.RawMessage{json.RawMessage(`{"state_dir":"/s","session_id":"a","generation":1,"session_name":"skc-a"}`)}}, nil
}

func (f *fakeService) ListFleet(ctx context.Context) (ListResponse, error) {
	res, err := f.List(ctx)
	if err == nil {
		remote := sessionFor(CreateSpec{SessionID: "r", StateDir: "/s"})
		remote.Name, remote.Host, remote.AttachHint = "skc-r", "host-a", "skc-supervisor attach 'skc-r'"
		res.Sessions = append(res.Sessions, remote)
	}
	return res, err
}

// FleetVerdictsSince is VerdictsSince with every sequence above 1000 (the
// other hosts'), so a test tells which journal answered.
func (f *fakeService) FleetVerdictsSince(ctx context.Context, after int64, limit int) ([]verdict.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []verdict.Record
	for _, r := range f.records {
		r.Sequence += 1000
		if r.Sequence > after && len(out) < limit {
			out = append(out, r)
		}
	}
	return out, nil
}

func (f *fakeService) VerdictsSince(ctx context.Context, after int64, limit int) ([]verdict.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []verdict.Record
	for _, r := range f.records {
		if r.Sequence > after && len(out) < limit {
			out = append(out, r)
		}
	}
	return out, nil
}

func (f *fakeService) SubscribeVerdicts(after int64) (<-chan verdict.Record, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan verdict.Record, 16)
	id := f.nextSub
	f.nextSub++
	f.subs[id] = ch
	return ch, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.subs, id)
	}
}

func (f *fakeService) subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

// emit journals a record and (unless silent) tells subscribers, like
// verdict.Writer.Emit.
func (f *fakeService) emit(silent bool) verdict.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := verdict.Record{Timestamp: t0, Action: "create", Outcome: "success", Verdict: "published",
		Sequence: int64(len(f.records) + 1)}
	f.records = append(f.records, r)
	if !silent {
		for _, ch := range f.subs {
			ch <- r
		}
	}
	return r
}

// sockDir is a short private directory: unix socket paths are at most 107
// bytes, and t.TempDir() can be deeper than that.
func sockDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "skca")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

type harness struct {
	fake   *fakeService
	srv    *Server
	client *Client
	socket string
	done   chan error
}

// start runs a Server on a real unix socket with the fake behind it.
func start(t *testing.T, allowUID int) *harness {
	t.Helper()
	h := &harness{fake: newFake(), socket: filepath.Join(sockDir(t), "api.sock"), done: make(chan error, 1)}
	var err error
	h.srv, err = New(Config{Service: h.fake, AllowUID: allowUID, Metrics: fakeMetrics{},
		Info: Info{Version: "test", PID: os.Getpid(), StartedAt: t0, Home: "/h"}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(h.socket)
	if err != nil {
		t.Fatal(err)
	}
	go func() { h.done <- h.srv.Serve(ln) }()
	h.client = NewClient(h.socket)
	t.Cleanup(func() { h.stop(t) })
	return h
}

func (h *harness) stop(t *testing.T) {
	if h.srv == nil {
		return
	}
	h.client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if err := <-h.done; err != nil {
		t.Errorf("serve: %v", err)
	}
	h.srv = nil
}

// raw sends one request over a fresh unix connection and returns status and
// body, so tests see exactly what goes over the wire.
func (h *harness) raw(t *testing.T, method, path, body string, hdr map[string]string) (int, []byte) {
	t.Helper()
	return rawRequest(t, h.socket, method, path, body, hdr)
}

type fakeMetrics struct{}

func (fakeMetrics) WriteText(w io.Writer) error {
	_, err := io.WriteString(w, "# TYPE skc_up gauge\nskc_up 1\n")
	return err
}
