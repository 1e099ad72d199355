package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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
		"state_dir": &req.StateDir, "session_id": &req.SessionID, "state_file": &givenString{&req.StateFile},
		"argv": &req.Argv, "cwd": &givenString{&req.Cwd}, "env": &req.Env, "label": &req.Label, "wait_ms": &req.WaitMS,
		"stop_timeout_ms": &req.StopTimeoutMS, "restart": &givenString{&req.Restart}, "resume_argv": &req.ResumeArgv,
		"restart_delay_ms": &req.RestartDelayMS, "restart_burst": &req.RestartBurst,
		"restart_interval_s": &req.RestartIntervalS,
	}
	return req, decodeObject(body, targets)
}

// errEmptyString is givenString's refusal of "".
var errEmptyString = errors.New("empty string")

// givenString is the decode target of an optional string field whose
// absence means its default (state_file, cwd, restart): absent or null it
// stays "", but "" written is refused (errEmptyString). An empty path is no
// path and an empty policy no policy: taking either for "absent" hid the
// mistake behind the default (found outside-in: "restart": "" created
// with restart never, "cwd": "" in the daemon's directory).
type givenString struct{ s *string }

// UnmarshalJSON decodes a JSON string into g, refusing "".
func (g *givenString) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // a null field is an absent one
	}
	if err := json.Unmarshal(b, g.s); err != nil {
		return err
	}
	if *g.s == "" {
		return errEmptyString
	}
	return nil
}

// decodeObject decodes body, one JSON object, into targets strictly: keys
// matched exactly (encoding/json alone would fold "TEXT" into "text"), no
// unknown or repeated keys (it would keep the last of two), each value of its
// field's type and no unpaired surrogate escape in it, nothing after the
// object. Every refusal names its field.
func decodeObject(body []byte, targets map[string]any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return syntaxError(err, "must be one JSON object")
	}
	seen := make(map[string]bool, len(targets))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return syntaxError(err, "")
		}
		key, _ := tok.(string)
		target, ok := targets[key]
		switch {
		case !ok:
			return invalid(key, "unknown field")
		case seen[key]:
			return invalid(key, "given twice")
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return syntaxError(err, "")
		}
		if unpairedSurrogate(raw) {
			// encoding/json would make it U+FFFD: refused, as raw bad bytes are.
			return invalid(key, "contains an unpaired surrogate escape (not valid UTF-8)")
		}
		if err := json.Unmarshal(raw, target); errors.Is(err, errEmptyString) {
			return invalid(key, "is empty: give a value, or leave the field out for its default")
		} else if err != nil {
			return invalid(key, "has the wrong type (%s)", typeName(err))
		}
		if at, ok := nullMember(raw); ok {
			// encoding/json would make it "" — an argument or a variable
			// the caller never wrote. (A null field itself is an absent one.)
			return invalid(key, "has null at %s where a value is required", at)
		}
		if k, twice := repeatedKey(raw); twice {
			// An object field (env): encoding/json would keep the last.
			return invalid(key, "has the key %q twice", k)
		}
	}
	if _, err := dec.Token(); err != nil {
		return syntaxError(err, "")
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("body", "has data after the JSON object")
	}
	return nil
}

// nullMember reports a null element of the JSON array raw, or a null value
// of the JSON object raw, naming its index or key; false for anything else.
func nullMember(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '[' && raw[0] != '{' {
		return "", false
	}
	var arr []json.RawMessage
	if json.Unmarshal(raw, &arr) == nil {
		for i, v := range arr {
			if string(v) == "null" {
				return fmt.Sprintf("index %d", i), true
			}
		}
		return "", false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) == nil {
		for k, v := range obj {
			if string(v) == "null" {
				return fmt.Sprintf("key %q", k), true
			}
		}
	}
	return "", false
}

// repeatedKey reports a key that the JSON object raw (a field's value) holds
// twice; false for anything but an object. Its values are skipped whole.
func repeatedKey(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '{' {
		return "", false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return "", false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		k, _ := tok.(string)
		if seen[k] {
			return k, true
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false
		}
	}
	return "", false
}

// unpairedSurrogate reports whether the JSON text b holds a \u escape of a
// UTF-16 surrogate that is not one half of a pair (high then low): JSON allows
// it, but it names no character, and encoding/json decodes it as U+FFFD.
// Backslashes occur only inside strings in valid JSON, so a plain scan of
// escapes is exact.
func unpairedSurrogate(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if i+1 >= len(b) || b[i+1] != 'u' {
			i++ // an escaped character: \\ must not start another escape
			continue
		}
		r, ok := hex4(b, i+2)
		switch {
		case !ok || r < 0xD800 || r > 0xDFFF:
		case r >= 0xDC00: // a low half alone
			return true
		default: // a high half: a low one must follow at once
			lo, ok := rune(0), false
			if i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				lo, ok = hex4(b, i+8)
			}
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 6
		}
		i += 5
	}
	return false
}

// hex4 reads the four hex digits of a \u escape at b[at:].
func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
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
