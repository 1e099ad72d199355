package api

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// talkPath is /v1/sessions/{name}/what, or /v1/identity/what for a ref by
// identity, with query q (its state_dir and session_id added for an identity).
func talkPath(ref Ref, what string, q url.Values) string {
	p := "/v1/sessions/" + url.PathEscape(ref.Name) + "/" + what
	if ref.Name == "" {
		p = "/v1/identity/" + what
		q.Set("state_dir", ref.StateDir)
		q.Set("session_id", ref.SessionID)
	}
	if len(q) == 0 {
		return p
	}
	return p + "?" + q.Encode()
}

// Screen reads what the session's pane shows (history lines and colours on
// request).
func (c *Client) Screen(ctx context.Context, ref Ref, lines int, ansi bool) (ScreenResponse, error) {
	q := url.Values{"lines": {strconv.Itoa(lines)}}
	if ansi {
		q.Set("ansi", "1")
	}
	var out ScreenResponse
	return out, c.get(ctx, http.MethodGet, talkPath(ref, "screen", q), nil, &out)
}

// Input types in to the session's agent.
func (c *Client) Input(ctx context.Context, ref Ref, in InputRequest) (InputResponse, error) {
	var out InputResponse
	return out, c.get(ctx, http.MethodPost, talkPath(ref, "input", url.Values{}), in, &out)
}

// Wait blocks until the condition holds (nil error), the session is gone
// (not_found) or the timeout passes (timeout).
func (c *Client) Wait(ctx context.Context, ref Ref, req WaitRequest) (WaitResponse, error) {
	q := url.Values{}
	switch {
	case req.Exit:
		q.Set("exit", "1")
	case req.Idle > 0:
		q.Set("idle", req.Idle.String())
	default:
		q.Set("text", req.Text)
	}
	if req.Timeout > 0 {
		q.Set("timeout", req.Timeout.String())
	}
	var out WaitResponse
	return out, c.get(ctx, http.MethodGet, talkPath(ref, "wait", q), nil, &out)
}

// Output follows the session's output: fn gets each chunk (Data, or a gap)
// until the session ends (nil), ctx is done (nil) or fn fails (its error).
func (c *Client) Output(ctx context.Context, ref Ref, fn func(OutputChunk) error) error {
	resp, err := c.send(ctx, http.MethodGet, talkPath(ref, "output", url.Values{"follow": {"1"}}), nil)
	if err != nil {
		if ctx.Err() != nil {
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
		ch, end, err := parseOutputLine(sc.Bytes())
		switch {
		case err != nil:
			return err
		case end == OutputEndStopping:
			return c.unreachable(errors.New("the daemon ended the output stream (it is stopping)"))
		case end != "":
			return nil
		}
		if err := fn(ch); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil // the caller stopped following
	}
	// A stream always ends with its end line; one that stops without it was
	// cut (the daemon died, the connection broke): not the session's end.
	if err := sc.Err(); err != nil {
		return c.unreachable(fmt.Errorf("output stream cut: %w", err))
	}
	return c.unreachable(errors.New("output stream cut before its end line (the daemon went away)"))
}

// parseOutputLine reads one line of an output stream: a chunk, or the last
// line's reason (end).
func parseOutputLine(b []byte) (ch OutputChunk, end string, err error) {
	var l outputLine
	if err := json.Unmarshal(b, &l); err != nil {
		return OutputChunk{}, "", verdict.Errorf(verdict.CodeInternal, nil, "output stream line: %v", err)
	}
	if l.End != "" {
		return OutputChunk{}, l.End, nil
	}
	at, _ := time.Parse(time.RFC3339Nano, l.At)
	ch = OutputChunk{At: at, Unknown: l.Unknown}
	if l.Dropped != nil {
		ch.Dropped = *l.Dropped
		return ch, "", nil
	}
	data, err := base64.StdEncoding.DecodeString(l.DataB64)
	if err != nil {
		return OutputChunk{}, "", verdict.Errorf(verdict.CodeInternal, nil, "output stream data: %v", err)
	}
	ch.Data = data
	return ch, "", nil
}
