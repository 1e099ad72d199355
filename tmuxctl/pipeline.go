package tmuxctl

import (
	"context"
	"errors"
	"fmt"
)

// Pipeline sends cmds in this order, each on its own line, in one write,
// without waiting for a reply in between, and then waits for every reply: one
// round trip for all of them, and tmux runs them in the order given (its one thread takes
// the lines as they come). Each command is its own line, so one that fails
// does not stop the next (unlike a `a ; b` list, where tmux drops what follows
// a failure without a reply block: docs/tmux-facts.md §2). replies[i] and errs[i] are what
// Command would have returned for cmds[i]. Subscription changes
// (refresh-client -B) are refused: their bookkeeping is Command's.
func (c *Conn) Pipeline(ctx context.Context, cmds [][]string) ([]Reply, []error) {
	replies, errs := make([]Reply, len(cmds)), make([]error, len(cmds))
	fail := func(from int, err error) ([]Reply, []error) {
		for i := from; i < len(cmds); i++ {
			errs[i] = err
		}
		return replies, errs
	}
	lines := make([]string, len(cmds))
	notify := false
	for i, args := range cmds {
		line, err := Encode(args)
		if err == nil && subChanges(args) != nil {
			err = errors.New("tmuxctl: a subscription change cannot be pipelined")
		}
		if err != nil {
			return fail(0, fmt.Errorf("%w (pipeline not sent)", err))
		}
		lines[i] = line
		notify = notify || notifiesOthers(args[0])
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.CommandTimeout)
		defer cancel()
	}
	if err := ctx.Err(); err != nil {
		return fail(0, fmt.Errorf("tmuxctl: pipeline not sent: %w", err))
	}
	if c.guardNotify.Load() && notify {
		lock, err := lockAttachShared(ctx, c.cfg.Socket)
		if err != nil {
			return fail(0, fmt.Errorf("%w: pipeline not sent: %w", ErrNotConnected, err))
		}
		defer lock.release() // held until the last reply, as Command holds it
	}
	ps := make([]*pending, len(cmds))
	for i, line := range lines {
		ps[i] = &pending{line: line, done: make(chan result, 1)}
	}
	if err := c.enqueueAll(ps); err != nil {
		return fail(0, err) // none was written
	}
	for i, p := range ps {
		select {
		case res := <-p.done:
			replies[i], errs[i] = res.reply, res.err
		case <-ctx.Done():
			errs[i] = fmt.Errorf("tmuxctl: %s: no reply: %w", cmds[i][0], ctx.Err())
		}
	}
	return replies, errs
}

// PipelineIn is Pipeline on the current connection, only if it reaches
// server life life (CommandIn's rule); otherwise every command fails with
// ErrLifeChanged, unsent.
func (c *Client) PipelineIn(ctx context.Context, life ServerLife, cmds [][]string) ([]Reply, []error) {
	c.mu.Lock()
	conn, info, served := c.conn, c.info, c.served
	c.mu.Unlock()
	var err error
	switch {
	case conn == nil:
		err = ErrNotConnected
	case info.ServerLife != life:
		err = fmt.Errorf("%w: decided in pid %d start %d, now pid %d start %d",
			ErrLifeChanged, life.PID, life.StartTime, info.PID, info.StartTime)
	}
	if err != nil {
		errs := make([]error, len(cmds))
		for i := range errs {
			errs[i] = err
		}
		return make([]Reply, len(cmds)), errs
	}
	replies, errs := conn.Pipeline(ctx, cmds)
	for i := range cmds {
		answered(served)(replies[i], errs[i])
	}
	return replies, errs
}
