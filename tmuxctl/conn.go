package tmuxctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Config configures a control connection (and a Client).
type Config struct {
	Tmux           string        // tmux binary; default "tmux"
	Socket         string        // -S socket path (required)
	ConfigFile     string        // -f config file; "" → tmux's default
	ControlSession string        // control session name; default "skc-control"
	CommandTimeout time.Duration // deadline for a command whose ctx has none; default 10s
	WireLog        io.Writer     // every line in and out, timestamped; nil → off
	Log            *zerolog.Logger
	Env            []string // extra environment for the tmux client (KEY=VALUE)

	// CloseTimeout bounds how long Close waits for %exit and the client's
	// exit after closing its stdin before killing it by pid; default 5s.
	CloseTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the Client's reconnect backoff;
	// defaults 100ms and 5s.
	ReconnectMin, ReconnectMax time.Duration

	// SocketMode, when not 0, is applied to the socket after every
	// successful connect: tmux creates its socket with its own umask, and a
	// server started by a reconnect gets a new socket (0 → leave alone).
	// Only a socket is chmod'ed (no symlink following); otherwise the dial
	// fails with *SocketModeError.
	SocketMode os.FileMode

	// StartServer, when set, is called by the Client before a dial when no
	// server answers on Socket (the socket is missing or refuses the
	// connection), so that the server of every life is started the same
	// way — e.g. in its own systemd scope (package scope) — rather than by
	// the control client's new-session -A. Its ctx is bounded by
	// CommandTimeout. An error is logged and the dial goes ahead: the
	// control client then starts the server itself. Dial never calls it.
	StartServer func(ctx context.Context) error
}

// validControlName keeps the control session name free of anything that
// new-session -s would format-expand or sanitise (docs/tmux-facts.md §7.2):
// [A-Za-z0-9_-]{1,64}. A loop, not a regexp: compiling one at init cost every
// process of this binary, the pane helpers included, a quarter of a millisecond.
func validControlName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.Tmux == "" {
		cfg.Tmux = "tmux"
	}
	if cfg.ControlSession == "" {
		cfg.ControlSession = "skc-control"
	}
	if cfg.CommandTimeout <= 0 {
		cfg.CommandTimeout = 10 * time.Second
	}
	if cfg.CloseTimeout <= 0 {
		cfg.CloseTimeout = 5 * time.Second
	}
	if cfg.ReconnectMin <= 0 {
		cfg.ReconnectMin = 100 * time.Millisecond
	}
	if cfg.ReconnectMax < cfg.ReconnectMin {
		cfg.ReconnectMax = 5 * time.Second
	}
	if cfg.Log == nil {
		nop := zerolog.Nop()
		cfg.Log = &nop
	}
	if cfg.Socket == "" {
		return cfg, errors.New("tmuxctl: Config.Socket is required")
	}
	if !validControlName(cfg.ControlSession) {
		return cfg, fmt.Errorf("tmuxctl: control session name %q: want [A-Za-z0-9_-]{1,64}", cfg.ControlSession)
	}
	return cfg, nil
}

// pending is one command sent and waiting for its flags-1 reply block.
type pending struct {
	line string
	done chan result // buffered: the reader never blocks on a gone caller
}

type result struct {
	reply Reply
	err   error
}

// Conn is one control client life: a `tmux -C` process attached to the
// control session, commands pipelined and matched FIFO to flags-1 reply
// blocks, notifications on an unbounded queue.
type Conn struct {
	cfg   Config
	p     *proc
	info  ServerInfo
	notes *queue[Notification]
	wire  *wireLog
	log   zerolog.Logger

	mu          sync.Mutex
	fifo        []*pending
	fifoHead    int
	wbuf        []byte // command lines queued, not yet written
	spare       []byte
	writing     bool  // a caller is flushing wbuf to stdin
	stdinDone   bool  // Close asked to close stdin after the queued lines
	stdinClosed bool  // stdin has been closed (or is being closed)
	ended       error // why no more commands can be sent; nil while live
	started     bool
	startErr    chan error          // first flags-0 block closed (nil) or failed
	subs        map[string]struct{} // refresh-client -B names added through Command

	// escapes is the server's EscapesOutput, known once the identity is
	// read; the reader marks flags-1 replies with it (Reply.Escaped).
	escapes atomic.Bool
	// guardNotify: the server is older than 3.7, so commands that notify
	// other control clients hold the attach lock shared (attachlock.go).
	guardNotify atomic.Bool

	done      chan struct{} // reader finished, every pending command failed
	closeOnce sync.Once
	closeErr  error
}

// Dial starts the control client, waits for its argv command to complete
// (3.3a reads stdin before that, docs/tmux-facts.md §2), reads the server identity and
// tags the control session `@skc-control 1`. ctx bounds the whole dial
// (Config.CommandTimeout when ctx has no deadline). When no server runs on
// the socket, the client starts one: a new server life.
func Dial(ctx context.Context, cfg Config) (*Conn, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		// A wedged server must not hang a dial forever (Client.Run's ctx has
		// no deadline): the handshake gets one command timeout.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.CommandTimeout)
		defer cancel()
	}
	// Our control clients attach one at a time (see attachLock).
	lock, err := lockAttach(ctx, cfg.Socket)
	if err != nil {
		return nil, err
	}
	p, err := startProc(&cfg, controlArgs(&cfg))
	if err != nil {
		lock.release()
		return nil, err
	}
	c := &Conn{cfg: cfg, p: p, notes: newQueue[Notification](), wire: newWireLog(cfg.WireLog),
		log:      cfg.Log.With().Str("component", "tmuxctl").Str("socket", cfg.Socket).Logger(),
		startErr: make(chan error, 1), done: make(chan struct{})}
	c.info.ClientPID = p.pid()
	go c.readLoop()
	go c.reapWatch()
	if err := c.handshake(ctx, lock); err != nil {
		_ = c.Close()
		return nil, err
	}
	if cfg.SocketMode != 0 {
		if err := chmodSocket(cfg.Socket, cfg.SocketMode); err != nil {
			_ = c.Close()
			return nil, err
		}
	}
	return c, nil
}

// handshake waits for the argv command's block, releases the attach lock
// (the client is now fully a control client, or gone), then reads the
// identity and tags the control session.
func (c *Conn) handshake(ctx context.Context, lock *attachLock) error {
	defer lock.release()
	select {
	case err := <-c.startErr:
		if err != nil {
			return c.withStderr(err)
		}
	case <-ctx.Done():
		return fmt.Errorf("tmuxctl: waiting for the control client to attach: %w", ctx.Err())
	}
	lock.release()
	r, err := c.Command(ctx, "display-message", "-p", identityFormat)
	if err != nil {
		return fmt.Errorf("tmuxctl: reading server identity: %w", err)
	}
	info, err := parseIdentity(r.Lines)
	if err != nil {
		return err
	}
	info.ClientPID = c.info.ClientPID
	c.info = info
	c.escapes.Store(info.EscapesOutput())
	c.guardNotify.Store(!info.VersionAtLeast(3, 7))
	if _, err := c.Command(ctx, "set-option", "-t", info.ControlSessionID, "@skc-control", "1"); err != nil {
		return fmt.Errorf("tmuxctl: tagging the control session: %w", err)
	}
	c.log.Debug().Int("server_pid", info.PID).Int64("start_time", info.StartTime).
		Str("version", info.Version).Msg("control connection up")
	return nil
}

// withStderr adds the client's stderr (startup failures) to err.
func (c *Conn) withStderr(err error) error {
	select {
	case <-c.p.exited:
	case <-time.After(200 * time.Millisecond):
	}
	if s := c.p.stderr.String(); s != "" {
		return fmt.Errorf("%w (tmux stderr: %s)", err, s)
	}
	return err
}

// Info is the server identity read at connect.
func (c *Conn) Info() ServerInfo { return c.info }

// Notifications is the notification stream in wire order. It is fed from an
// unbounded queue, so the reader never blocks; it is closed after the
// connection ends and the queue is drained (or at once by Close). A caller
// that takes it must drain it or call Close.
func (c *Conn) Notifications() <-chan Notification { return c.notes.out }

// Done is closed when the connection has ended (%exit or EOF seen, every
// pending command failed).
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the connection ended: an *ExitError (matching ErrServerExited),
// ErrClosed after Close, or nil while it is live.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ended
}

// Command sends one command (args[0] is its name; every element is encoded
// with Quote) and waits for its reply. Without a deadline on ctx,
// Config.CommandTimeout applies. Errors: *CommandError for an %error reply;
// ErrNotConnected (not sent) when the connection has ended, or when a
// command that notifies other clients could not get the attach lock in
// time (tmux < 3.7, attachlock.go); an ExitError
// (errors.Is ErrServerExited: sent, outcome unknown) when it ends while the
// command is pending; ctx's error on timeout (sent, outcome unknown — the
// late reply is consumed and dropped, the FIFO stays in step).
func (c *Conn) Command(ctx context.Context, args ...string) (Reply, error) {
	line, err := Encode(args)
	if err != nil {
		return Reply{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.CommandTimeout)
		defer cancel()
	}
	if err := ctx.Err(); err != nil {
		return Reply{}, fmt.Errorf("tmuxctl: %s not sent: %w", args[0], err)
	}
	if c.guardNotify.Load() && notifiesOthers(args[0]) {
		lock, err := lockAttachShared(ctx, c.cfg.Socket)
		if err != nil {
			// Never written: callers may treat it as any refusal to send.
			return Reply{}, fmt.Errorf("%w: %s not sent: %w", ErrNotConnected, args[0], err)
		}
		// Held until the reply: tmux queues the notifications with the
		// command and writes them in the same server loop.
		defer lock.release()
	}
	subs := subChanges(args)
	c.trackSubs(subs)
	p := &pending{line: line, done: make(chan result, 1)}
	if err := c.enqueue(p); err != nil {
		return Reply{}, err
	}
	select {
	case res := <-p.done:
		if res.err == nil && subs != nil {
			c.untrackSubs(subs)
		}
		return res.reply, res.err
	case <-ctx.Done():
		return Reply{}, fmt.Errorf("tmuxctl: %s: no reply: %w", args[0], ctx.Err())
	}
}

// enqueue records p in the FIFO and queues its line, atomically, so the
// FIFO order is the wire order; then it writes the queue unless another
// caller is already doing so (that caller writes our line too). Writing from
// the caller saves a goroutine hand-off per command.
func (c *Conn) enqueue(p *pending) error { return c.enqueueAll([]*pending{p}) }

// enqueueAll is enqueue for several commands at once: their lines are queued
// together and so reach the control client in one write, and tmux in one
// read, instead of a write (and a wake of the client and of the server) each.
// Either all are queued or, the connection being over, none.
func (c *Conn) enqueueAll(ps []*pending) error {
	c.mu.Lock()
	if c.ended != nil || c.stdinDone {
		err := c.ended
		c.mu.Unlock()
		if err == nil || errors.Is(err, ErrClosed) {
			return fmt.Errorf("%w: %w", ErrNotConnected, ErrClosed)
		}
		// The cause is text only: a command never sent must not match
		// ErrServerExited, which means "sent, outcome unknown".
		return fmt.Errorf("%w (%v)", ErrNotConnected, err)
	}
	for _, p := range ps {
		c.fifo = append(c.fifo, p)
		c.wbuf = append(append(c.wbuf, p.line...), '\n')
	}
	if c.writing {
		c.mu.Unlock()
		return nil
	}
	c.writing = true
	c.mu.Unlock()
	c.flush()
	return nil
}

// popPending takes the oldest pending command, or nil.
func (c *Conn) popPending() *pending {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fifoHead == len(c.fifo) {
		return nil
	}
	p := c.fifo[c.fifoHead]
	c.fifo[c.fifoHead] = nil
	c.fifoHead++
	if c.fifoHead == len(c.fifo) {
		c.fifo, c.fifoHead = c.fifo[:0], 0
	}
	return p
}

// end marks the connection ended with err (first cause wins) and fails
// every pending command with it, promptly.
func (c *Conn) end(err error) {
	c.mu.Lock()
	if c.ended == nil {
		if c.stdinDone {
			c.ended = ErrClosed
		} else {
			c.ended = err
		}
	}
	fifo := c.fifo[c.fifoHead:]
	c.fifo, c.fifoHead = nil, 0
	c.mu.Unlock()
	for _, p := range fifo {
		p.done <- result{err: err}
	}
	select {
	case c.startErr <- err:
	default:
	}
}
