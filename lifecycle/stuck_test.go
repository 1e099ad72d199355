package lifecycle

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestStuckTmuxFailsWithinCommandDeadline: with the tmux server stopped (SIGSTOP,
// a really stuck tmux) a create's new-session gets no answer; it fails with
// tmux_unavailable when that one command's deadline passes — not the saga's —
// and, its outcome unknown, abandons the row. Once tmux runs again, the next
// create recovers the row (the attempt's session is an orphan) and publishes one
// session.
func TestStuckTmuxFailsWithinCommandDeadline(t *testing.T) {
	holdAbandoned(t) // the next create decides the row here
	e := startEnv(t, "", "", false)
	e.m.cmdTimeout = 300 * time.Millisecond // no Create has run yet
	cont := stopTmux(t, e)
	id, spec := e.identity("stuck")
	_, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	cont()
	if verdict.CodeOf(err) != verdict.CodeTmuxUnavailable || !strings.Contains(err.Error(), "did not answer new-session") {
		t.Fatalf("create on a stuck tmux: %v", err)
	}
	rec := lastVerdict(t, e, id)
	if rec.Verdict != verdict.VerdictFailed || rec.Evidence["compensation"] != compAbandoned {
		t.Fatalf("verdict %+v", rec)
	}
	rows, _ := e.store.Reservations(context.Background())
	if len(rows) != 1 || !rows[0].Abandoned {
		t.Fatalf("rows %+v", rows)
	}
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: 5 * time.Second})
	if err != nil || res.Status != verdict.VerdictPublished {
		t.Fatalf("create after tmux resumed: %+v %v", res, err)
	}
	waitFor(t, "one session of the identity", func() bool {
		s := e.sessions(id.Digest())
		return len(s) == 1 && s[0] == res.Session.ID
	})
}

// stopTmux stops e's tmux server (SIGSTOP: a really stuck tmux) and returns
// the func that lets it run again, once (also at t's end).
func stopTmux(t *testing.T, e *env) func() {
	info, _ := e.census.Info()
	if err := syscall.Kill(info.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	cont := func() { once.Do(func() { _ = syscall.Kill(info.PID, syscall.SIGCONT) }) }
	t.Cleanup(cont)
	return cont
}

// holdAbandoned keeps the daemon's own retry (abandoned.go) from deciding an
// abandoned row during t: the test looks at the row, or leaves it to a create.
// Called before startEnv, so that the value is restored after the manager's
// shutdown (cleanups run last first).
func holdAbandoned(t *testing.T) {
	d := abandonedRetryFirst
	abandonedRetryFirst = time.Hour
	t.Cleanup(func() { abandonedRetryFirst = d })
}

// TestAbandonedAttemptDecidedOnceTmuxAnswers: a create abandoned because tmux
// was stuck leaves its session behind once tmux runs again (the new-session
// ran late); the daemon decides its own abandoned row as soon as tmux answers,
// without a next create of the identity: the session is an orphan, killed and
// proven gone, the row released with a verdict — nothing of it is left.
func TestAbandonedAttemptDecidedOnceTmuxAnswers(t *testing.T) {
	e := startEnv(t, "", "", false)
	e.m.cmdTimeout = 300 * time.Millisecond
	cont := stopTmux(t, e)
	id, spec := e.identity("abandoned")
	_, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	if verdict.CodeOf(err) != verdict.CodeTmuxUnavailable {
		t.Fatalf("create on a stuck tmux: %v", err)
	}
	cont()
	e.m.cmdTimeout = 10 * time.Second // tmux answers again
	waitFor(t, "the abandoned row decided", func() bool {
		rows, err := e.store.Reservations(context.Background())
		return err == nil && len(rows) == 0
	})
	rec := lastVerdict(t, e, id)
	t.Logf("decided: %s %s %v", rec.Verdict, rec.Reason, rec.Evidence)
	if rec.Action != verdict.ActionRecover {
		t.Fatalf("last verdict %+v, want the recovery's", rec)
	}
	out, _ := tmuxtest.Command("-S", e.socket, "list-sessions", "-F", "#{session_name}").CombinedOutput()
	for _, l := range strings.Fields(string(out)) {
		if l != "skc-control" {
			t.Fatalf("the attempt's session is left: %q", out)
		}
	}
}

// TestEverySagaCommandHasItsOwnDeadline: each tmux command of the saga and of its
// compensation carries a deadline no later than the per-command bound, even though
// the saga's own deadline is far later.
func TestEverySagaCommandHasItsOwnDeadline(t *testing.T) {
	e := startEnv(t, "", "", false)
	dt := &deadlineTmux{tmuxAPI: e.m.tmux, bound: e.m.cmdTimeout, failTag: true}
	e.m.tmux = dt
	id, spec := e.identity("deadlines")
	if _, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec}); verdict.CodeOf(err) != verdict.CodeTagFailed {
		t.Fatalf("create: %v", err)
	}
	seen, bad := dt.report()
	for _, want := range []string{"new-session", "set-option", "kill-session", "has-session"} {
		if !seen[want] {
			t.Errorf("%s not sent (seen %v)", want, seen)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("commands without their own deadline: %v", bad)
	}
}

// TestStuckTagAbandonsAtOnce: a set-option that gets no answer fails the create
// with tmux_unavailable after its own deadline; a kill could not be confirmed by a
// stuck tmux either, so the row is abandoned for recovery without trying.
func TestStuckTagAbandonsAtOnce(t *testing.T) {
	e := startEnv(t, "", "", false)
	e.m.cmdTimeout = 200 * time.Millisecond
	dt := &deadlineTmux{tmuxAPI: e.m.tmux, bound: e.m.cmdTimeout, stuck: "set-option"}
	e.m.tmux = dt
	id, spec := e.identity("stucktag")
	_, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	if verdict.CodeOf(err) != verdict.CodeTmuxUnavailable || !strings.Contains(err.Error(), "did not answer set-option") {
		t.Fatalf("create: %v", err)
	}
	if rec := lastVerdict(t, e, id); rec.Evidence["compensation"] != compAbandoned {
		t.Fatalf("verdict %+v", rec)
	}
	if seen, _ := dt.report(); seen["kill-session"] {
		t.Fatal("compensation sent kill-session to a stuck tmux")
	}
}
