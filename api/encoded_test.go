package api

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// encodedFake is the fake with EncodedReads: it encodes what the fake answers,
// normalised as the handlers normalise the structured answers.
type encodedFake struct {
	*fakeService
	calls atomic.Int64
}

func (f *encodedFake) AppendListJSON(ctx context.Context, dst []byte) ([]byte, error) {
	f.calls.Add(1)
	res, err := f.List(ctx)
	if err != nil {
		return dst, err
	}
	b, err := json.Marshal(res)
	return append(dst, b...), err
}

func (f *encodedFake) AppendShowJSON(ctx context.Context, dst []byte, ref Ref) ([]byte, error) {
	f.calls.Add(1)
	res, err := f.Show(ctx, ref)
	if err != nil {
		return dst, err
	}
	res.Reservation, res.Verdicts = []byte("null"), []verdict.Record{}
	b, err := json.Marshal(res)
	return append(dst, b...), err
}

// TestEncodedReadsSameAnswers: a Service with EncodedReads answers list, show
// by name and by identity, and a missing session with exactly the status and
// bytes of the structured path, and the typed client decodes them.
func TestEncodedReadsSameAnswers(t *testing.T) {
	plain := start(t, os.Getuid())
	enc := &encodedFake{fakeService: newFake()}
	h := &harness{fake: enc.fakeService, socket: filepath.Join(sockDir(t), "api.sock"), done: make(chan error, 1)}
	var err error
	if h.srv, err = New(Config{Service: enc, AllowUID: os.Getuid()}); err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(h.socket)
	if err != nil {
		t.Fatal(err)
	}
	go func() { h.done <- h.srv.Serve(ln) }()
	h.client = NewClient(h.socket)
	t.Cleanup(func() { h.stop(t) })

	for _, path := range []string{"/v1/sessions", "/v1/sessions/skc-a", "/v1/sessions/missing",
		"/v1/identity?state_dir=/s&session_id=a", "/v1/identity?state_dir=/s&session_id=missing"} {
		ws, wb := plain.raw(t, "GET", path, "", nil)
		gs, gb := h.raw(t, "GET", path, "", nil)
		if gs != ws || !bytes.Equal(gb, wb) {
			t.Fatalf("%s: encoded %d %s, structured %d %s", path, gs, gb, ws, wb)
		}
	}
	if n := enc.calls.Load(); n != 5 {
		t.Fatalf("%d encoded calls, want 5", n)
	}
	if l, err := h.client.List(context.Background()); err != nil || len(l.Sessions) != 1 {
		t.Fatalf("client list %+v %v", l, err)
	}
	if s, err := h.client.Show(context.Background(), Ref{Name: "skc-a"}); err != nil || s.Session.SessionID != "a" ||
		string(s.Reservation) != "null" || s.Verdicts == nil {
		t.Fatalf("client show %+v %v", s, err)
	}
}
