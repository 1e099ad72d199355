package verdict

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// TimeFormat is @timestamp's layout: RFC 3339 in UTC with exactly nine
// fractional digits, so that lines sort as text and keep nanoseconds.
const TimeFormat = "2006-01-02T15:04:05.000000000Z"

// IdentityRef is skc.identity: the identity a verdict is about.
type IdentityRef struct {
	StateDir  string `json:"state_dir"`
	SessionID string `json:"session_id"`
}

// SessionRef is skc.session: the tmux session a verdict is about.
type SessionRef struct {
	Name       string `json:"name"`
	ID         string `json:"id"` // tmux session id, "$3"
	Generation uint64 `json:"generation"`
}

// ReservationRef is skc.reservation: the fence reservation a verdict is about.
type ReservationRef struct {
	ID    string `json:"id"`
	Phase string `json:"phase"` // "reserved", "helper_invoked", … (fence phase names)
}

// Exit is skc.exit on an ended verdict: how the agent ended, as far as known.
type Exit struct {
	Status *int   `json:"status"` // exit status; nil (null) when unknown or killed by a signal
	Signal string `json:"signal"` // signal name such as "SIGKILL", "" when none
}

// RestartRef is skc.restart: Count is the identity's starts after the first
// (since its last create) — on a restart's published verdict, this start
// included; on gave_up, all it had.
type RestartRef struct {
	Count int `json:"count"`
}

// ExitStatus returns an *Exit with the given exit status and no signal.
func ExitStatus(status int) *Exit { return &Exit{Status: &status} }

// ExitSignal returns an *Exit for a process killed by the named signal.
func ExitSignal(name string) *Exit { return &Exit{Signal: name} }

// Record is one verdict: the docs/contract.md shape, one JSON object per line of
// verdicts.jsonl. MarshalJSON and UnmarshalJSON are exact inverses for every
// record this package writes (timestamps in UTC without a monotonic reading,
// evidence numbers as json.Number).
type Record struct {
	Timestamp time.Time     // @timestamp
	Action    string        // event.action: ActionCreate, …
	Outcome   string        // event.outcome: OutcomeSuccess, OutcomeFailure, OutcomeUnknown
	Reason    string        // event.reason: a Reason… constant or Classify(code).Reason
	Sequence  int64         // event.sequence, assigned by the Journal (0 before)
	Duration  time.Duration // event.duration in ns; omitted when zero

	Verdict  string // skc.verdict: VerdictPublished, …
	Code     string // skc.code: a Code, "" on success
	ExitKind string // skc.exit_kind: ExitKind…, "" unless Verdict is ended

	Identity    *IdentityRef    // skc.identity; omitted when nil
	Session     *SessionRef     // skc.session; omitted when nil
	Reservation *ReservationRef // skc.reservation; omitted when nil
	Exit        *Exit           // skc.exit; omitted when nil
	Restart     *RestartRef     // skc.restart; omitted when nil (starts after the first, gave_up)
	Evidence    map[string]any  // skc.evidence; always written, {} when empty

	// OutputTail is skc.output.tail on an ended verdict: the last lines the
	// agent's pane showed (at most 50 lines and 8 KiB, control characters
	// removed, lines joined by LF); omitted when "".
	OutputTail string
}

// MarshalJSON encodes r as one line of JSON without a trailing newline, fields
// in the order docs/contract.md shows them.
//
// The encoder is hand-built rather than a zerolog Event because an Event is
// silently dropped when zerolog's global level is Disabled (tests and tools set
// it): a verdict must never depend on log settings. Strings are escaped the way
// zerolog escapes them (invalid UTF-8 becomes U+FFFD).
func (r Record) MarshalJSON() ([]byte, error) {
	return r.AppendJSON(make([]byte, 0, 512)), nil
}

// AppendJSON appends r's JSON encoding (no newline) to dst.
func (r Record) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"@timestamp":`...)
	dst = appendString(dst, r.Timestamp.UTC().Format(TimeFormat))
	dst = append(dst, `,"event":{"kind":"event","action":`...)
	dst = appendString(dst, r.Action)
	dst = append(dst, `,"outcome":`...)
	dst = appendString(dst, r.Outcome)
	dst = append(dst, `,"reason":`...)
	dst = appendString(dst, r.Reason)
	dst = append(dst, `,"sequence":`...)
	dst = strconv.AppendInt(dst, r.Sequence, 10)
	if r.Duration != 0 {
		dst = append(dst, `,"duration":`...)
		dst = strconv.AppendInt(dst, int64(r.Duration), 10)
	}
	dst = append(dst, `},"skc":{"verdict":`...)
	dst = appendString(dst, r.Verdict)
	dst = append(dst, `,"code":`...)
	dst = appendString(dst, r.Code)
	dst = append(dst, `,"exit_kind":`...)
	dst = appendString(dst, r.ExitKind)
	dst = r.appendRefs(dst)
	dst = append(dst, `,"evidence":`...)
	dst = appendEvidence(dst, r.Evidence)
	return append(dst, "}}"...)
}

// appendRefs appends the optional skc.identity, session, reservation and exit.
func (r Record) appendRefs(dst []byte) []byte {
	if id := r.Identity; id != nil {
		dst = append(dst, `,"identity":{"state_dir":`...)
		dst = appendString(dst, id.StateDir)
		dst = append(dst, `,"session_id":`...)
		dst = appendString(dst, id.SessionID)
		dst = append(dst, '}')
	}
	if s := r.Session; s != nil {
		dst = append(dst, `,"session":{"name":`...)
		dst = appendString(dst, s.Name)
		dst = append(dst, `,"id":`...)
		dst = appendString(dst, s.ID)
		dst = append(dst, `,"generation":`...)
		dst = strconv.AppendUint(dst, s.Generation, 10)
		dst = append(dst, '}')
	}
	if res := r.Reservation; res != nil {
		dst = append(dst, `,"reservation":{"id":`...)
		dst = appendString(dst, res.ID)
		dst = append(dst, `,"phase":`...)
		dst = appendString(dst, res.Phase)
		dst = append(dst, '}')
	}
	if x := r.Exit; x != nil {
		dst = append(dst, `,"exit":{"status":`...)
		if x.Status == nil {
			dst = append(dst, "null"...)
		} else {
			dst = strconv.AppendInt(dst, int64(*x.Status), 10)
		}
		dst = append(dst, `,"signal":`...)
		dst = appendString(dst, x.Signal)
		dst = append(dst, '}')
	}
	if r.OutputTail != "" {
		dst = append(dst, `,"output":{"tail":`...)
		dst = appendString(dst, r.OutputTail)
		dst = append(dst, '}')
	}
	if rs := r.Restart; rs != nil {
		dst = append(dst, `,"restart":{"count":`...)
		dst = strconv.AppendInt(dst, int64(rs.Count), 10)
		dst = append(dst, '}')
	}
	return dst
}

// appendEvidence encodes the evidence map with sorted keys (encoding/json's
// map order), so equal records encode to equal bytes. A value that cannot be
// encoded (a channel, NaN) must not cost the verdict: the evidence is replaced
// by a note saying why.
func appendEvidence(dst []byte, ev map[string]any) []byte {
	if len(ev) == 0 {
		return append(dst, "{}"...)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ev); err != nil {
		dst = append(dst, `{"unencodable":`...)
		dst = appendString(dst, err.Error())
		return append(dst, '}')
	}
	return append(dst, bytes.TrimRight(buf.Bytes(), "\n")...)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Control characters, '"' and '\' are
// escaped (DEL too); invalid UTF-8 bytes become U+FFFD, as zerolog does.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c == '\b':
				dst = append(dst, '\\', 'b')
			case c == '\f':
				dst = append(dst, '\\', 'f')
			case c < 0x20 || c == 0x7f:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

// recordJSON mirrors the wire shape for decoding.
type recordJSON struct {
	Timestamp string `json:"@timestamp"`
	Event     struct {
		Kind     string `json:"kind"`
		Action   string `json:"action"`
		Outcome  string `json:"outcome"`
		Reason   string `json:"reason"`
		Sequence int64  `json:"sequence"`
		Duration int64  `json:"duration"`
	} `json:"event"`
	Skc struct {
		Verdict     string          `json:"verdict"`
		Code        string          `json:"code"`
		ExitKind    string          `json:"exit_kind"`
		Identity    *IdentityRef    `json:"identity"`
		Session     *SessionRef     `json:"session"`
		Reservation *ReservationRef `json:"reservation"`
		Exit        *Exit           `json:"exit"`
		Restart     *RestartRef     `json:"restart"`
		Output      *struct {
			Tail string `json:"tail"`
		} `json:"output"`
		Evidence json.RawMessage `json:"evidence"`
	} `json:"skc"`
}

// UnmarshalJSON decodes one verdict line. Unknown fields are ignored (the
// contract lets output gain fields). Evidence numbers decode as json.Number so
// that pids and sizes survive exactly and re-encode to the same text.
func (r *Record) UnmarshalJSON(b []byte) error {
	var j recordJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	ts, err := time.Parse(time.RFC3339Nano, j.Timestamp)
	if err != nil {
		return fmt.Errorf("verdict: @timestamp: %w", err)
	}
	out := Record{
		Timestamp: ts.UTC(), Action: j.Event.Action, Outcome: j.Event.Outcome,
		Reason: j.Event.Reason, Sequence: j.Event.Sequence,
		Duration: time.Duration(j.Event.Duration),
		Verdict:  j.Skc.Verdict, Code: j.Skc.Code, ExitKind: j.Skc.ExitKind,
		Identity: j.Skc.Identity, Session: j.Skc.Session,
		Reservation: j.Skc.Reservation, Exit: j.Skc.Exit, Restart: j.Skc.Restart,
	}
	if j.Skc.Output != nil {
		out.OutputTail = j.Skc.Output.Tail
	}
	if len(j.Skc.Evidence) > 0 && !bytes.Equal(j.Skc.Evidence, []byte("null")) {
		dec := json.NewDecoder(bytes.NewReader(j.Skc.Evidence))
		dec.UseNumber()
		if err := dec.Decode(&out.Evidence); err != nil {
			return fmt.Errorf("verdict: skc.evidence: %w", err)
		}
		if len(out.Evidence) == 0 {
			out.Evidence = nil
		}
	}
	*r = out
	return nil
}

// Line returns r encoded as one verdicts.jsonl line, with its trailing LF.
func (r Record) Line() []byte {
	return append(r.AppendJSON(make([]byte, 0, 512)), '\n')
}

// ParseLine decodes one line (with or without its LF) into a Record.
func ParseLine(line []byte) (Record, error) {
	var r Record
	err := r.UnmarshalJSON(bytes.TrimRight(line, "\r\n"))
	return r, err
}

// Validate checks r against the vocabulary: a known action, outcome and
// verdict, and a known reason, code and exit kind when set. Writers log a
// failure rather than drop the record.
func (r Record) Validate() error {
	var bad []string
	check := func(field, v string, ok bool) {
		if !ok {
			bad = append(bad, fmt.Sprintf("%s %q", field, v))
		}
	}
	check("event.action", r.Action, contains(Actions, r.Action))
	check("event.outcome", r.Outcome, contains(Outcomes, r.Outcome))
	check("skc.verdict", r.Verdict, contains(Verdicts, r.Verdict))
	check("event.reason", r.Reason, r.Reason == "" || contains(AllReasons(), r.Reason))
	check("skc.code", r.Code, r.Code == "" || Known(r.Code))
	check("skc.exit_kind", r.ExitKind, r.ExitKind == "" || contains(ExitKinds, r.ExitKind))
	if len(bad) == 0 {
		return nil
	}
	return Errorf(CodeInvalidRequest, map[string]any{"field": "verdict"},
		"verdict: unknown %s", strings.Join(bad, ", "))
}
