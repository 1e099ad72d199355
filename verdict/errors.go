package verdict

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Error is every typed refusal or failure that crosses a package boundary. Its
// Code is stable and machine-readable; Message is for people; Details carries
// the evidence a caller or an operator needs (the field that was invalid, the
// pid that holds a reservation, …). Err is the wrapped cause, if any.
type Error struct {
	Code    Code           // stable snake_case, e.g. "identity_reserved_live"
	Message string         // human diagnostic
	Details map[string]any // e.g. {"field": "state_dir"}, {"owner_pid": 42}
	Err     error          // wrapped cause (Unwrap)
}

// Errorf returns an *Error with the given code and details and a message
// formatted like fmt.Errorf. A %w verb in format also sets Err, so the cause
// stays reachable through errors.Is and errors.As.
func Errorf(code Code, details map[string]any, format string, args ...any) *Error {
	formatted := fmt.Errorf(format, args...)
	// A cause of the same code, formatted with its Error(), would say the
	// code again inside the message ("fence_unavailable: … fence_unavailable:
	// …"): the code is said once, by the outer error.
	msg := strings.ReplaceAll(formatted.Error(), code+": ", "")
	e := &Error{Code: code, Message: msg, Details: details}
	if u, ok := formatted.(interface{ Unwrap() error }); ok {
		e.Err = u.Unwrap()
	} else if u, ok := formatted.(interface{ Unwrap() []error }); ok {
		e.Err = errors.Join(u.Unwrap()...)
	}
	return e
}

// Error returns "code: message", the form operators grep for in logs.
func (e *Error) Error() string {
	if e == nil {
		return "<nil>"
	}
	msg := e.Message
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	if msg == "" {
		return e.Code
	}
	return e.Code + ": " + msg
}

// Unwrap returns the wrapped cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, &Error{Code: c}) match any *Error with code c, so
// callers can test for a code without caring about the message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && e != nil && t.Code == e.Code && t.Message == ""
}

// Class returns Classify(e.Code).
func (e *Error) Class() Class { return Classify(e.Code) }

// errorJSON is the API's error object: {"code", "message", "details"}.
type errorJSON struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
}

// MarshalJSON encodes the API error object {"code","message","details"};
// details is {} rather than null so consumers can index it unconditionally.
// The wrapped cause is not exposed: it may carry internal detail.
func (e *Error) MarshalJSON() ([]byte, error) {
	d := e.Details
	if d == nil {
		d = map[string]any{}
	}
	return json.Marshal(errorJSON{Code: e.Code, Message: e.Message, Details: d})
}

// UnmarshalJSON decodes the API error object (used by the typed API client).
func (e *Error) UnmarshalJSON(b []byte) error {
	var j errorJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*e = Error{Code: j.Code, Message: j.Message, Details: j.Details}
	return nil
}

// CodeOf returns the code of the first *Error in err's chain. A context
// deadline is CodeTimeout; any other error is CodeInternal; nil is "".
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) && e != nil {
		return e.Code
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return CodeTimeout
	}
	return CodeInternal
}

// AsError returns err as an *Error: the first *Error in its chain, or a new
// one with CodeOf(err) wrapping err. It returns nil for nil.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) && e != nil {
		return e
	}
	return &Error{Code: CodeOf(err), Message: err.Error(), Err: err}
}

// HasCode reports whether err carries code.
func HasCode(err error, code Code) bool { return err != nil && CodeOf(err) == code }
