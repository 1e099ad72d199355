package lifecycle

import (
	"bytes"
	"context"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/verdict"

	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

// TestReconcileEndsMissedSessions: after the change feed lost changes (Resync), the
// published sessions that are gone from live tmux get their ended verdict.
func TestReconcileEndsMissedSessions(t *testing.T) {
	e := startEnv(t, "", "", true) // no Run: the feed is "lost"
	id, res := e.create(t, "reconcile")
	if out, err := tmuxtest.Command("-S", e.socket, "kill-session", "-t", res.Session.ID).CombinedOutput(); err != nil {
		t.Fatalf("kill-session: %v %s", err, out)
	}
	waitFor(t, "session gone", func() bool { return len(e.sessions(id.Digest())) == 0 })
	e.m.reconcile(context.Background())
	rec := e.ended(t, id)
	if rec.Reason != verdict.ReasonTmuxSessionMissing || rec.ExitKind == verdict.ExitKindCleanup {
		t.Fatalf("ended %+v", rec)
	}
}

// TestServerExitEndsEverySession: when the tmux server dies, every published
// session ends with reason server_exited, once.
func TestServerExitEndsEverySession(t *testing.T) {
	e := startEnv(t, "", "", false)
	id1, _ := e.create(t, "srv1")
	id2, _ := e.create(t, "srv2")
	if out, err := tmuxtest.Command("-S", e.socket, "kill-server").CombinedOutput(); err != nil {
		t.Fatalf("kill-server: %v %s", err, out)
	}
	for _, rec := range []verdict.Record{e.ended(t, id1), e.ended(t, id2)} {
		if rec.Reason != verdict.ReasonServerExited {
			t.Fatalf("ended %+v", rec)
		}
	}
}

func TestMetricsCountOutcomes(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec := e.identity("metrics")
	for i := 0; i < 2; i++ {
		if _, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec}); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	if err := e.reg.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`skc_creates_total{outcome="published"} 1`, `skc_creates_total{outcome="existing"} 1`,
		`skc_create_duration_seconds_count{outcome="published"} 1`} {
		if !bytes.Contains(b.Bytes(), []byte(want)) {
			t.Errorf("metrics lack %s:\n%s", want, b.String())
		}
	}
}

// TestRemainOnExitIsNotExisting: with remain-on-exit on (a user's tmux config), a
// dead agent's pane stays; it is ended (agent_exited, with its status) and removed,
// never answered as an existing session.
func TestRemainOnExitIsNotExisting(t *testing.T) {
	e := startEnv(t, "", "", false)
	if out, err := tmuxtest.Command("-S", e.socket, "set-option", "-g", "remain-on-exit", "on").CombinedOutput(); err != nil {
		t.Fatalf("set remain-on-exit: %v %s", err, out)
	}
	id, res := e.create(t, "remain", "agent", "exit", "3")
	rec := e.ended(t, id)
	if rec.Reason != verdict.ReasonAgentExited || rec.Exit == nil || rec.Exit.Status == nil || *rec.Exit.Status != 3 {
		t.Fatalf("ended %+v exit %+v", rec, rec.Exit)
	}
	waitFor(t, "dead session removed", func() bool { return len(e.sessions(id.Digest())) == 0 })
	_, again := e.create(t, "remain", "agent", "sleep")
	if again.Status != "published" || again.Session.ID == res.Session.ID {
		t.Fatalf("re-create %+v", again)
	}
}
