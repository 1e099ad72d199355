// Package sdnotify speaks the systemd service notification protocol
// (sd_notify(3)): a few newline-separated KEY=VALUE assignments in one unix
// datagram sent to $NOTIFY_SOCKET. It has no dependency beyond the standard
// library and does nothing when the daemon is not started by systemd with
// Type=notify, so `serve` can call it unconditionally.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Environment variables of the protocol.
const (
	// EnvSocket names the notification socket: a filesystem path, or an
	// abstract-namespace name when it starts with '@'.
	EnvSocket = "NOTIFY_SOCKET"
	// EnvWatchdogUsec is the watchdog interval in microseconds (WatchdogSec=).
	EnvWatchdogUsec = "WATCHDOG_USEC"
	// EnvWatchdogPID is the pid the watchdog interval is meant for.
	EnvWatchdogPID = "WATCHDOG_PID"
)

// Assignments understood by systemd that the daemon sends.
const (
	// Ready tells systemd that start-up is finished (after the API socket
	// listens and the census completed its first sync).
	Ready = "READY=1"
	// Stopping tells systemd that a graceful stop has begun.
	Stopping = "STOPPING=1"
	// Reloading tells systemd that a reload (SIGHUP: log reopen) has begun;
	// follow it with Ready.
	Reloading = "RELOADING=1"
	// Watchdog is the keep-alive ping for WatchdogSec=.
	Watchdog = "WATCHDOG=1"
)

// ErrInvalidState is returned for an assignment that would break the
// newline-separated datagram format (an embedded newline or NUL, or no '=').
var ErrInvalidState = errors.New("sdnotify: invalid state assignment")

// Notifier sends notifications to one socket. The zero value (and a nil
// *Notifier) is disabled: every send is a no-op that reports sent=false.
type Notifier struct {
	addr string
}

// FromEnv returns a Notifier for $NOTIFY_SOCKET; disabled when it is unset or
// empty. The variable is read once: call FromEnv before UnsetEnv.
func FromEnv() *Notifier {
	return New(os.Getenv(EnvSocket))
}

// New returns a Notifier for the socket address addr ("" → disabled).
func New(addr string) *Notifier {
	return &Notifier{addr: addr}
}

// Enabled reports whether notifications go anywhere.
func (n *Notifier) Enabled() bool {
	return n != nil && n.addr != ""
}

// Send writes the assignments as one datagram. It returns sent=false with a
// nil error when the Notifier is disabled. A datagram either arrives whole or
// not at all, so there is no partial send to retry.
func (n *Notifier) Send(states ...string) (sent bool, err error) {
	if !n.Enabled() || len(states) == 0 {
		return false, nil
	}
	for _, s := range states {
		if !strings.Contains(s, "=") || strings.ContainsAny(s, "\n\x00") {
			return false, fmt.Errorf("%w: %q", ErrInvalidState, s)
		}
	}
	// Go maps a leading '@' to the Linux abstract namespace (a leading NUL in
	// sun_path), which is exactly what systemd means by '@'.
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.addr, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("sdnotify: dial %s: %w", n.addr, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(strings.Join(states, "\n") + "\n")); err != nil {
		return false, fmt.Errorf("sdnotify: send to %s: %w", n.addr, err)
	}
	return true, nil
}

// Ready sends READY=1, optionally with a STATUS= line.
func (n *Notifier) Ready(status string) (bool, error) {
	return n.Send(withStatus(Ready, status)...)
}

// Stopping sends STOPPING=1, optionally with a STATUS= line.
func (n *Notifier) Stopping(status string) (bool, error) {
	return n.Send(withStatus(Stopping, status)...)
}

// Status sends a free-text STATUS= line, shown by `systemctl status`. Newlines
// in msg are replaced by spaces because the datagram is line-oriented.
func (n *Notifier) Status(msg string) (bool, error) {
	return n.Send(Status(msg))
}

// MainPID tells systemd which pid is the main process (MAINPID=).
func (n *Notifier) MainPID(pid int) (bool, error) {
	return n.Send("MAINPID=" + strconv.Itoa(pid))
}

// Ping sends WATCHDOG=1.
func (n *Notifier) Ping() (bool, error) {
	return n.Send(Watchdog)
}

// Status formats a STATUS= assignment, flattening line breaks and NULs.
func Status(msg string) string {
	return "STATUS=" + strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ", "\x00", " ").Replace(msg)
}

func withStatus(state, status string) []string {
	if status == "" {
		return []string{state}
	}
	return []string{state, Status(status)}
}

// WatchdogEnabled reports the watchdog interval systemd expects pings within
// (WatchdogSec=), when it is set for this process. Ping at half the interval.
func WatchdogEnabled() (time.Duration, bool) {
	return watchdog(os.Getenv, os.Getpid())
}

func watchdog(getenv func(string) string, pid int) (time.Duration, bool) {
	usec, err := strconv.ParseUint(getenv(EnvWatchdogUsec), 10, 63)
	if err != nil || usec == 0 {
		return 0, false
	}
	// WATCHDOG_PID absent means "whoever reads it"; present, it must be us:
	// a child that inherited the variables must not think it is watched.
	if p := getenv(EnvWatchdogPID); p != "" {
		if got, err := strconv.Atoi(p); err != nil || got != pid {
			return 0, false
		}
	}
	return time.Duration(usec) * time.Microsecond, true
}

// ServiceVars are the variables systemd sets for the service process itself.
// They are meaningless (or misleading) in processes the daemon starts — the
// tmux server and, through it, every agent pane — so UnsetEnv removes them.
var ServiceVars = []string{
	EnvSocket, EnvWatchdogUsec, EnvWatchdogPID,
	"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES",
}

// UnsetEnv removes ServiceVars from this process's environment, so the tmux
// server the daemon starts (which copies its environment into every pane) does
// not hand agents a notification socket they must not use. Call it after
// FromEnv and WatchdogEnabled.
func UnsetEnv() {
	for _, k := range ServiceVars {
		_ = os.Unsetenv(k)
	}
}
