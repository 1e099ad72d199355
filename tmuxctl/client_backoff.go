package tmuxctl

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// healthyAfter is how long a connection must stay up to count as healthy
// when nothing was sent through it (normally the census lists at once, and
// the first reply already makes it healthy).
const healthyAfter = time.Second

// backoff is the Client's reconnect policy. Losing a healthy connection
// (the control client detached, its session or its process killed) is
// retried at once: the server is very likely still there, and every moment
// unconnected is a moment the census is unsynced and creates are refused.
// Only failures — a dial that fails (no server answers) or a connection
// that ends before it served — wait, min doubling up to max, with ±20%
// jitter so that several daemons do not retry in step. The first failure
// after a healthy connection waits min again.
type backoff struct {
	min, max time.Duration
	next     time.Duration // the base of the next failure's wait; 0 → min
}

// failed returns how long to wait after a failure and grows the next wait.
func (b *backoff) failed() time.Duration {
	if b.next < b.min {
		b.next = b.min
	}
	d := jitter(b.next)
	b.next = min(2*b.next, b.max)
	return d
}

// reset forgets the failures: a connection served.
func (b *backoff) reset() { b.next = 0 }

// jitter spreads d over [0.8d, 1.2d).
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// awaitServerExit waits, when conn ended because its server exited, until
// that server process is gone (bounded by CommandTimeout). An immediate
// retry could otherwise meet the dying server's socket: still accepting,
// so StartServer is skipped, then refusing, so the control client starts
// the next server itself — outside the scope StartServer would have put it
// in. A server that is gone closed its socket, so the probe is then right.
func (c *Client) awaitServerExit(ctx context.Context, conn *Conn) {
	var xe *ExitError
	if !errors.As(conn.Err(), &xe) || !strings.HasPrefix(xe.Reason, "server exited") {
		return
	}
	pid := conn.Info().PID
	deadline := time.Now().Add(c.cfg.CommandTimeout)
	for !pidGone(pid) && ctx.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

// pidGone reports whether pid names no live process; a zombie is gone (its
// files, the server's socket among them, are closed).
func pidGone(pid int) bool {
	if pid <= 0 {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	}
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] == 'Z' || b[i+2] == 'X'
	}
	return false
}
