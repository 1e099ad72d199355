package tmuxctl

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// EventKind is the kind of a Client event.
type EventKind int

// Client event kinds.
const (
	Connected    EventKind = iota + 1 // a connection is up; Info is its server
	Disconnected                      // the connection ended; Err says why
	Notify                            // a notification; Note
)

// String names the kind.
func (k EventKind) String() string {
	switch k {
	case Connected:
		return "connected"
	case Disconnected:
		return "disconnected"
	case Notify:
		return "notify"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one element of the Client's ordered event stream: Connected,
// then the connection's notifications in wire order, then Disconnected;
// and again for every reconnect.
type Event struct {
	Kind EventKind
	Info ServerInfo // Connected, Disconnected: the server of that connection
	Note Notification
	Err  error // Disconnected: why (an *ExitError, ErrClosed)
}

// Client keeps one control connection alive, reconnecting with backoff when
// the server or the client goes away (a new server life is started by the
// reconnect's new-session -A when the old server is gone).
type Client struct {
	cfg    Config
	cfgErr error
	log    zerolog.Logger
	events *queue[Event]

	mu      sync.Mutex
	conn    *Conn
	served  *atomic.Bool // set when a command on conn got a reply (see healthy)
	info    ServerInfo
	up      chan struct{} // closed while connected
	running bool
	stopped bool

	reconnects atomic.Int64
	sockFile   atomic.Pointer[sockFile] // the socket file last known to lead to the server (revive.go)

	// retried, when set (tests), is told every reconnect delay the policy
	// chose, before waiting it.
	retried func(d time.Duration, afterHealthy bool)
	// healthyAfter is the const healthyAfter; tests lengthen it.
	healthyAfter time.Duration
}

// NewClient returns a Client for cfg; Run connects it.
func NewClient(cfg Config) *Client {
	full, err := cfg.withDefaults()
	return &Client{cfg: full, cfgErr: err, events: newIdleQueue[Event](eventTail), up: make(chan struct{}),
		healthyAfter: healthyAfter,
		log:          full.Log.With().Str("component", "tmuxctl.client").Str("socket", full.Socket).Logger()}
}

// eventTail is how many undelivered events the stream still holds for a
// late reader once Run has returned (the channel's buffer).
const eventTail = 256

// Events is the ordered event stream, for one consumer. It is fed from an
// unbounded queue (the connection never waits for the consumer). When Run
// returns, the stream is closed without waiting for a reader: the events
// not yet received stay readable from the channel's buffer, up to 256 of
// them; beyond that the newest are dropped (logged). So nobody has to drain
// it after Run, and a consumer that keeps up still sees the last
// Disconnected before the close.
func (c *Client) Events() <-chan Event { return c.events.out }

// Reconnects counts successful connections after the first.
func (c *Client) Reconnects() int64 { return c.reconnects.Load() }

// Info returns the current server's identity and whether a connection is up.
func (c *Client) Info() (ServerInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info, c.conn != nil
}

// WaitConnected waits until a connection is up and returns its server.
func (c *Client) WaitConnected(ctx context.Context) (ServerInfo, error) {
	for {
		c.mu.Lock()
		conn, info, up, stopped := c.conn, c.info, c.up, c.stopped
		c.mu.Unlock()
		if conn != nil {
			return info, nil
		}
		if stopped {
			return ServerInfo{}, ErrClosed
		}
		select {
		case <-up:
		case <-ctx.Done():
			return ServerInfo{}, fmt.Errorf("tmuxctl: waiting for connection: %w", ctx.Err())
		}
	}
}

// Command sends a command on the current connection; ErrNotConnected (not
// sent) when there is none. See Conn.Command for the other errors.
func (c *Client) Command(ctx context.Context, args ...string) (Reply, error) {
	c.mu.Lock()
	conn, served := c.conn, c.served
	c.mu.Unlock()
	if conn == nil {
		return Reply{}, ErrNotConnected
	}
	return answered(served)(conn.Command(ctx, args...))
}

// CommandIn sends a command only if the current connection reaches server
// life `life`; otherwise it returns ErrLifeChanged without sending. A
// destructive command decided in one life (kill `$5`) must never reach a
// fresh session that got `$5` in the next life.
func (c *Client) CommandIn(ctx context.Context, life ServerLife, args ...string) (Reply, error) {
	c.mu.Lock()
	conn, info, served := c.conn, c.info, c.served
	c.mu.Unlock()
	if conn == nil {
		return Reply{}, ErrNotConnected
	}
	if info.ServerLife != life {
		return Reply{}, fmt.Errorf("%w: decided in pid %d start %d, now pid %d start %d",
			ErrLifeChanged, life.PID, life.StartTime, info.PID, info.StartTime)
	}
	return answered(served)(conn.Command(ctx, args...))
}

// answered marks the connection as having served when the server replied
// (an %error block is a reply too), and passes the result through.
func answered(served *atomic.Bool) func(Reply, error) (Reply, error) {
	return func(r Reply, err error) (Reply, error) {
		var ce *CommandError
		if err == nil || errors.As(err, &ce) {
			served.Store(true)
		}
		return r, err
	}
}

// Run connects and reconnects until ctx is done, then closes the connection
// cleanly (stdin EOF, %exit) and returns nil. The event stream is closed
// before Run returns, with no goroutine left behind (see Events).
func (c *Client) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running || c.stopped {
		c.mu.Unlock()
		return errors.New("tmuxctl: Client.Run called twice")
	}
	c.running = true
	c.mu.Unlock()
	if c.cfgErr != nil {
		// Still end the event stream, so a consumer ranging over it returns.
		c.mu.Lock()
		c.stopped = true
		close(c.up)
		c.mu.Unlock()
		c.events.shut()
		return c.cfgErr
	}
	c.events.start()
	defer func() {
		c.mu.Lock()
		c.stopped = true
		close(c.up)
		c.mu.Unlock()
		if n := c.events.shut(); n > 0 {
			c.log.Warn().Int("dropped", n).Msg("events nobody read when the client stopped were dropped")
		}
	}()
	b := backoff{min: c.cfg.ReconnectMin, max: c.cfg.ReconnectMax}
	first := true
	for ctx.Err() == nil {
		if c.socketHeld(ctx) {
			c.wait(ctx, b.failed(), false)
			continue
		}
		c.startServer(ctx)
		conn, err := Dial(ctx, c.cfg)
		if err != nil {
			d := b.failed()
			c.log.Warn().Err(err).Dur("retry_in", d).Msg("tmux connect failed")
			c.wait(ctx, d, false)
			continue
		}
		if !first {
			c.reconnects.Add(1)
		}
		first = false
		if c.serve(ctx, conn) {
			b.reset()
			c.awaitServerExit(ctx, conn)
			c.wait(ctx, 0, true) // a healthy connection was lost: retry at once
			continue
		}
		if ctx.Err() == nil {
			// Up but never served: as bad as a failed dial (a hook or a
			// human killing every new control client must not spin us).
			c.wait(ctx, b.failed(), false)
		}
	}
	return nil
}

// startServer calls Config.StartServer when it is set and no server
// answers on the socket.
func (c *Client) startServer(ctx context.Context) {
	if c.cfg.StartServer == nil {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, c.cfg.CommandTimeout)
	defer cancel()
	if !serverAbsent(sctx, c.cfg.Socket) {
		return
	}
	if err := c.cfg.StartServer(sctx); err != nil {
		c.log.Warn().Err(err).Msg("starting the tmux server failed; the control client will start it")
		return
	}
	c.log.Info().Msg("tmux server started")
}

// serve publishes conn, forwards its notifications until it ends or ctx is
// done, then unpublishes and closes it. It reports whether the connection
// was healthy: it answered a command sent through the Client (the census
// lists at every Connected) or stayed up for c.healthyAfter.
func (c *Client) serve(ctx context.Context, conn *Conn) (healthy bool) {
	c.raiseServerFiles(ctx, conn) // before anyone can spawn a pane on this connection
	c.noteSocket(conn.Info().PID) // the file the dial went through
	info := conn.Info()
	served := new(atomic.Bool)
	began := time.Now()
	c.mu.Lock()
	c.conn, c.info, c.served = conn, info, served
	close(c.up)
	c.mu.Unlock()
	c.log.Info().Int("server_pid", info.PID).Int64("start_time", info.StartTime).
		Str("version", info.Version).Msg("tmux connected")
	c.events.push(Event{Kind: Connected, Info: info})
	notes := conn.Notifications()
	look := time.NewTicker(socketLook)
	defer look.Stop()
forward:
	for {
		select {
		case n, ok := <-notes:
			if !ok {
				break forward
			}
			c.events.push(Event{Kind: Notify, Note: n})
		case <-look.C:
			if c.socketChanged() && !c.reviveSocket(ctx, info.PID) {
				c.noteSocket(info.PID) // another file, leading to the server all the same
			}
		case <-ctx.Done():
			break forward
		}
	}
	c.mu.Lock()
	c.conn, c.served = nil, nil
	c.up = make(chan struct{})
	c.mu.Unlock()
	_ = conn.Close()
	err := conn.Err()
	healthy = served.Load() || time.Since(began) >= c.healthyAfter
	c.log.Info().AnErr("reason", err).Bool("healthy", healthy).Msg("tmux disconnected")
	c.events.push(Event{Kind: Disconnected, Info: info, Err: err})
	return healthy
}

// wait reports d to the test hook and waits d or until ctx is done.
func (c *Client) wait(ctx context.Context, d time.Duration, afterHealthy bool) {
	if c.retried != nil {
		c.retried(d, afterHealthy)
	}
	if d <= 0 || ctx.Err() != nil {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// pendingCount is the number of commands awaiting a reply (tests).
func (c *Client) pendingCount() int {
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	if conn == nil {
		return 0
	}
	conn.mu.Lock()
	defer conn.mu.Unlock()
	return len(conn.fifo) - conn.fifoHead
}
