package tmuxctl

import (
	"errors"
	"strings"
)

var (
	// ErrServerExited means the control client ended (%exit or EOF) while a
	// command was pending: the command was sent and its outcome is unknown.
	ErrServerExited = errors.New("tmuxctl: tmux server exited or control client ended")
	// ErrNotConnected means the command was never sent: there is no live
	// connection (the Client is reconnecting, or the Conn has ended).
	ErrNotConnected = errors.New("tmuxctl: not connected to tmux")
	// ErrLifeChanged means the connection now reaches another server life than
	// the one the caller decided in; the command was not sent.
	ErrLifeChanged = errors.New("tmuxctl: tmux server life changed")
	// ErrUnencodable means an argument cannot be carried to tmux byte for byte
	// (it contains NUL, or a command name is not a plain word).
	ErrUnencodable = errors.New("tmuxctl: argument cannot be encoded for tmux")
	// ErrClosed is returned by commands on a Conn or Client after Close.
	ErrClosed = errors.New("tmuxctl: connection closed")
)

// CommandError is an %error reply: tmux ran (or refused to parse) the
// command and answered with an error block.
type CommandError struct {
	Command string   // the encoded command line as sent
	Lines   []string // the error block's body lines
}

// Error implements error.
func (e *CommandError) Error() string {
	return "tmux: " + e.Command + ": " + strings.Join(e.Lines, "; ")
}

// Code is the stable snake_case code of a command error.
func (e *CommandError) Code() string { return "tmux_command_error" }

// ProtocolError is a line or reply that does not follow the control-mode
// grammar tmuxctl expects (a malformed notification, an unsolicited reply, an
// identity reply that does not parse).
type ProtocolError struct {
	Line   string
	Reason string
}

// Error implements error.
func (e *ProtocolError) Error() string {
	return "tmuxctl: protocol error: " + e.Reason + ": " + quoteForLog(e.Line)
}

// Code is the stable snake_case code of a protocol error.
func (e *ProtocolError) Code() string { return "tmux_protocol_error" }

// ExitError is why a control connection ended: the %exit reason (empty for a
// bare %exit) or EOF. It matches ErrServerExited with errors.Is.
type ExitError struct {
	Reason string // %exit text, "" when bare
	EOF    bool   // true when stdout ended without %exit
}

// Error implements error.
func (e *ExitError) Error() string {
	switch {
	case e.EOF:
		return "tmuxctl: control client output ended (EOF) without %exit"
	case e.Reason == "":
		return "tmuxctl: control client exited (%exit)"
	default:
		return "tmuxctl: control client exited: " + e.Reason
	}
}

// Is makes errors.Is(err, ErrServerExited) true.
func (e *ExitError) Is(target error) bool { return target == ErrServerExited }

func quoteForLog(s string) string {
	const max = 200
	if len(s) > max {
		s = s[:max] + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
