package lifecycle

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// expiringTmux ends the caller's context when the saga reaches the state tag and
// then refuses the tag, and never answers kill-session (it blocks until its
// context ends, alone or in a pipeline): a create whose caller gave up mid-saga, compensating against a
// stuck tmux. The caller is cancelled at that step rather than by a short timer
// so that a slow machine cannot expire it earlier, in the fence's reservation.
type expiringTmux struct {
	tmuxAPI
	giveUp context.CancelFunc
}

func (x *expiringTmux) CommandIn(ctx context.Context, life tmuxctl.ServerLife, args ...string) (tmuxctl.Reply, error) {
	switch {
	case args[0] == "set-option" && args[3] == TagState:
		x.giveUp()
		return tmuxctl.Reply{}, &tmuxctl.CommandError{Command: "set-option", Lines: []string{"refused"}}
	case args[0] == "kill-session":
		<-ctx.Done()
		return tmuxctl.Reply{}, fmt.Errorf("tmuxctl: kill-session: no reply: %w", ctx.Err())
	}
	return x.tmuxAPI.CommandIn(ctx, life, args...)
}

func (x *expiringTmux) PipelineIn(ctx context.Context, life tmuxctl.ServerLife, cmds [][]string) ([]tmuxctl.Reply, []error) {
	for _, args := range cmds {
		if args[0] == "kill-session" {
			<-ctx.Done()
			return make([]tmuxctl.Reply, len(cmds)), errsOf(len(cmds), fmt.Errorf("tmuxctl: kill-session: no reply: %w", ctx.Err()))
		}
	}
	return x.tmuxAPI.PipelineIn(ctx, life, cmds)
}

// TestUndoAfterCallerAndCompensationDeadlines: the caller's context expires
// mid-saga, the step then fails, and the compensation's kill uses up the whole
// compensation deadline. The row must still end abandoned — not left owned by
// this live process, which refused every later create as identity_reserved_live
// until a restart — and the next create recovers it and publishes.
func TestUndoAfterCallerAndCompensationDeadlines(t *testing.T) {
	holdAbandoned(t) // its row is looked at
	e := startEnv(t, "", "", false)
	real := e.m.tmux
	e.m.compTimeout = 300 * time.Millisecond // no Create has run yet
	caller, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.m.tmux = &expiringTmux{tmuxAPI: real, giveUp: cancel}
	id, spec := e.identity("expired")
	if _, err := e.m.Create(caller, CreateRequest{Identity: id, Spec: spec}); verdict.CodeOf(err) != verdict.CodeTagFailed {
		t.Fatalf("create: %v", err)
	}
	if rec := lastVerdict(t, e, id); rec.Verdict != verdict.VerdictFailed || rec.Evidence["compensation"] != compAbandoned {
		t.Fatalf("verdict %+v", rec)
	}
	rows, err := e.store.Reservations(context.Background())
	if err != nil || len(rows) != 1 || !rows[0].Abandoned {
		t.Fatalf("rows %+v %v: want the attempt's row abandoned", rows, err)
	}
	e.m.tmux = real
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: 5 * time.Second})
	if err != nil || res.Status != verdict.VerdictPublished {
		t.Fatalf("create after the failed one: %+v %v", res, err)
	}
	waitFor(t, "one session of the identity", func() bool {
		s := e.sessions(id.Digest())
		return len(s) == 1 && s[0] == res.Session.ID
	})
}
