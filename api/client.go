package api

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
	"strconv"
	"syscall"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Client is the typed Go client of the API on a unix socket. Every error it
// returns is a *verdict.Error: the daemon's own error, or daemon_unreachable
// (exit 69) when the socket cannot be reached.
type Client struct {
	socket string
	hc     *http.Client
	// starting, when set, says whether a daemon holds the home while its
	// socket does not answer yet (see WaitStarting).
	starting func() bool
}

// NewClient returns a client of the daemon listening on socket.
func NewClient(socket string) *Client {
	c := &Client{socket: socket}
	tr := &http.Transport{
		DialContext:        func(ctx context.Context, _, _ string) (net.Conn, error) { return c.dial(ctx) },
		DisableCompression: true,
		MaxIdleConns:       2,
	}
	c.hc = &http.Client{Transport: tr}
	return c
}

// StartingWait bounds how long a request waits for a daemon that holds its
// home but does not listen yet: its start adopts every live session before
// the API listens, seconds with thousands of them. A var only for tests.
var StartingWait = 60 * time.Second

// WaitStarting makes the client wait, up to StartingWait (or its request's
// context), while its socket is missing or refuses connections and
// starting() says a daemon holds the home: a daemon restarted under many
// sessions answered daemon_unreachable (exit 69) to every command until its
// recovery was over, though it was about to answer. It returns c.
func (c *Client) WaitStarting(starting func() bool) *Client {
	c.starting = starting
	return c
}

func (c *Client) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	deadline := time.Now().Add(StartingWait)
	for {
		conn, err := d.DialContext(ctx, "unix", c.socket)
		if err == nil {
			return conn, nil
		}
		notYet := errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
		if !notYet || c.starting == nil || time.Now().After(deadline) || !c.starting() {
			return nil, &dialError{err: err}
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, &dialError{err: err}
		case <-t.C:
		}
	}
}

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// Do sends one request and returns the raw JSON body of a 2xx answer; any
// other answer becomes the daemon's *verdict.Error. in, when not nil, is sent
// as the JSON body.
func (c *Client) Do(ctx context.Context, method, path string, in any) (json.RawMessage, error) {
	resp, err := c.send(ctx, method, path, in)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, c.unreachable(err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, decodeError(resp.StatusCode, b)
	}
	return b, nil
}

func (c *Client) send(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, verdict.Errorf(verdict.CodeInvalidRequest, nil, "encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://skc"+path, body)
	if err != nil {
		return nil, verdict.Errorf(verdict.CodeInternal, nil, "build request: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && !isDial(err) {
			return nil, verdict.Errorf(verdict.CodeTimeout, nil, "%s %s: %w", method, path, ctxErr)
		}
		return nil, c.unreachable(err)
	}
	return resp, nil
}

func isDial(err error) bool {
	var d *dialError
	return errors.As(err, &d)
}

func (c *Client) unreachable(err error) error {
	if errors.Is(err, syscall.EACCES) {
		// The socket (or its directory) does not let this user in: starting
		// serve would not help, so not 69 but 77, as a refused peer gets.
		return verdict.Errorf(verdict.CodePermissionDenied, map[string]any{"socket": c.socket},
			"cannot connect to %s: permission denied (the socket and its directory are private to the user that runs serve): %w", c.socket, err)
	}
	if isDial(err) && c.starting != nil && c.starting() {
		return verdict.Errorf(verdict.CodeDaemonUnreachable, map[string]any{"socket": c.socket, "starting": true},
			"the daemon holds its home but did not answer on %s within %v (still starting? see its log): %w", c.socket, StartingWait, err)
	}
	return verdict.Errorf(verdict.CodeDaemonUnreachable, map[string]any{"socket": c.socket},
		"the daemon is not reachable on %s (is `skc-supervisor serve` running?): %w", c.socket, err)
}

// decodeError turns an error answer into the daemon's *verdict.Error; an
// answer that is not the error shape keeps its status in the message.
func decodeError(status int, b []byte) error {
	var eb struct {
		Error *verdict.Error `json:"error"`
	}
	if json.Unmarshal(b, &eb) == nil && eb.Error != nil && eb.Error.Code != "" {
		return eb.Error
	}
	return verdict.Errorf(verdict.CodeInternal, map[string]any{"http_status": status},
		"unexpected answer %d: %.200s", status, b)
}

func (c *Client) get(ctx context.Context, method, path string, in, out any) error {
	b, err := c.Do(ctx, method, path, in)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return verdict.Errorf(verdict.CodeInternal, nil, "decode answer of %s %s: %w", method, path, err)
	}
	return nil
}

// Ping checks that the daemon answers.
func (c *Client) Ping(ctx context.Context) error {
	var out struct {
		OK bool `json:"ok"`
	}
	return c.get(ctx, http.MethodGet, "/v1/ping", nil, &out)
}

// Info returns the daemon's version, pid, start time and home.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var out Info
	return out, c.get(ctx, http.MethodGet, "/v1/info", nil, &out)
}

// Create asks for a session.
func (c *Client) Create(ctx context.Context, req CreateRequest) (CreateResponse, error) {
	var out CreateResponse
	return out, c.get(ctx, http.MethodPost, "/v1/sessions", req, &out)
}

// List lists the sessions of the supervised server.
func (c *Client) List(ctx context.Context) (ListResponse, error) {
	var out ListResponse
	return out, c.get(ctx, http.MethodGet, "/v1/sessions", nil, &out)
}

// ListFleet lists this host's sessions and every other host's running ones
// (`ls --fleet`).
func (c *Client) ListFleet(ctx context.Context) (ListResponse, error) {
	var out ListResponse
	return out, c.get(ctx, http.MethodGet, "/v1/sessions?fleet=1", nil, &out)
}

// Show describes one session.
func (c *Client) Show(ctx context.Context, ref Ref) (ShowResponse, error) {
	var out ShowResponse
	return out, c.get(ctx, http.MethodGet, RefPath(ref), nil, &out)
}

// Kill ends one session and returns its verdict.
func (c *Client) Kill(ctx context.Context, ref Ref) (KillResponse, error) {
	var out KillResponse
	return out, c.get(ctx, http.MethodDelete, RefPath(ref), nil, &out)
}

// Restart ends one session's running agent and starts its next generation.
func (c *Client) Restart(ctx context.Context, ref Ref) (RestartResponse, error) {
	var out RestartResponse
	return out, c.get(ctx, http.MethodPost, RestartPath(ref), nil, &out)
}

// RestartPath is the restart request's path for ref.
func RestartPath(ref Ref) string {
	if ref.Name != "" {
		return "/v1/sessions/" + url.PathEscape(ref.Name) + "/restart"
	}
	q := url.Values{"state_dir": {ref.StateDir}, "session_id": {ref.SessionID}}
	return "/v1/identity/restart?" + q.Encode()
}

// Fence returns the fence's reservations and published identities.
func (c *Client) Fence(ctx context.Context) (FenceResponse, error) {
	var out FenceResponse
	return out, c.get(ctx, http.MethodGet, "/v1/fence", nil, &out)
}

// Forget is `fence forget --host NAME`: POST /v1/fence/forget.
func (c *Client) Forget(ctx context.Context, host string) (ForgetResponse, error) {
	var out ForgetResponse
	return out, c.get(ctx, http.MethodPost, "/v1/fence/forget", ForgetRequest{Host: host}, &out)
}

// Release is `fence release --reservation ID`: POST /v1/fence/release.
func (c *Client) Release(ctx context.Context, resID string) (ReleaseResponse, error) {
	var out ReleaseResponse
	return out, c.get(ctx, http.MethodPost, "/v1/fence/release", ReleaseRequest{ReservationID: resID}, &out)
}

// RefPath is the URL path that names ref: /v1/sessions/{name} or
// /v1/identity?state_dir=…&session_id=….
func RefPath(ref Ref) string {
	if ref.Name != "" {
		return "/v1/sessions/" + url.PathEscape(ref.Name)
	}
	q := url.Values{"state_dir": {ref.StateDir}, "session_id": {ref.SessionID}}
	return "/v1/identity?" + q.Encode()
}

// Verdicts calls fn with each verdict line (without its LF) after since,
// oldest first. With follow it keeps streaming until ctx is done (then it
// returns nil) or the daemon goes away (daemon_unreachable).
func (c *Client) Verdicts(ctx context.Context, since int64, follow bool, fn func(line []byte) error) error {
	return c.verdicts(ctx, verdictsPath(since, follow, false), follow, fn)
}

// FleetVerdicts is Verdicts over the fleet's journal (`verdicts --fleet`):
// every host's verdicts, in the fleet-wide sequence.
func (c *Client) FleetVerdicts(ctx context.Context, since int64, follow bool, fn func(line []byte) error) error {
	return c.verdicts(ctx, verdictsPath(since, follow, true), follow, fn)
}

func verdictsPath(since int64, follow, fleet bool) string {
	path := "/v1/verdicts?since=" + strconv.FormatInt(since, 10)
	if follow {
		path += "&follow=1"
	}
	if fleet {
		path += "&fleet=1"
	}
	return path
}

func (c *Client) verdicts(ctx context.Context, path string, follow bool, fn func(line []byte) error) error {
	resp, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		if ctx.Err() != nil && follow {
			return nil
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return decodeError(resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if err := fn(sc.Bytes()); err != nil {
			return err
		}
	}
	err = sc.Err()
	switch {
	case ctx.Err() != nil:
		return nil // the caller stopped following
	case err != nil:
		return c.unreachable(fmt.Errorf("verdict stream: %w", err))
	case follow:
		// A follow only ends from our side; the daemon ending it means it
		// stopped, and a log shipper must know to reconnect.
		return c.unreachable(errors.New("the daemon ended the verdict stream (it is stopping)"))
	}
	return nil
}
