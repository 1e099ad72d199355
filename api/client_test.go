package api

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

func TestClientTyped(t *testing.T) {
	h := start(t, os.Getuid())
	ctx := context.Background()
	if err := h.client.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := h.client.Info(ctx)
	if err != nil || info.PID != os.Getpid() || info.Home != "/h" {
		t.Fatalf("%+v %v", info, err)
	}
	dir := sockDir(t)
	res, err := h.client.Create(ctx, CreateRequest{StateDir: dir, SessionID: "x", Argv: []string{"true"}})
	if err != nil || res.Status != StatusPublished || res.Session.SessionID != "x" {
		t.Fatalf("%+v %v", res, err)
	}
	ls, err := h.client.List(ctx)
	if err != nil || len(ls.Sessions) != 1 || !ls.Census.Synced {
		t.Fatalf("%+v %v", ls, err)
	}
	k, err := h.client.Kill(ctx, Ref{StateDir: "/s", SessionID: "a"})
	if err != nil || k.Status != StatusKilled || k.Verdict.Sequence != 9 {
		t.Fatalf("%+v %v", k, err)
	}
	_, err = h.client.Show(ctx, Ref{Name: "missing"})
	if verdict.CodeOf(err) != verdict.CodeNotFound || verdict.Classify(verdict.CodeOf(err)).Exit != 4 {
		t.Fatalf("%v", err)
	}
	_, err = h.client.Create(ctx, CreateRequest{StateDir: "rel", SessionID: "x", Argv: []string{"true"}})
	var e *verdict.Error
	if !errors.As(err, &e) || e.Code != verdict.CodeInvalidRequest || e.Details["field"] != "state_dir" {
		t.Fatalf("%v", err)
	}
	f, err := h.client.Fence(ctx)
	if err != nil || len(f.Identities) != 1 {
		t.Fatalf("%+v %v", f, err)
	}
}

func TestClientUnreachable(t *testing.T) {
	c := NewClient(filepath.Join(sockDir(t), "api.sock"))
	defer c.Close()
	err := c.Ping(context.Background())
	if verdict.CodeOf(err) != verdict.CodeDaemonUnreachable || verdict.Classify(verdict.CodeOf(err)).Exit != 69 {
		t.Fatalf("got %v", err)
	}
	if !strings.Contains(err.Error(), "api.sock") {
		t.Fatalf("message should name the socket: %v", err)
	}
}

// TestClientWaitsForAStartingDaemon: while a daemon holds its home but its
// socket is not there yet (its start adopts every live session first), a
// request waits for it instead of answering daemon_unreachable at once; with
// no daemon holding the home it answers at once, and a start that does not
// finish within StartingWait is daemon_unreachable with details.starting.
func TestClientWaitsForAStartingDaemon(t *testing.T) {
	sock := filepath.Join(sockDir(t), "api.sock")
	c := NewClient(sock).WaitStarting(func() bool { return true })
	defer c.Close()
	old := StartingWait
	StartingWait = 200 * time.Millisecond
	err := c.Ping(context.Background())
	StartingWait = old
	var e *verdict.Error
	if !errors.As(err, &e) || e.Code != verdict.CodeDaemonUnreachable || e.Details["starting"] != true {
		t.Fatalf("a start that does not end in time: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Ping(context.Background()) }()
	time.Sleep(300 * time.Millisecond) // the daemon's recovery; not an assertion
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"ok":true}`)
	}), ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	if err := <-done; err != nil {
		t.Fatalf("a request sent while the daemon started: %v", err)
	}
	idle := NewClient(filepath.Join(sockDir(t), "api.sock")).WaitStarting(func() bool { return false })
	defer idle.Close()
	if err := idle.Ping(context.Background()); verdict.CodeOf(err) != verdict.CodeDaemonUnreachable {
		t.Fatalf("no daemon holds the home: %v", err)
	}
}

func TestListenStaleSocket(t *testing.T) {
	dir := sockDir(t)
	path := filepath.Join(dir, "api.sock")

	// A dead socket (its listener closed without unlinking) is removed.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("setup: the dead socket should remain: %v", err)
	}
	live, err := Listen(path)
	if err != nil {
		t.Fatalf("dead socket not replaced: %v", err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v", fi.Mode())
	}

	// A live socket means another daemon: busy, and it is left alone.
	_, err = Listen(path)
	if verdict.CodeOf(err) != verdict.CodeBusy || !strings.Contains(err.Error(), "already") {
		t.Fatalf("live socket: %v", err)
	}
	live.Close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("closing the listener should remove the socket: %v", err)
	}

	// A regular file is never removed.
	os.WriteFile(path, []byte("precious"), 0o600)
	_, err = Listen(path)
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("regular file: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "precious" {
		t.Fatal("the regular file was touched")
	}
}

func TestVerdictsSinceAndFollow(t *testing.T) {
	h := start(t, os.Getuid())
	for i := 0; i < 3; i++ {
		h.fake.emit(true)
	}
	var lines []string
	err := h.client.Verdicts(context.Background(), 1, false, func(l []byte) error {
		lines = append(lines, string(l))
		return nil
	})
	if err != nil || len(lines) != 2 || !strings.Contains(lines[0], `"sequence":2`) {
		t.Fatalf("%v %q", err, lines)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var got []verdict.Record
	done := make(chan error, 1)
	go func() {
		done <- h.client.Verdicts(ctx, 0, true, func(l []byte) error {
			r, err := verdict.ParseLine(l)
			mu.Lock()
			got = append(got, r)
			mu.Unlock()
			return err
		})
	}()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	waitFor(t, func() bool { return count() == 3 && h.fake.subscribers() == 1 })
	h.fake.emit(false)
	h.fake.emit(true) // journaled but not delivered: a gap the next one fills
	h.fake.emit(false)
	waitFor(t, func() bool { return count() == 6 })
	mu.Lock()
	for i, r := range got {
		if r.Sequence != int64(i+1) {
			t.Fatalf("record %d has sequence %d", i, r.Sequence)
		}
	}
	mu.Unlock()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("follow ended with %v", err)
	}
	waitFor(t, func() bool { return h.fake.subscribers() == 0 })
}

// TestShutdownEndsFollowers checks that a --follow stream does not hold up a
// graceful stop, and (through TestMain's goleak) that nothing leaks.
func TestShutdownEndsFollowers(t *testing.T) {
	h := start(t, os.Getuid())
	done := make(chan error, 1)
	go func() {
		done <- h.client.Verdicts(context.Background(), 0, true, func([]byte) error { return nil })
	}()
	waitFor(t, func() bool { return h.fake.subscribers() == 1 })
	h.stop(t)
	if err := <-done; verdict.CodeOf(err) != verdict.CodeDaemonUnreachable {
		t.Fatalf("a follow the daemon ended: %v, want daemon_unreachable", err)
	}
	if h.fake.subscribers() != 0 {
		t.Fatal("subscription not released")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestClientOutputCut: a follow stream that stops without its end line (the
// daemon killed mid-stream) is daemon_unreachable, not the session's end;
// with its end line it is the end.
func TestClientOutputCut(t *testing.T) {
	for _, tc := range []struct {
		body string
		code string
	}{
		{`{"at":"2026-01-01T00:00:00Z","data_b64":"aGk="}` + "\n", verdict.CodeDaemonUnreachable},
		{`{"at":"2026-01-01T00:00:00Z","data_b64":"aGk="}` + "\n" + `{"end":"session_ended"}` + "\n", ""},
	} {
		sock := filepath.Join(sockDir(t), "api.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/x-ndjson")
			_, _ = io.WriteString(w, tc.body)
		})}
		go func() { _ = srv.Serve(ln) }()
		c := NewClient(sock)
		var got []byte
		err = c.Output(context.Background(), Ref{Name: "x"}, func(ch OutputChunk) error {
			got = append(got, ch.Data...)
			return nil
		})
		c.Close()
		_ = srv.Close()
		if string(got) != "hi" || verdict.CodeOf(err) != tc.code {
			t.Fatalf("stream %q: data %q, err %v (want code %q)", tc.body, got, err, tc.code)
		}
	}
}
