package api

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/skc-supervisor/skc-supervisor/internal/canon"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// docs/contract.md input limits. This file is the only place they are enforced;
// lifecycle trusts what passes here.
const (
	MaxSessionID  = 128
	MaxPath       = 1024
	MaxArgv       = 256
	MaxArg        = 16 << 10
	MaxArgvTotal  = 64 << 10
	MaxEnv        = 256
	MaxEnvValue   = 16 << 10
	MaxLabel      = 256
	MaxBody       = 1 << 20
	DefaultWait   = 5 * time.Second
	MaxWait       = 10 * time.Minute
	stateFileExt  = ".jsonl"
	fieldArgv     = "argv"
	fieldEnv      = "env"
	fieldWait     = "wait_ms"
	fieldStateDir = "state_dir"
)

// Validate checks req against docs/contract.md's input limits and returns the
// canonical spec: paths canonicalised (see Canonical), state_file
// defaulted to <state_dir>/<session_id>.jsonl, env sorted, wait defaulted
// to 5s. Every violation is invalid_request with
// details.field naming the field.
func Validate(req CreateRequest) (CreateSpec, error) {
	var s CreateSpec
	var err error
	if s.SessionID, err = validSessionID(req.SessionID); err != nil {
		return CreateSpec{}, err
	}
	if s.StateDir, err = validPath(fieldStateDir, req.StateDir, true); err != nil {
		return CreateSpec{}, err
	}
	if req.StateFile == "" {
		req.StateFile = filepath.Join(s.StateDir, s.SessionID+stateFileExt)
	}
	if s.StateFile, err = validPath("state_file", req.StateFile, true); err != nil {
		return CreateSpec{}, err
	}
	if s.Cwd, err = validPath("cwd", req.Cwd, false); err != nil {
		return CreateSpec{}, err
	}
	if s.Argv, err = validArgv(req.Argv); err != nil {
		return CreateSpec{}, err
	}
	if s.Env, err = validEnv(req.Env); err != nil {
		return CreateSpec{}, err
	}
	if s.Label, err = validLabel(req.Label); err != nil {
		return CreateSpec{}, err
	}
	if s.Wait, err = validWait(req.WaitMS); err != nil {
		return CreateSpec{}, err
	}
	if s.StopTimeout, err = validStopTimeout(req.StopTimeoutMS); err != nil {
		return CreateSpec{}, err
	}
	if s.Restart, err = validRestart(req); err != nil {
		return CreateSpec{}, err
	}
	return s, nil
}

// ValidateRef checks a session reference: a name (as tmux shows it), or an
// identity whose state_dir is canonicalised like a create's.
func ValidateRef(ref Ref) (Ref, error) {
	if ref.Name != "" {
		if ref.StateDir != "" || ref.SessionID != "" {
			return Ref{}, invalid("name", "give a session name or an identity (state_dir and session_id), not both")
		}
		if len(ref.Name) > MaxPath || !utf8.ValidString(ref.Name) || strings.ContainsAny(ref.Name, "\x00\r\n") {
			return Ref{}, invalid("name", "a session name is at most 1024 bytes of UTF-8 without NUL, CR or LF")
		}
		return ref, nil
	}
	id, err := validSessionID(ref.SessionID)
	if err != nil {
		return Ref{}, err
	}
	dir, err := validPath(fieldStateDir, ref.StateDir, true)
	if err != nil {
		return Ref{}, err
	}
	return Ref{StateDir: dir, SessionID: id}, nil
}

func invalid(field, format string, args ...any) error {
	return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": field}, "%s: "+format,
		append([]any{field}, args...)...)
}

func invalidAt(field string, index int, format string, args ...any) error {
	e := verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": field, "index": index},
		"%s[%d]: "+format, append([]any{field, index}, args...)...)
	return e
}

func validSessionID(id string) (string, error) {
	const field = "session_id"
	if id == "" || len(id) > MaxSessionID {
		return "", invalid(field, "must be 1-%d bytes, got %d", MaxSessionID, len(id))
	}
	if id[0] == '.' || id[0] == '-' {
		return "", invalid(field, "must not start with '.' or '-'")
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return "", invalid(field, "byte %d (%s) is outside A-Z a-z 0-9 . _ -", i, byteName(id, i))
		}
	}
	return id, nil
}

// validPath checks an absolute path and canonicalises it. An empty optional
// path stays empty.
func validPath(field, p string, required bool) (string, error) {
	if p == "" {
		if required {
			return "", invalid(field, "is required")
		}
		return "", nil
	}
	if err := checkPathBytes(field, p); err != nil {
		return "", err
	}
	if !filepath.IsAbs(p) {
		return "", invalid(field, "must be an absolute path, got %q", p)
	}
	c, err := Canonical(p)
	if err != nil {
		return "", invalid(field, "%v", err)
	}
	if c != p {
		if err := checkPathBytes(field, c); err != nil {
			return "", err
		}
	}
	return c, nil
}

func checkPathBytes(field, p string) error {
	switch {
	case len(p) > MaxPath:
		return invalid(field, "is %d bytes; at most %d", len(p), MaxPath)
	case strings.ContainsAny(p, "\x00\r\n"):
		return invalid(field, "must not contain NUL, CR or LF")
	case !utf8.ValidString(p):
		return invalid(field, "must be valid UTF-8 (it travels in JSON)")
	}
	return nil
}

// Canonical resolves an absolute path by the fence's own rule
// (internal/canon), so the two layers agree: cleaned lexically first (rather
// than realpath's physical ".."), so the result is the same before and after
// the directory is created and an identity keeps one state_dir; then the
// longest prefix that exists has its symlinks resolved and the rest is
// appended. A path that is or passes through a symlink that does not resolve
// is an error: once it resolves it would name another directory.
func Canonical(p string) (string, error) {
	return canon.Path(p)
}

func validArgv(argv []string) ([]string, error) {
	if len(argv) == 0 || len(argv) > MaxArgv {
		return nil, invalid(fieldArgv, "must have 1-%d elements, got %d", MaxArgv, len(argv))
	}
	if argv[0] == "" {
		return nil, invalidAt(fieldArgv, 0, "the command must not be empty")
	}
	total := 0
	for i, a := range argv {
		total += len(a)
		switch {
		case len(a) > MaxArg:
			return nil, invalidAt(fieldArgv, i, "is %d bytes; at most %d", len(a), MaxArg)
		case strings.IndexByte(a, 0) >= 0:
			return nil, invalidAt(fieldArgv, i, "must not contain NUL")
		case !utf8.ValidString(a):
			return nil, invalidAt(fieldArgv, i, "must be valid UTF-8 (it travels in JSON)")
		}
	}
	if total > MaxArgvTotal {
		return nil, invalid(fieldArgv, "is %d bytes together; at most %d", total, MaxArgvTotal)
	}
	return append([]string(nil), argv...), nil
}

func validEnv(env map[string]string) ([]string, error) {
	if len(env) > MaxEnv {
		return nil, invalid(fieldEnv, "has %d entries; at most %d", len(env), MaxEnv)
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		if !validEnvName(k) {
			return nil, verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": fieldEnv, "name": k},
				"env: name %q is not [A-Za-z_][A-Za-z0-9_]*", k)
		}
		if len(v) > MaxEnvValue || strings.IndexByte(v, 0) >= 0 || !utf8.ValidString(v) {
			return nil, verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": fieldEnv, "name": k},
				"env: value of %s must be at most %d bytes of UTF-8 without NUL", k, MaxEnvValue)
		}
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}

func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

func validLabel(l string) (string, error) {
	const field = "label"
	if len(l) > MaxLabel {
		return "", invalid(field, "is %d bytes; at most %d", len(l), MaxLabel)
	}
	if !utf8.ValidString(l) {
		return "", invalid(field, "must be valid UTF-8")
	}
	for _, r := range l {
		if unicode.IsControl(r) {
			return "", invalid(field, "must not contain control characters (found %U)", r)
		}
	}
	return l, nil
}

// Stop timeout bounds (contract "Stopping"): the default and the most a
// generation may be given between its hangup or SIGTERM and SIGKILL.
const (
	DefaultStopTimeout = 10 * time.Second
	MaxStopTimeout     = 5 * time.Minute
	fieldStopTimeout   = "stop_timeout_ms"
)

func validStopTimeout(ms *int64) (time.Duration, error) {
	if ms == nil {
		return DefaultStopTimeout, nil
	}
	if *ms < 1 || *ms > MaxStopTimeout.Milliseconds() {
		// 0 is refused rather than read as "the default" or "no grace": 1
		// is as good as SIGKILL at once, and says so.
		return 0, invalid(fieldStopTimeout, "must be 1-%d milliseconds, got %d", MaxStopTimeout.Milliseconds(), *ms)
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

func validWait(ms *int64) (time.Duration, error) {
	if ms == nil {
		return DefaultWait, nil
	}
	if *ms < 0 || *ms > MaxWait.Milliseconds() {
		return 0, invalid(fieldWait, "must be 0-%d milliseconds, got %d", MaxWait.Milliseconds(), *ms)
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

// byteName names the byte s[i] for a refusal: the character it is when ASCII,
// else its value and the character it starts or belongs to (never the byte
// read as Latin-1, which names a character the caller did not send).
func byteName(s string, i int) string {
	c := s[i]
	if c < utf8.RuneSelf {
		return fmt.Sprintf("%q", rune(c))
	}
	if r, n := utf8.DecodeRuneInString(s[i:]); r != utf8.RuneError || n > 1 {
		return fmt.Sprintf("0x%02x, the start of %q", c, r)
	}
	return fmt.Sprintf("0x%02x", c)
}
