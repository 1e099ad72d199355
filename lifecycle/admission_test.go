package lifecycle

import (
	"context"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// heldTmux holds every new-session until release is closed, telling held when
// the first one arrives.
type heldTmux struct {
	tmuxAPI
	held    chan struct{}
	release chan struct{}
}

func (h *heldTmux) CommandIn(ctx context.Context, life tmuxctl.ServerLife, args ...string) (tmuxctl.Reply, error) {
	if args[0] == "new-session" {
		select {
		case h.held <- struct{}{}:
		default:
		}
		<-h.release
	}
	return h.tmuxAPI.CommandIn(ctx, life, args...)
}

// TestCreatesBeyondTheBoundAreBusy: with the in-flight bound reached, a create is
// refused busy at once — no row, no session, no state — and once the in-flight
// create finishes, creates are admitted again.
func TestCreatesBeyondTheBoundAreBusy(t *testing.T) {
	e := startEnv(t, "", "", false)
	e.m.slots = make(chan struct{}, 1) // no Create has run yet
	h := &heldTmux{tmuxAPI: e.m.tmux, held: make(chan struct{}, 1), release: make(chan struct{})}
	e.m.tmux = h
	first, spec1 := e.identity("first")
	done := make(chan error, 1)
	go func() {
		_, err := e.m.Create(context.Background(), CreateRequest{Identity: first, Spec: spec1})
		done <- err
	}()
	<-h.held // the first create is in its saga
	id, spec := e.identity("second")
	_, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	if verdict.CodeOf(err) != verdict.CodeBusy {
		t.Fatalf("create beyond the bound: %v, want busy", err)
	}
	if c := verdict.Classify(verdict.CodeOf(err)); c.HTTP != 503 || c.Exit != 75 {
		t.Fatalf("busy classified %+v", c)
	}
	if rows, err := e.store.Reservations(context.Background()); err != nil || len(rows) != 1 || rows[0].Identity.SessionID != "first" {
		t.Fatalf("rows %+v %v: want the first create's only", rows, err)
	}
	if s := e.sessions(id.Digest()); len(s) != 0 {
		t.Fatalf("sessions of the refused identity: %v", s)
	}
	if _, ok, err := e.store.PublishedFor(context.Background(), id); err != nil || ok {
		t.Fatalf("refused identity published: %v %v", ok, err)
	}
	close(h.release)
	if err := <-done; err != nil {
		t.Fatalf("the in-flight create: %v", err)
	}
	if res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec}); err != nil || res.Status != verdict.VerdictPublished {
		t.Fatalf("create after the bound cleared: %+v %v", res, err)
	}
}
