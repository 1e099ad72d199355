package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"unicode/utf8"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// DecodeCreate decodes a POST /v1/sessions body strictly: one JSON object,
// keys matched exactly (encoding/json alone would accept "STATE_DIR"), no
// unknown or duplicate keys, every value of its field's type, nothing after
// the object. The body must be valid UTF-8: the decoder would otherwise turn
// bad bytes into U+FFFD, and an argv must arrive byte-for-byte or not at all.
func DecodeCreate(body []byte) (CreateRequest, error) {
	var req CreateRequest
	if !utf8.Valid(body) {
		return req, invalid("body", "is not valid UTF-8")
	}
	targets := map[string]any{
		"state_dir": &req.StateDir, "session_id": &req.SessionID, "state_file": &req.StateFile,
		"argv": &req.Argv, "cwd": &req.Cwd, "env": &req.Env, "label": &req.Label, "wait_ms": &req.WaitMS,
		"stop_timeout_ms": &req.StopTimeoutMS, "restart": &req.Restart, "resume_argv": &req.ResumeArgv,
		"restart_delay_ms": &req.RestartDelayMS, "restart_burst": &req.RestartBurst,
		"restart_interval_s": &req.RestartIntervalS,
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return req, syntaxError(err, "must be one JSON object")
	}
	seen := make(map[string]bool, len(targets))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return req, syntaxError(err, "")
		}
		key, _ := tok.(string)
		target, ok := targets[key]
		switch {
		case !ok:
			return req, invalid(key, "unknown field")
		case seen[key]:
			return req, invalid(key, "given twice")
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return req, syntaxError(err, "")
		}
		if err := json.Unmarshal(raw, target); err != nil {
			return req, invalid(key, "has the wrong type (%s)", typeName(err))
		}
	}
	if _, err := dec.Token(); err != nil {
		return req, syntaxError(err, "")
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, invalid("body", "has data after the JSON object")
	}
	return req, nil
}

func syntaxError(err error, what string) error {
	switch {
	case err == nil:
		return invalid("body", "%s", what)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("body", "is empty or truncated")
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "body", "offset": se.Offset},
			"body: malformed JSON at byte %d: %v", se.Offset, se)
	}
	return invalid("body", "malformed JSON: %v", err)
}

func typeName(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return "expected " + te.Type.String() + ", got " + te.Value
	}
	return err.Error()
}
