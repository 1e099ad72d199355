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
	// FieldComponent is the key for the package or subsystem ("fence", "census", …).
	FieldComponent = "component"
	// FieldPath is the key for a file or socket path.
	FieldPath = "path"
	// FieldSequence is the key for a verdict sequence.
	FieldSequence = "sequence"
	// FieldVerdict is the key for a verdict word.
	FieldVerdict = "verdict"
	// FieldCode is the key for an error Code.
	FieldCode = "code"
	// FieldRecord is the key for a whole verdict record (raw JSON).
	FieldRecord = "record"
	// FieldStateDir is the key for an identity's state directory.
	FieldStateDir = "state_dir"
	// FieldSessionID is the key for an identity's session id.
	FieldSessionID = "session_id"
	// FieldIdentity is the key for an identity digest (64 hex).
	FieldIdentity = "identity"
	// FieldReservation is the key for a reservation id.
	FieldReservation = "reservation"
	// FieldPhase is the key for a reservation phase.
	FieldPhase = "phase"
	// FieldGeneration is the key for a published generation.
	FieldGeneration = "generation"
	// FieldSession is the key for a tmux session name.
	FieldSession = "session"
	// FieldTmuxID is the key for a tmux session id ("$3").
	FieldTmuxID = "tmux_id"
	// FieldPID is the key for a process id.
	FieldPID = "pid"
	// FieldServerPID is the key for the tmux server's pid.
	FieldServerPID = "server_pid"
	// FieldSocket is the key for a unix socket path.
	FieldSocket = "socket"
	// FieldCommand is the key for a tmux command (already quoted).
	FieldCommand = "command"
	// FieldDuration is the key for elapsed time.
	FieldDuration = "duration"
	// FieldAttempt is the key for a retry attempt number.
	FieldAttempt = "attempt"
	// FieldMethod is the key for an HTTP method.
	FieldMethod = "method"
	// FieldURL is the key for an HTTP request path.
	FieldURL = "url"
	// FieldStatus is the key for an HTTP status.
	FieldStatus = "status"
	// FieldPeerUID is the key for the peer's uid (SO_PEERCRED).
	FieldPeerUID = "peer_uid"
	// FieldPeerPID is the key for the peer's pid (SO_PEERCRED).
	FieldPeerPID = "peer_pid"
	// FieldVersion is the key for a version string (tmux, ours).
	FieldVersion = "version"
	// FieldReason is the key for a verdict reason or a free-text why.
	FieldReason = "reason"
	// FieldExitKind is the key for a verdict exit kind.
	FieldExitKind = "exit_kind"
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
