package verdict

import (
	"io"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// Operational log field names. Every package logs with these keys, so that a
// field means the same thing on every line (and grep works across packages).
const (
	FieldComponent   = "component"   // package or subsystem: "fence", "census", …
	FieldPath        = "path"        // a file or socket path
	FieldSequence    = "sequence"    // a verdict sequence
	FieldVerdict     = "verdict"     // a verdict word
	FieldCode        = "code"        // an error Code
	FieldRecord      = "record"      // a whole verdict record (raw JSON)
	FieldStateDir    = "state_dir"   // identity: state directory
	FieldSessionID   = "session_id"  // identity: session id
	FieldIdentity    = "identity"    // identity digest (64 hex)
	FieldReservation = "reservation" // reservation id
	FieldPhase       = "phase"       // reservation phase
	FieldGeneration  = "generation"  // published generation
	FieldSession     = "session"     // tmux session name
	FieldTmuxID      = "tmux_id"     // tmux session id ("$3")
	FieldPID         = "pid"         // a process id
	FieldServerPID   = "server_pid"  // the tmux server's pid
	FieldSocket      = "socket"      // a unix socket path
	FieldCommand     = "command"     // a tmux command (already quoted)
	FieldDuration    = "duration"    // elapsed time
	FieldAttempt     = "attempt"     // retry attempt number
	FieldMethod      = "method"      // HTTP method
	FieldURL         = "url"         // HTTP path
	FieldStatus      = "status"      // HTTP status
	FieldPeerUID     = "peer_uid"    // peer credentials: uid
	FieldPeerPID     = "peer_pid"    // peer credentials: pid
	FieldVersion     = "version"     // a version string (tmux, ours)
	FieldReason      = "reason"      // a verdict reason or a free-text why
	FieldExitKind    = "exit_kind"   // a verdict exit kind
)

// NewOpsLogger returns the operational logger (not verdicts): JSON lines on w
// by default, human-readable console output when w is a terminal. level is a
// zerolog level name ("debug", "info", …); "" or an unknown name means info.
func NewOpsLogger(w io.Writer, level string) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(strings.ToLower(strings.TrimSpace(level)))
	if err != nil || lvl == zerolog.NoLevel {
		lvl = zerolog.InfoLevel
	}
	out := w
	if IsTerminal(w) {
		out = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339Nano}
	}
	return zerolog.New(out).Level(lvl).With().Timestamp().Logger()
}

// IsTerminal reports whether w is an *os.File open on a terminal. It asks the
// kernel for the terminal attributes (TCGETS), which only a tty answers.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || f == nil {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
