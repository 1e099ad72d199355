package census

import (
	"context"
	"errors"
	"strconv"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// Authority is Inspect's answer about one identity's child.
type Authority int

// Authority values. Unknown is the zero value: the fail-closed answer.
const (
	Unknown       Authority = 0
	Authoritative Authority = 1
	Orphan        Authority = 2
	Absent        Authority = 3
)

var authorityNames = map[Authority]string{
	Unknown: "unknown", Authoritative: "authoritative", Orphan: "orphan", Absent: "absent",
}

// String returns the snake_case name of a.
func (a Authority) String() string {
	if n, ok := authorityNames[a]; ok {
		return n
	}
	return "authority_" + strconv.Itoa(int(a))
}

// Evidence is what the caller knows about an identity's child.
type Evidence struct {
	IdentityDigest string             // the identity's @skc-identity value ("" → not used)
	AttemptName    string             // the session name the attempt used ("" → not used)
	TmuxID         string             // "$N" recorded for the attempt ("" → not used)
	Life           tmuxctl.ServerLife // the life TmuxID was recorded in; zero → any life (TmuxID is then ignored)
	Generation     uint64             // published generation, 0 when none
}

// Why Inspect answered Unknown; *InspectError carries one of these as Code.
const (
	UnknownUnsynced      = "census_unsynced"        // no full sync in the current life
	UnknownLifeMismatch  = "server_life_mismatch"   // the evidence names another server life
	UnknownTmux          = "tmux_unavailable"       // the fresh read failed
	UnknownContradiction = "evidence_contradiction" // the live state contradicts itself or the evidence
	UnknownBadEvidence   = "invalid_evidence"       // nothing to look for, or a malformed id or digest
)

// InspectError explains an Unknown answer.
type InspectError struct {
	Reason  string // one of the Unknown* codes
	Message string
	Err     error
}

// Error implements error.
func (e *InspectError) Error() string {
	s := "census: inspect unknown: " + e.Reason + ": " + e.Message
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Code is the stable snake_case reason.
func (e *InspectError) Code() string { return e.Reason }

// Unwrap returns the cause.
func (e *InspectError) Unwrap() error { return e.Err }

func unknown(reason, msg string, err error) (Authority, *Session, error) {
	return Unknown, nil, &InspectError{Reason: reason, Message: msg, Err: err}
}

// Inspect judges ev against a fresh read of live tmux (never the cache alone):
//   - Authoritative: one live session carries the identity digest and
//     @skc-generation == ev.Generation (≠ 0), and no other session carries
//     the attempt name or recorded id;
//   - Orphan: one live session carries the attempt name, the recorded id (in
//     ev.Life) or the identity digest, but not the published generation;
//   - Absent: synced, and no live session carries any of them;
//   - Unknown (with an *InspectError): unsynced, the life differs, tmux did
//     not answer, or the evidence points at more than one session (two
//     sessions with the identity, or a name or id whose session carries
//     another identity).
//
// Tags of every session judged are read with show-options on that session,
// so no window, pane or global option can shadow them. A pane that died
// under remain-on-exit does not change the answer: the session is live; the
// returned Session says PaneDead.
func (c *Census) Inspect(ctx context.Context, ev Evidence) (Authority, *Session, error) {
	j := c.InspectMany(ctx, []Evidence{ev})[0]
	return j.Authority, j.Session, j.Err
}

func checkEvidence(ev Evidence) error {
	switch {
	case ev.IdentityDigest == "" && ev.AttemptName == "" && (ev.TmuxID == "" || ev.Life == (tmuxctl.ServerLife{})):
		return errors.New("no identity digest, attempt name or tmux id with its server life")
	case ev.IdentityDigest != "" && !safeToken(ev.IdentityDigest):
		return errors.New("identity digest is not a safe token")
	case ev.TmuxID != "" && !validID(ev.TmuxID):
		return errors.New("tmux id is not $N")
	}
	return nil
}

// matchesSession says whether an exactly read session carries the evidence.
func matchesSession(ev Evidence, s Session) bool {
	return (ev.TmuxID != "" && ev.Life != (tmuxctl.ServerLife{}) && s.ID == ev.TmuxID) ||
		(ev.AttemptName != "" && s.Name == ev.AttemptName) ||
		(ev.IdentityDigest != "" && s.Tags[TagIdentity] == ev.IdentityDigest)
}

// judge classifies the exactly read sessions that carry the evidence.
func judge(ev Evidence, found []Session) (Authority, *Session, error) {
	switch len(found) {
	case 0:
		return Absent, nil, nil
	case 1:
	default:
		return unknown(UnknownContradiction, "the evidence points at "+strconv.Itoa(len(found))+" live sessions", nil)
	}
	s := found[0]
	id := s.Tags[TagIdentity]
	if ev.IdentityDigest != "" && id != "" && id != ev.IdentityDigest {
		return unknown(UnknownContradiction, "session "+s.ID+" carries another identity", nil)
	}
	if ev.IdentityDigest != "" && id == ev.IdentityDigest && ev.Generation != 0 &&
		s.Tags[TagGeneration] == strconv.FormatUint(ev.Generation, 10) {
		return Authoritative, &s, nil
	}
	return Orphan, &s, nil
}
