package tmuxctl

import (
	"bytes"
	"context"
	"io"
	"sync"
	"time"
)

// readLoop parses the client's stdout until EOF, then fails whatever is
// still pending and ends the notification stream.
func (c *Conn) readLoop() {
	parser := NewParser(c.onRecord)
	if c.wire != nil {
		parser.OnLine = func(l []byte) { c.wire.line('<', l) }
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := c.p.stdout.Read(buf)
		if n > 0 {
			_, _ = parser.Write(buf[:n])
		}
		if err != nil {
			break
		}
	}
	parser.Close()
	c.end(&ExitError{EOF: true})
	c.notes.finish()
	close(c.done)
}

// onRecord dispatches one parsed record (reader goroutine only).
func (c *Conn) onRecord(r Record) {
	switch r.Kind {
	case RecordReply:
		if r.Reply.Flags != 1 {
			c.onOtherBlock(r)
			return
		}
		p := c.popPending()
		if p == nil {
			c.log.Warn().Err(&ProtocolError{Line: "%begin …", Reason: "reply with no pending command"}).
				Uint64("number", r.Reply.Number).Msg("dropped unsolicited reply")
			return
		}
		if r.Error {
			// Error text is raw on every version (cmdq_error writes it
			// without vis), so a CommandError is never marked escaped.
			p.done <- result{err: &CommandError{Command: p.line, Lines: r.Reply.Lines}}
		} else {
			r.Reply.Escaped = c.escapes.Load()
			p.done <- result{reply: r.Reply}
		}
	case RecordNotification:
		n := Notification{Name: r.Name, Text: r.Text}
		if n.Name == NoteConfigError {
			// tmux 3.4+ reports errors in its configuration file to the
			// first control client instead of a pane's view mode: the
			// only place a daemon's operator will ever see them.
			c.log.Warn().Str("error", quoteForLog(n.Text)).Msg("tmux configuration file error")
		}
		c.notes.push(n)
		if n.Name == NoteExit {
			c.end(&ExitError{Reason: n.Text})
		}
	case RecordOutput:
		// The control client runs with no-output; output can only come from
		// a client flag changed behind our back. It is not ours to keep.
		c.log.Debug().Str("pane", r.Pane).Int("bytes", len(r.Data)).Msg("ignored pane output")
	case RecordUnexpected:
		// Hook output and errors and multi-line subscription values arrive
		// as bare lines outside blocks (docs/tmux-facts.md §1.3): log, never fail.
		c.log.Warn().Str("line", quoteForLog(r.Text)).Msg("line outside any block")
	case RecordIncomplete:
		c.log.Warn().Uint64("number", r.Reply.Number).Msg("stream ended inside a reply block")
	}
}

// onOtherBlock handles blocks not caused by our stdin (flags 0): the first
// one is the argv command (new-session -A); later ones are hooks that our
// commands triggered, which belong to nobody's FIFO.
func (c *Conn) onOtherBlock(r Record) {
	if !c.started {
		c.started = true
		var err error
		if r.Error {
			err = &CommandError{Command: "new-session -A -s " + c.cfg.ControlSession, Lines: r.Reply.Lines}
		}
		select {
		case c.startErr <- err:
		default:
		}
		return
	}
	c.log.Debug().Uint64("number", r.Reply.Number).Int("flags", r.Reply.Flags).
		Int("lines", len(r.Reply.Lines)).Msg("block not caused by us (hook)")
}

// flush writes queued lines until the queue is empty; only the caller that
// set c.writing runs it. Each write has Config.CommandTimeout to complete: a
// client that does not read its stdin for that long is wedged, and a partial
// line cannot be taken back, so the client is killed and every pending
// command fails. When the queue is empty and Close asked for it, stdin is
// closed (tmux answers with %exit).
func (c *Conn) flush() {
	for {
		c.mu.Lock()
		if len(c.wbuf) == 0 {
			c.writing = false
			closeNow := c.stdinDone && !c.stdinClosed
			c.stdinClosed = c.stdinClosed || closeNow
			c.mu.Unlock()
			if closeNow {
				_ = c.p.stdin.Close()
			}
			return
		}
		// Two buffers swap roles; spare is nil while its array is in use,
		// so appends by enqueue never touch the bytes being written.
		buf := c.wbuf
		c.wbuf, c.spare = c.spare[:0], nil
		c.mu.Unlock()
		if c.wire != nil {
			c.wire.lines('>', buf)
		}
		_ = c.p.stdin.SetWriteDeadline(time.Now().Add(c.cfg.CommandTimeout))
		_, err := c.p.stdin.Write(buf)
		c.mu.Lock()
		c.spare = buf[:0]
		c.mu.Unlock()
		if err != nil {
			// c.writing stays set: nobody writes to this stdin again.
			c.log.Warn().Err(err).Msg("write to control client failed; killing it")
			c.p.kill()
			return
		}
	}
}

// reapWatch: once the client process has exited, the server may still hold
// a copy of its stdout; do not wait for that EOF for long.
func (c *Conn) reapWatch() {
	<-c.p.exited
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		c.log.Debug().Msg("no EOF after client exit; closing its stdout")
		_ = c.p.stdout.Close()
	}
}

// Close first removes the subscriptions added through Command (see
// unsubscribeAll), then closes the client's stdin (after any queued command
// lines) and waits for %exit and the client's exit, bounded by
// Config.CloseTimeout;
// only a client that hangs is killed, by pid. Commands already sent still
// get their replies; new ones fail with ErrNotConnected. Close is
// idempotent and safe to call on an ended connection.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.unsubscribeAll()
		// Detach under the attach lock, so that no client of ours is
		// identifying while this one's %client-detached goes out; a lock
		// not had within CloseTimeout is not worth a hung Close.
		lctx, cancel := context.WithTimeout(context.Background(), c.cfg.CloseTimeout)
		lock, _ := lockAttach(lctx, c.cfg.Socket)
		cancel()
		defer lock.release()
		c.mu.Lock()
		c.stdinDone = true
		closeNow := !c.writing && !c.stdinClosed
		c.stdinClosed = c.stdinClosed || closeNow
		c.mu.Unlock()
		if closeNow {
			_ = c.p.stdin.Close()
		}
		t := time.NewTimer(c.cfg.CloseTimeout)
		defer t.Stop()
		select {
		case <-c.p.exited:
		case <-t.C:
			c.log.Warn().Int("pid", c.p.pid()).Msg("control client did not exit; killing it")
			c.closeErr = errCloseKilled
			c.p.kill()
			<-c.p.exited
		}
		<-c.done
		_ = c.p.stdin.Close() // idempotent; covers a flush that failed
		c.notes.abort()
	})
	return c.closeErr
}

var errCloseKilled = &ExitError{Reason: "control client hung on close and was killed"}

// wireLog writes every line in ('<') and out ('>') with a UTC timestamp.
type wireLog struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

func newWireLog(w io.Writer) *wireLog {
	if w == nil {
		return nil
	}
	return &wireLog{w: w}
}

func (l *wireLog) line(dir byte, b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = time.Now().UTC().AppendFormat(l.buf[:0], "2006-01-02T15:04:05.000000Z")
	l.buf = append(append(append(l.buf, ' ', dir, ' '), b...), '\n')
	_, _ = l.w.Write(l.buf)
}

func (l *wireLog) lines(dir byte, b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			i = len(b)
		}
		l.line(dir, b[:i])
		if i < len(b) {
			i++
		}
		b = b[i:]
	}
}
