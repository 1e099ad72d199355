package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Talking to agents (docs/contract.md "Talking to agents"): the types, the optional
// Talker part of a Service, and the handlers.

// ScreenResponse answers GET /v1/sessions/{name}/screen and `screen --json`.
type ScreenResponse struct {
	Name     string   `json:"name"`
	Lines    []string `json:"lines"`
	Cursor   Cursor   `json:"cursor"`
	PaneDead bool     `json:"pane_dead"`
}

// Cursor is the cursor's column x and row y on the visible screen, from 0.
type Cursor struct {
	X int `json:"x"`
	Y int `json:"y"`
}

// InputRequest is the body of POST /v1/sessions/{name}/input: text (typed
// literally, pasted when it has a newline) with an optional Enter after it, or
// tmux key names.
type InputRequest struct {
	Text  string   `json:"text,omitempty"`
	Enter bool     `json:"enter,omitempty"`
	Keys  []string `json:"keys,omitempty"`
}

// InputResponse answers an input that was applied.
type InputResponse struct {
	Status string `json:"status"` // "sent"
}

// OutputChunk is one element of an output stream: Data, or a gap of Dropped
// bytes this follower lost (Unknown: tmux dropped more, amount unknown).
type OutputChunk struct {
	At      time.Time
	Data    []byte
	Dropped int64
	Unknown bool
}

// OutputStream is a live output subscription.
type OutputStream interface {
	// Next blocks for the next chunks; false once the stream has ended (the
	// session ended) or ctx is done.
	Next(ctx context.Context) ([]OutputChunk, bool)
	Close()
}

// WaitRequest is GET /v1/sessions/{name}/wait: exactly one of Exit, Idle and
// Text; Timeout 0 waits without limit.
type WaitRequest struct {
	Exit    bool
	Idle    time.Duration
	Text    string
	Timeout time.Duration
}

// WaitResponse answers a wait whose condition held: status "exited" (with the
// ended verdict), "idle" or "text".
type WaitResponse struct {
	Status  string          `json:"status"`
	Verdict *verdict.Record `json:"verdict,omitempty"`
}

// Talker is the optional part of a Service that talks to agents; a Service
// without it answers these endpoints not_found.
type Talker interface {
	Screen(ctx context.Context, ref Ref, lines int, ansi bool) (ScreenResponse, error)
	Input(ctx context.Context, ref Ref, in InputRequest) error
	FollowOutput(ctx context.Context, ref Ref) (OutputStream, error)
	Wait(ctx context.Context, ref Ref, req WaitRequest) (WaitResponse, error)
}

func (s *Server) talker(w http.ResponseWriter, r *http.Request) (Talker, Ref, bool) {
	t, ok := s.cfg.Service.(Talker)
	if !ok {
		writeError(w, verdict.Errorf(verdict.CodeNotFound, map[string]any{"method": r.Method, "path": r.URL.Path},
			"no endpoint %s %s", r.Method, r.URL.Path))
		return nil, Ref{}, false
	}
	ref, err := refFrom(r)
	if err != nil {
		writeError(w, err)
		return nil, Ref{}, false
	}
	return t, ref, true
}

// stoppable is r's context, also ended by Shutdown: long waits and output
// streams must not hold the daemon's stop.
func (s *Server) stoppable(w http.ResponseWriter, r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	go func() {
		select {
		case <-s.stopping:
			limitWrites(w)
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// deadlineAtStop is stoppable's write limit alone, for a stream that ends
// itself at the stop (verdicts --follow); the returned func ends the watch.
func (s *Server) deadlineAtStop(ctx context.Context, w http.ResponseWriter) func() {
	done := make(chan struct{})
	go func() {
		select {
		case <-s.stopping:
			limitWrites(w)
		case <-ctx.Done():
		case <-done:
		}
	}()
	return func() { close(done) }
}

// limitWrites gives a stream's writes stopWriteGrace from now: a client
// that stopped reading would hold its write, and the daemon's stop with it
// (Shutdown waits for every handler).
func limitWrites(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(stopWriteGrace))
}

// stopWriteGrace bounds how long a stream's writes may block once the daemon
// stops: a reader that keeps up gets its last line well within it.
const stopWriteGrace = time.Second

func (s *Server) handleScreen(w http.ResponseWriter, r *http.Request) {
	t, ref, ok := s.talker(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	lines := 0
	if v := q.Get("lines"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > MaxScreenLines {
			writeError(w, verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "lines", "max": MaxScreenLines},
				"lines must be a number from 0 to %d, got %q", MaxScreenLines, v))
			return
		}
		lines = n
	}
	ansi, err := flag01(q.Get("ansi"), "ansi")
	if err != nil {
		writeError(w, err)
		return
	}
	res, err := t.Screen(r.Context(), ref, lines, ansi)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// MaxScreenLines is the most history lines a screen request may ask for.
const MaxScreenLines = 10000

// MaxInputText is the largest text one input may carry, in bytes.
const MaxInputText = 64 << 10

func flag01(v, field string) (bool, error) {
	switch v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, invalid(field, "must be 1 or 0, got %q", v)
}

func (s *Server) handleInput(w http.ResponseWriter, r *http.Request) {
	t, ref, ok := s.talker(w, r)
	if !ok {
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	in, err := DecodeInput(body)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := t.Input(r.Context(), ref, in); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, InputResponse{Status: "sent"})
}

// DecodeInput decodes an input body strictly, as a create's (decodeObject:
// unknown, repeated or case-folded keys refused). Text that was not valid
// UTF-8 on the wire — raw invalid bytes, or an unpaired surrogate escape, both
// of which encoding/json would turn into U+FFFD silently — is refused rather
// than altered.
func DecodeInput(body []byte) (InputRequest, error) {
	if !utf8.Valid(body) {
		return InputRequest{}, invalid("text", "the body is not valid UTF-8")
	}
	var in InputRequest
	err := decodeObject(body, map[string]any{"text": &in.Text, "enter": &in.Enter, "keys": &in.Keys})
	if err != nil {
		return InputRequest{}, err
	}
	return in, nil
}

// outputLine is one JSON line of an output stream.
type outputLine struct {
	At      string `json:"at"`
	DataB64 string `json:"data_b64,omitempty"`
	Dropped *int64 `json:"dropped_bytes,omitempty"`
	Unknown bool   `json:"dropped_unknown,omitempty"`
	End     string `json:"end,omitempty"` // the last line: why the stream ended (OutputEnd…)
}

// Why an output stream ended, on its last line ({"at", "end": …}): a reader
// that must follow on (a log shipper) tells a session's end from the daemon's.
const (
	OutputEndSession  = "session_ended"
	OutputEndStopping = "supervisor_stopping"
)

func (s *Server) handleOutput(w http.ResponseWriter, r *http.Request) {
	t, ref, ok := s.talker(w, r)
	if !ok {
		return
	}
	if err := outputFollow(r.URL.Query().Get("follow")); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := s.stoppable(w, r)
	defer cancel()
	st, err := t.FollowOutput(ctx, ref)
	if err != nil {
		writeError(w, err)
		return
	}
	defer st.Close()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	flush(w)
	enc := json.NewEncoder(w)
	for {
		chunks, ok := st.Next(ctx)
		if !ok {
			s.endOutput(enc, w, r)
			return
		}
		for _, c := range chunks {
			line := outputLine{At: c.At.UTC().Format(time.RFC3339Nano)}
			if c.Data != nil {
				line.DataB64 = base64.StdEncoding.EncodeToString(c.Data)
			} else {
				d := c.Dropped
				line.Dropped, line.Unknown = &d, c.Unknown
			}
			if enc.Encode(line) != nil {
				return // the client hung up
			}
		}
		flush(w)
	}
}

// endOutput writes an output stream's last line, saying why it ended: the
// daemon stopping, or the session's end — nothing when the client hung up.
func (s *Server) endOutput(enc *json.Encoder, w http.ResponseWriter, r *http.Request) {
	line := outputLine{At: time.Now().UTC().Format(time.RFC3339Nano), End: OutputEndSession}
	select {
	case <-s.stopping:
		line.End = OutputEndStopping
	default:
		if r.Context().Err() != nil {
			return
		}
	}
	if enc.Encode(line) == nil {
		flush(w)
	}
}

// outputFollow checks output's follow parameter: exactly "1", the one form
// the contract documents. Any other value is refused, with the value: "true"
// was served while "0" was told "only follow=1 is served" (found outside-in).
func outputFollow(v string) error {
	if v == "1" {
		return nil
	}
	return invalid("follow", "only follow=1 is served, got %q: the daemon keeps no pane output (GET …/screen shows what the pane shows now)", v)
}

func flush(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *Server) handleWait(w http.ResponseWriter, r *http.Request) {
	t, ref, ok := s.talker(w, r)
	if !ok {
		return
	}
	req, err := parseWait(r)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := s.stoppable(w, r)
	defer cancel()
	res, err := t.Wait(ctx, ref, req)
	if err != nil {
		writeError(w, s.stoppedError(err))
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// stoppedError is err, unless the daemon's stop cut the request short: then
// busy (retry with the next daemon), not the timeout the ended wait looks like.
func (s *Server) stoppedError(err error) error {
	select {
	case <-s.stopping:
		// err is the cut-short wait's own timeout: saying so would
		// contradict the code, so only the stop is named.
		return verdict.Errorf(verdict.CodeBusy, map[string]any{"shutting_down": true},
			"the supervisor is shutting down: ask the next daemon")
	default:
		return err
	}
}

// parseWait reads ?exit=1 | idle=DURATION | text=S, and timeout=DURATION (Go
// duration syntax: 300ms, 5s, 2m).
func parseWait(r *http.Request) (WaitRequest, error) {
	q := r.URL.Query()
	var req WaitRequest
	var err error
	if req.Exit, err = flag01(q.Get("exit"), "exit"); err != nil {
		return req, err
	}
	if req.Idle, err = duration(q.Get("idle"), "idle"); err != nil {
		return req, err
	}
	if req.Timeout, err = duration(q.Get("timeout"), "timeout"); err != nil {
		return req, err
	}
	req.Text = q.Get("text")
	n := 0
	for _, set := range []bool{req.Exit, req.Idle > 0, req.Text != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return req, invalid("condition", "give exactly one of exit=1, idle=DURATION and text=STRING")
	}
	return req, nil
}

func duration(v, field string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, invalid(field, "must be a positive duration such as 500ms, 5s or 2m, got %q", v)
	}
	return d, nil
}
