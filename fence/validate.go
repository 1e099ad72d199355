package fence

import (
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/skc-supervisor/skc-supervisor/internal/canon"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Input limits of docs/contract.md. The api package validates requests; the fence
// checks again (defence in depth) so no caller can write a row the contract
// forbids.
const (
	maxPathLen    = 1024
	maxSessionID  = 128
	maxArgv       = 256
	maxArg        = 16 << 10
	maxArgvTotal  = 64 << 10
	maxEnv        = 256
	maxEnvValue   = 16 << 10
	maxLabel      = 256
	maxTokenLen   = 256 // attempt names, tmux ids, incarnations, signal names
	reservationID = 32  // hex characters
)

// Invalid is the invalid_request refusal of field, with a diagnostic.
func Invalid(field, format string, args ...any) *verdict.Error {
	return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": field}, format, args...)
}

// CheckPath applies the path rules: non-empty, absolute, at most 1024 bytes,
// no NUL, CR or LF.
func CheckPath(field, p string) error {
	switch {
	case p == "":
		return Invalid(field, "%s is empty", field)
	case len(p) > maxPathLen:
		return Invalid(field, "%s is %d bytes, over the limit of %d", field, len(p), maxPathLen)
	case strings.ContainsAny(p, "\x00\r\n"):
		return Invalid(field, "%s contains NUL, CR or LF", field)
	case !filepath.IsAbs(p):
		return Invalid(field, "%s %q is not absolute", field, p)
	}
	return nil
}

// canonicalPath returns the key of p (internal/canon: its realpath where it
// exists, else its longest existing ancestor's with the rest appended, so a
// state file under a symlinked alias of its directory canonicalises like the
// same file under the real directory). A path that is or passes through a
// symlink that does not resolve is refused.
func canonicalPath(field, p string) (string, error) {
	if err := CheckPath(field, p); err != nil {
		return "", err
	}
	out, err := canon.Path(p)
	if err != nil {
		return "", Invalid(field, "%s: %v", field, err)
	}
	if err := CheckPath(field, out); err != nil {
		return "", err
	}
	return out, nil
}

// CanonicalIdentity validates id and returns its canonical form (realpath of
// state_dir where it exists). Every fence method canonicalises on its own;
// callers use this to compute the same Digest the fence keys on.
func CanonicalIdentity(id Identity) (Identity, error) {
	if err := checkSessionID(id.SessionID); err != nil {
		return Identity{}, err
	}
	dir, err := canonicalPath("state_dir", id.StateDir)
	if err != nil {
		return Identity{}, err
	}
	return Identity{StateDir: dir, SessionID: id.SessionID}, nil
}

func checkSessionID(s string) error {
	if s == "" || len(s) > maxSessionID {
		return Invalid("session_id", "session_id must be 1-%d bytes, got %d", maxSessionID, len(s))
	}
	if s[0] == '.' || s[0] == '-' {
		return Invalid("session_id", "session_id must not start with %q", s[0])
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return Invalid("session_id", "session_id contains byte 0x%02x outside [A-Za-z0-9._-]", c)
		}
	}
	return nil
}

// CanonicalSpec validates spec against the contract's limits and
// canonicalises its paths (state_file, cwd), copying its slices.
func CanonicalSpec(spec Spec) (Spec, error) {
	out := spec
	var err error
	if out.StateFile, err = canonicalPath("state_file", spec.StateFile); err != nil {
		return Spec{}, err
	}
	if spec.Cwd != "" {
		if out.Cwd, err = canonicalPath("cwd", spec.Cwd); err != nil {
			return Spec{}, err
		}
	}
	if err := checkArgv(spec.Argv); err != nil {
		return Spec{}, err
	}
	if err := checkEnv(spec.Env); err != nil {
		return Spec{}, err
	}
	if err := checkLabel(spec.Label); err != nil {
		return Spec{}, err
	}
	if spec.StopTimeoutMS < 0 || time.Duration(spec.StopTimeoutMS)*time.Millisecond > MaxStopTimeout {
		return Spec{}, Invalid("stop_timeout_ms", "stop_timeout_ms must be 0-%d, got %d",
			MaxStopTimeout.Milliseconds(), spec.StopTimeoutMS)
	}
	if err := checkRestart(spec); err != nil {
		return Spec{}, err
	}
	if spec.ResumeArgv != nil {
		out.ResumeArgv = append([]string(nil), spec.ResumeArgv...)
	}
	out.Argv = append([]string(nil), spec.Argv...)
	out.Env = append([]string(nil), spec.Env...)
	return out, nil
}

func checkArgv(argv []string) error {
	if len(argv) == 0 || len(argv) > maxArgv {
		return Invalid("argv", "argv must have 1-%d elements, got %d", maxArgv, len(argv))
	}
	total := 0
	for i, a := range argv {
		if len(a) > maxArg {
			return Invalid("argv", "argv[%d] is %d bytes, over the limit of %d", i, len(a), maxArg)
		}
		if strings.IndexByte(a, 0) >= 0 {
			return Invalid("argv", "argv[%d] contains NUL", i)
		}
		total += len(a)
	}
	if total > maxArgvTotal {
		return Invalid("argv", "argv is %d bytes in total, over the limit of %d", total, maxArgvTotal)
	}
	return nil
}

func checkEnv(env []string) error {
	if len(env) > maxEnv {
		return Invalid("env", "env has %d entries, over the limit of %d", len(env), maxEnv)
	}
	for i, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !envName(name) {
			return Invalid("env", "env[%d] is not NAME=VALUE with NAME in [A-Za-z_][A-Za-z0-9_]*", i)
		}
		if len(value) > maxEnvValue || strings.IndexByte(value, 0) >= 0 {
			return Invalid("env", "env[%d] value is over %d bytes or contains NUL", i, maxEnvValue)
		}
	}
	return nil
}

func envName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alpha := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
		if !alpha && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

func checkLabel(s string) error {
	if len(s) > maxLabel || !utf8.ValidString(s) {
		return Invalid("label", "label must be at most %d bytes of UTF-8", maxLabel)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return Invalid("label", "label contains a control character")
		}
	}
	return nil
}

// CheckToken accepts a short printable value without spaces or control bytes:
// attempt names, tmux ids, incarnations and signal names are all of that kind.
func CheckToken(field, s string, required bool) error {
	if s == "" {
		if required {
			return Invalid(field, "%s is empty", field)
		}
		return nil
	}
	if len(s) > maxTokenLen {
		return Invalid(field, "%s is %d bytes, over the limit of %d", field, len(s), maxTokenLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return Invalid(field, "%s contains a space or control byte", field)
		}
	}
	return nil
}

// CheckReservationID accepts the 32 lowercase hex characters of a reservation id.
func CheckReservationID(id string) error {
	if len(id) != reservationID {
		return Invalid("reservation_id", "reservation id must be %d hex characters", reservationID)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return Invalid("reservation_id", "reservation id must be lowercase hex")
		}
	}
	return nil
}

// CheckPatch validates the evidence of an Advance to phase to for reservation resID.
func CheckPatch(resID string, to Phase, p Patch) error {
	if err := CheckToken("attempt_name", p.AttemptName, to == PhaseHelperInvoked); err != nil {
		return err
	}
	if p.AttemptName != "" && !p.Kept && !strings.Contains(p.AttemptName, resID) {
		// The name must be unique per reservation so no later attempt can wear
		// an orphan's name (DESIGN §6).
		return Invalid("attempt_name", "attempt name %q does not contain the reservation id", p.AttemptName)
	}
	if err := CheckToken("tmux_id", p.TmuxID, to == PhaseSpawned); err != nil {
		return err
	}
	if p.TmuxID != "" && (p.TmuxID[0] != '$' || len(p.TmuxID) < 2 || strings.Trim(p.TmuxID[1:], "0123456789") != "") {
		return Invalid("tmux_id", "tmux session id %q is not $N", p.TmuxID)
	}
	if p.PanePID < 0 || p.ServerPID < 0 || p.ServerStart < 0 {
		return Invalid("patch", "negative pid or start time")
	}
	return nil
}

// checkRestart checks the restart policy fields (api fills in defaults).
func checkRestart(spec Spec) error {
	switch spec.Restart {
	case "", RestartNever, RestartOnFailure, RestartAlways:
	default:
		return Invalid("restart", "restart must be never, on-failure or always, got %q", spec.Restart)
	}
	if spec.ResumeArgv != nil {
		if err := checkArgv(spec.ResumeArgv); err != nil {
			return Invalid("resume_argv", "%v", err)
		}
	}
	if spec.RestartDelayMS < 0 || spec.RestartBurst < 0 || spec.RestartIntervalS < 0 {
		return Invalid("restart", "restart_delay_ms, restart_burst and restart_interval_s must not be negative")
	}
	return nil
}

// CanonicalRequest validates and canonicalises a create's identity and spec.
func CanonicalRequest(id Identity, spec Spec) (Identity, Spec, error) {
	id, err := CanonicalIdentity(id)
	if err != nil {
		return Identity{}, Spec{}, err
	}
	spec, err = CanonicalSpec(spec)
	return id, spec, err
}

// CheckPostmortem validates pm and canonicalises its identity when set.
func CheckPostmortem(pm *Postmortem) error {
	if err := CheckReservationID(pm.ReservationID); err != nil {
		return err
	}
	if pm.Identity != (Identity{}) {
		id, err := CanonicalIdentity(pm.Identity)
		if err != nil {
			return err
		}
		pm.Identity = id
	}
	if pm.HelperPID < 0 {
		return Invalid("postmortem", "negative pid")
	}
	if err := CheckToken("helper_incarnation", pm.HelperIncarnation, false); err != nil {
		return err
	}
	return CheckToken("signal", pm.Signal, false)
}

// CheckHelperStart validates what a pane helper records at its start
// (Fence.RecordHelperStart): a reservation id the fence hands out, a positive
// pid and a non-empty incarnation token.
func CheckHelperStart(resID string, pid int, incarnation string) error {
	if err := CheckReservationID(resID); err != nil {
		return err
	}
	if pid <= 0 {
		return Invalid("helper_pid", "helper pid %d is not positive", pid)
	}
	return CheckToken("helper_incarnation", incarnation, true)
}

// CheckStoredIdentity refuses an identity the fence cannot have stored (an
// empty part) where one is used as stored (Published.Identity), not
// canonicalised again so that it matches the rows written under it
// (CachedIdentityReads): invalid_request.
func CheckStoredIdentity(id Identity) error {
	if id.StateDir == "" || id.SessionID == "" {
		return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "identity"},
			"fence: identity reads need a stored identity")
	}
	return nil
}
