package tmuxctl

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// FollowEvent is one thing a Follower saw, delivered on its reader goroutine.
type FollowEvent struct {
	Pane string // "%N"
	// Data is the exact bytes the pane wrote (decoded %output /
	// %extended-output). It is the callback's to keep.
	Data []byte
	// Paused: tmux paused the pane for this client (pause-after) and dropped
	// what it had queued; an unknown number of bytes is lost before the next
	// Data. The Follower has already asked tmux to continue.
	Paused bool
}

// Follower is a second control client attached to one session, only to
// receive that session's pane output (a control client gets %output only for
// its own session). It runs
//
//	tmux -S SOCK [-f CONF] -u -C attach-session -t $ID -f ignore-size,pause-after=N
//
// so it never changes the window size (and types nothing: its stdin carries
// only our refresh-client commands), and is paused by tmux
// (its queue for the pane discarded, %pause sent) instead of being dropped
// when it falls more than N seconds behind — never "too far behind" (docs/tmux-facts.md §5).
// Being attached, it counts in #{session_attached} while it lives.
//
// A Follower sends no command except `refresh-client -A %P:continue` after a
// %pause, and only after the argv command's block has closed (3.3a reads stdin
// early, docs/tmux-facts.md §2). It is closed by EOF on its stdin, never by a signal unless
// it hangs (a killed control client can crash tmux 3.3a).
type Follower struct {
	cfg       Config
	p         *proc
	sessionID string
	fn        func(FollowEvent)
	log       zerolog.Logger

	mu       sync.Mutex
	started  bool
	closing  bool
	startErr chan error
	done     chan struct{} // reader finished: %exit, EOF
	once     sync.Once
}

// followerCloses serialises closing followers: several control clients
// leaving at the same instant is what the stop path of tmux 3.3a handles
// worst, and one at a time costs a few milliseconds each.
var followerCloses sync.Mutex

// followArgs is the argv of a Follower of session id. The client is not
// attached read-only: nothing of ours ever types through it, and since tmux 3.7
// a read-only client attached to a session makes other clients' `send-keys -t`
// of that session fail ("client is read-only": the command runs as the best
// client of its target), which would break a human's own scripts whenever a
// follower is attached. ignore-size keeps it from sizing the session.
func followArgs(cfg *Config, id string, pauseAfter int) []string {
	args := []string{"-S", cfg.Socket}
	if cfg.ConfigFile != "" {
		args = append(args, "-f", cfg.ConfigFile)
	}
	return append(args, "-u", "-C", "attach-session", "-t", id,
		"-f", "ignore-size,pause-after="+strconv.Itoa(pauseAfter))
}

// DialFollower attaches a Follower to session id ("$N") and calls fn, on its
// reader goroutine, for every output of the session's panes and every pause.
// fn must not block: a reader that waits holds up only this client, but tmux
// then pauses the pane after pauseAfter seconds (minimum 1). ctx bounds the
// attach. An attach that tmux refuses (no such session) is a *CommandError.
func DialFollower(ctx context.Context, cfg Config, id string, pauseAfter int, fn func(FollowEvent)) (*Follower, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if !isID(id, '$') {
		return nil, fmt.Errorf("%w: session id %q", ErrUnencodable, id)
	}
	if pauseAfter < 1 {
		pauseAfter = 1
	}
	// Attach under the attach lock (attachlock.go), like every control
	// client of ours: tmux before 3.7 can crash when a notification reaches a
	// control client that is still identifying.
	lock, err := lockAttach(ctx, cfg.Socket)
	if err != nil {
		return nil, err
	}
	p, err := startProc(&cfg, followArgs(&cfg, id, pauseAfter))
	if err != nil {
		lock.release()
		return nil, err
	}
	f := &Follower{cfg: cfg, p: p, sessionID: id, fn: fn, startErr: make(chan error, 1),
		done: make(chan struct{}),
		log:  cfg.Log.With().Str("component", "tmuxctl.follower").Str("session", id).Logger()}
	go f.readLoop()
	select {
	case err = <-f.startErr:
	case <-ctx.Done():
		err = fmt.Errorf("tmuxctl: attaching a follower to %s: %w", id, ctx.Err())
	}
	lock.release() // before Close, which takes it again to detach
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// Done is closed when the follower has ended: its session is gone, the server
// exited, or Close.
func (f *Follower) Done() <-chan struct{} { return f.done }

// PID is the follower client's process id.
func (f *Follower) PID() int { return f.p.pid() }

func (f *Follower) readLoop() {
	parser := NewParser(f.onRecord)
	buf := make([]byte, 64<<10)
	for {
		n, err := f.p.stdout.Read(buf)
		if n > 0 {
			_, _ = parser.Write(buf[:n])
		}
		if err != nil {
			break
		}
	}
	parser.Close()
	select {
	case f.startErr <- &ExitError{EOF: true}:
	default:
	}
	close(f.done)
}

// onRecord handles one record (reader goroutine only).
func (f *Follower) onRecord(r Record) {
	switch r.Kind {
	case RecordOutput:
		f.fn(FollowEvent{Pane: r.Pane, Data: r.Data})
	case RecordReply:
		if r.Reply.Flags == 0 && !f.started {
			f.mu.Lock()
			f.started = true
			f.mu.Unlock()
			var err error
			if r.Error {
				err = &CommandError{Command: "attach-session -t " + f.sessionID, Lines: r.Reply.Lines}
			}
			f.startErr <- err
		}
	case RecordNotification:
		f.onNote(Notification{Name: r.Name, Text: r.Text})
	}
}

func (f *Follower) onNote(n Notification) {
	switch n.Name {
	case NotePause:
		pane, err := n.Pane()
		if err != nil {
			return
		}
		f.fn(FollowEvent{Pane: pane, Paused: true})
		f.send("refresh-client", "-A", pane+":continue")
	case NoteSessionChanged:
		// With detach-on-destroy off, tmux moves a client whose session
		// died to another session: that one's output is not ours.
		if id, _, err := n.Session(); err == nil && id != f.sessionID {
			go func() { _ = f.Close() }()
		}
	}
}

// send writes one command line; its reply block is read and ignored. It is
// never called before the argv block closed (only %pause calls it).
func (f *Follower) send(args ...string) {
	line, err := Encode(args)
	if err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return
	}
	_ = f.p.stdin.SetWriteDeadline(time.Now().Add(f.cfg.CommandTimeout))
	if _, err := f.p.stdin.Write([]byte(line + "\n")); err != nil {
		f.log.Warn().Err(err).Msg("follower: writing to the client failed")
	}
}

// Close detaches the follower by closing its stdin (tmux answers %exit and
// the client exits), one follower at a time, and waits for the client to exit
// within Config.CloseTimeout; only a client that hangs is killed, by pid.
// Close is idempotent.
func (f *Follower) Close() error {
	var err error
	f.once.Do(func() {
		followerCloses.Lock()
		defer followerCloses.Unlock()
		// Detach under the attach lock, as Conn.Close does.
		lctx, cancel := context.WithTimeout(context.Background(), f.cfg.CloseTimeout)
		lock, _ := lockAttach(lctx, f.cfg.Socket)
		cancel()
		defer lock.release()
		f.mu.Lock()
		f.closing = true
		_ = f.p.stdin.Close()
		f.mu.Unlock()
		t := time.NewTimer(f.cfg.CloseTimeout)
		defer t.Stop()
		select {
		case <-f.p.exited:
		case <-t.C:
			f.log.Warn().Int("pid", f.p.pid()).Msg("follower client did not exit; killing it")
			err = errors.New("tmuxctl: follower hung on close and was killed")
			f.p.kill()
			<-f.p.exited
		}
		select {
		case <-f.done:
		case <-time.After(2 * time.Second):
			_ = f.p.stdout.Close() // the server may still hold the pipe's other end
			<-f.done
		}
	})
	return err
}

// Config returns the Client's configuration with its defaults applied, so
// that a Follower of the same server is started the same way.
func (c *Client) Config() Config { return c.cfg }
