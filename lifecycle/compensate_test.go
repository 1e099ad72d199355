package lifecycle

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// faultyTmux wraps the real client and fails or delays chosen commands: the
// containerd failpoint idea, on the control connection.
type faultyTmux struct {
	tmuxAPI
	mu     sync.Mutex
	failOn func(args []string) (send bool, err error) // nil: pass through
}

func (f *faultyTmux) CommandIn(ctx context.Context, life tmuxctl.ServerLife, args ...string) (tmuxctl.Reply, error) {
	f.mu.Lock()
	fn := f.failOn
	f.mu.Unlock()
	if fn != nil {
		if send, err := fn(args); err != nil {
			if send {
				_, _ = f.tmuxAPI.CommandIn(ctx, life, args...)
			}
			return tmuxctl.Reply{}, err
		}
	}
	return f.tmuxAPI.CommandIn(ctx, life, args...)
}

// PipelineIn fails the chosen commands of a pipeline (a failed one is sent
// too when failOn says so) and sends the rest in one round trip.
func (f *faultyTmux) PipelineIn(ctx context.Context, life tmuxctl.ServerLife, cmds [][]string) ([]tmuxctl.Reply, []error) {
	f.mu.Lock()
	fn := f.failOn
	f.mu.Unlock()
	replies, errs := make([]tmuxctl.Reply, len(cmds)), make([]error, len(cmds))
	var sent [][]string
	var at []int
	for i, args := range cmds {
		send, err := true, error(nil)
		if fn != nil {
			if s, e := fn(args); e != nil {
				send, err = s, e
			}
		}
		errs[i] = err
		if send {
			sent, at = append(sent, args), append(at, i)
		}
	}
	if len(sent) == 0 {
		return replies, errs
	}
	rs, es := f.tmuxAPI.PipelineIn(ctx, life, sent)
	for j, i := range at {
		if errs[i] == nil {
			replies[i], errs[i] = rs[j], es[j]
		}
	}
	return replies, errs
}

func withFaults(e *env, fn func(args []string) (bool, error)) {
	if f, ok := e.m.tmux.(*faultyTmux); ok {
		f.mu.Lock()
		f.failOn = fn
		f.mu.Unlock()
		return
	}
	e.m.tmux = &faultyTmux{tmuxAPI: e.m.tmux, failOn: fn}
}

func lastVerdict(t *testing.T, e *env, id fence.Identity) verdict.Record {
	t.Helper()
	recs := e.verdicts(id)
	if len(recs) == 0 {
		t.Fatal("no verdicts")
	}
	return recs[len(recs)-1]
}

func TestSpawnFailedLeavesNothing(t *testing.T) {
	e := startEnv(t, "", "", false)
	withFaults(e, func(args []string) (bool, error) {
		if args[0] == "new-session" {
			return false, &tmuxctl.CommandError{Command: "new-session", Lines: []string{"create window failed"}}
		}
		return false, nil
	})
	id, spec := e.identity("spawnfail")
	_, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	if verdict.CodeOf(err) != verdict.CodeSpawnFailed {
		t.Fatalf("err %v", err)
	}
	rec := lastVerdict(t, e, id)
	if rec.Verdict != verdict.VerdictFailed || rec.Evidence["compensation"] != compReleased {
		t.Fatalf("verdict %+v", rec)
	}
	checkNoTrace(t, e, id)
}

// TestTagConnectionLost: the control connection ends under the tag step —
// the server died — in a create's own session and in a claimed standby's:
// tmux_unavailable (tmux was not there to refuse a tag), not tag_failed,
// and nothing left of the attempt once tmux answers again.
func TestTagConnectionLost(t *testing.T) {
	for _, pool := range []int{0, 1} {
		t.Run(fmt.Sprintf("pool%d", pool), func(t *testing.T) {
			e := startPoolEnv(t, "", pool)
			withFaults(e, func(args []string) (bool, error) {
				if args[0] == "set-option" && len(args) > 3 && args[3] == TagState {
					return true, &tmuxctl.ExitError{EOF: true}
				}
				return false, nil
			})
			id, spec := e.identity("tagconn")
			_, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
			if verdict.CodeOf(err) != verdict.CodeTmuxUnavailable {
				t.Fatalf("err %v, want tmux_unavailable", err)
			}
			// The claim names the pipeline's first failed command, the tag
			// step the tag: which path ran.
			cause, _ := lastVerdict(t, e, id).Evidence["cause"].(string)
			if claimed := strings.Contains(cause, "set-option: "); claimed != (pool == 1) {
				t.Fatalf("cause %q: claimed %v, want %v", cause, claimed, pool == 1)
			}
			withFaults(e, nil)
			res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: 10 * time.Second})
			if err != nil || res.Status != verdict.VerdictPublished {
				t.Fatalf("create once tmux answers: %+v %v", res, err)
			}
			waitFor(t, "one session of the identity", func() bool { return len(e.sessions(id.Digest())) == 1 })
		})
	}
}

func TestTagFailedKillsAndReleases(t *testing.T) {
	e := startEnv(t, "", "", false)
	withFaults(e, func(args []string) (bool, error) {
		if args[0] == "set-option" && args[3] == TagState {
			return false, &tmuxctl.CommandError{Command: "set-option", Lines: []string{"no such session"}}
		}
		return false, nil
	})
	id, spec := e.identity("tagfail")
	_, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	if verdict.CodeOf(err) != verdict.CodeTagFailed {
		t.Fatalf("err %v", err)
	}
	if rec := lastVerdict(t, e, id); rec.Evidence["compensation"] != compReleased {
		t.Fatalf("verdict %+v", rec)
	}
	checkNoTrace(t, e, id)
}

// TestUncertainSpawnAbandons: the connection "drops" after new-session was sent,
// so the outcome is unknown: the row is abandoned as evidence, and the next create
// recovers it (kills the orphan, confirmed) and publishes.
func TestUncertainSpawnAbandons(t *testing.T) {
	holdAbandoned(t) // its row is looked at
	e := startEnv(t, "", "", false)
	withFaults(e, func(args []string) (bool, error) {
		if args[0] == "new-session" {
			return true, tmuxctl.ErrServerExited
		}
		return false, nil
	})
	id, spec := e.identity("uncertain")
	_, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	if verdict.CodeOf(err) != verdict.CodeTmuxUnavailable {
		t.Fatalf("err %v", err)
	}
	if rec := lastVerdict(t, e, id); rec.Evidence["compensation"] != compAbandoned {
		t.Fatalf("verdict %+v", rec)
	}
	rows, _ := e.store.Reservations(context.Background())
	if len(rows) != 1 || !rows[0].Abandoned {
		t.Fatalf("rows %+v", rows)
	}
	withFaults(e, nil)
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	if err != nil || res.Status != "published" {
		t.Fatalf("second create %+v %v", res, err)
	}
	if s := e.sessions(id.Digest()); len(s) != 1 || s[0] != res.Session.ID {
		t.Fatalf("sessions %v", s)
	}
	if n := count(e.verdicts(id), verdict.VerdictOrphanCleaned); n != 1 {
		t.Fatalf("verdicts %v", verdictNames(e.verdicts(id)))
	}
}

// TestRefusalLeavesNoTrace: a create that meets an in-flight one and does not
// wait is refused, and leaves no session, no row of its own, nothing in state_dir.
func TestRefusalLeavesNoTrace(t *testing.T) {
	e := startEnv(t, "", "", false)
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	withFaults(e, func(args []string) (bool, error) {
		if args[0] == "new-session" {
			entered <- struct{}{}
			<-gate
		}
		return false, nil
	})
	id, spec := e.identity("refuse")
	done := make(chan error, 1)
	go func() {
		_, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
		done <- err
	}()
	<-entered
	_, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: 0})
	if verdict.CodeOf(err) != verdict.CodeIdentityReservedLive {
		t.Fatalf("err %v", err)
	}
	rows, _ := e.store.Reservations(context.Background())
	ents, _ := os.ReadDir(id.StateDir)
	if len(rows) != 1 || len(ents) != 0 || len(e.sessions(id.Digest())) != 0 {
		t.Fatalf("refusal left a trace: rows %d, state_dir %v, sessions %v", len(rows), ents, e.sessions(id.Digest()))
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func checkNoTrace(t *testing.T, e *env, id fence.Identity) {
	t.Helper()
	waitFor(t, "no session", func() bool { return len(e.sessions(id.Digest())) == 0 })
	rows, _ := e.store.Reservations(context.Background())
	if len(rows) != 0 {
		t.Fatalf("rows left %+v", rows)
	}
	_ = time.Second
}

// TestFenceLostStopsWithoutTmuxMutation: when the row stops being ours mid-saga,
// the attempt stops with no further tmux command (its session is left for
// recovery), writes failed/fence_lost, and the next create recovers the orphan.
func TestFenceLostStopsWithoutTmuxMutation(t *testing.T) {
	e := startEnv(t, "", "", false)
	var mu sync.Mutex
	var after []string
	lost := false
	withFaults(e, func(args []string) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if lost {
			after = append(after, args[0])
		}
		if args[0] == "new-session" && !lost {
			rows, _ := e.store.Reservations(context.Background())
			if len(rows) == 1 {
				_ = e.store.Abandon(context.Background(), rows[0].ID) // the row is no longer in flight
			}
			lost = true
		}
		return false, nil
	})
	id, spec := e.identity("lost")
	_, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	if verdict.CodeOf(err) != verdict.CodeFenceLost {
		t.Fatalf("err %v", err)
	}
	mu.Lock()
	if len(after) != 0 {
		t.Fatalf("tmux commands after the fence was lost: %v", after)
	}
	lost = false
	mu.Unlock()
	if rec := lastVerdict(t, e, id); rec.Verdict != verdict.VerdictFailed || rec.Evidence["compensation"] != compNone {
		t.Fatalf("verdict %+v", rec)
	}
	withFaults(e, nil)
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	if err != nil || res.Status != "published" {
		t.Fatalf("second create %+v %v", res, err)
	}
	if s := e.sessions(id.Digest()); len(s) != 1 || s[0] != res.Session.ID {
		t.Fatalf("sessions %v", s)
	}
}

// deadlineTmux records, for each command, whether its context's deadline is within
// bound of the moment it was sent (a deadline comparison, not a measured duration);
// with failTag it refuses the state tag, so compensation runs too.
type deadlineTmux struct {
	tmuxAPI
	bound   time.Duration
	failTag bool
	stuck   string // a command that never gets an answer (blocks until its deadline)
	mu      sync.Mutex
	seen    map[string]bool
	bad     []string
}

func (d *deadlineTmux) CommandIn(ctx context.Context, life tmuxctl.ServerLife, args ...string) (tmuxctl.Reply, error) {
	dl, ok := ctx.Deadline()
	d.mu.Lock()
	if d.seen == nil {
		d.seen = make(map[string]bool)
	}
	d.seen[args[0]] = true
	if !ok || time.Until(dl) > d.bound {
		d.bad = append(d.bad, args[0])
	}
	d.mu.Unlock()
	if args[0] == d.stuck {
		<-ctx.Done()
		return tmuxctl.Reply{}, fmt.Errorf("tmuxctl: %s: no reply: %w", args[0], ctx.Err())
	}
	if d.failTag && args[0] == "set-option" && args[3] == TagState {
		return tmuxctl.Reply{}, &tmuxctl.CommandError{Command: "set-option", Lines: []string{"refused"}}
	}
	return d.tmuxAPI.CommandIn(ctx, life, args...)
}

func (d *deadlineTmux) PipelineIn(ctx context.Context, life tmuxctl.ServerLife, cmds [][]string) ([]tmuxctl.Reply, []error) {
	dl, ok := ctx.Deadline()
	d.mu.Lock()
	if d.seen == nil {
		d.seen = make(map[string]bool)
	}
	stuck := false
	for _, args := range cmds {
		d.seen[args[0]] = true
		if !ok || time.Until(dl) > d.bound {
			d.bad = append(d.bad, args[0])
		}
		stuck = stuck || args[0] == d.stuck
	}
	d.mu.Unlock()
	if stuck {
		<-ctx.Done()
		return make([]tmuxctl.Reply, len(cmds)), errsOf(len(cmds), fmt.Errorf("tmuxctl: pipeline: no reply: %w", ctx.Err()))
	}
	return d.tmuxAPI.PipelineIn(ctx, life, cmds)
}

// errsOf is n copies of err: a pipeline's errors when none of it was answered.
func errsOf(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

func (d *deadlineTmux) report() (map[string]bool, []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seen, d.bad
}
