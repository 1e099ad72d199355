package tmuxctl

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"
)

// eventLog collects a Client's events in the background.
type eventLog struct {
	mu   sync.Mutex
	evs  []Event
	done chan struct{}
}

func collect(c *Client) *eventLog {
	l := &eventLog{done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for ev := range c.Events() {
			l.mu.Lock()
			l.evs = append(l.evs, ev)
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *eventLog) kinds(k EventKind) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Event
	for _, ev := range l.evs {
		if ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
}

func TestClientReconnectsAfterServerKilled(t *testing.T) {
	cfg := testConfig(t)
	cfg.ReconnectMin, cfg.ReconnectMax = 20*time.Millisecond, 200*time.Millisecond
	c := NewClient(cfg)
	if _, err := c.Command(bg(), "display-message", "-p", "x"); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("before Run: %v", err)
	}
	evs := collect(c)
	ctx, cancel := context.WithCancel(bg())
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
		<-evs.done
		noChildrenLeft(t)
	}()
	wctx, wcancel := context.WithTimeout(bg(), 30*time.Second)
	defer wcancel()
	life1, err := c.WaitConnected(wctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CommandIn(bg(), life1.ServerLife, "display-message", "-p", "ok"); err != nil {
		t.Fatal(err)
	}
	// A command pending when the server dies fails with ErrServerExited.
	if _, err := c.Command(bg(), "wait-for", "skc-never"); err != nil {
		t.Fatal(err)
	}
	pend := make(chan error, 1)
	go func() {
		_, err := c.Command(bg(), "display-message", "-p", "pending")
		pend <- err
	}()
	waitFor(t, "pending command", func() bool {
		return len(pend) == 1 || c.pendingCount() == 1
	})
	if err := syscall.Kill(life1.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-pend; !errors.Is(err, ErrServerExited) {
		t.Fatalf("pending: %v", err)
	}
	waitFor(t, "reconnect to a new server life", func() bool {
		info, ok := c.Info()
		return ok && info.PID != life1.PID
	})
	life2, _ := c.Info()
	if c.Reconnects() != 1 {
		t.Fatalf("Reconnects = %d", c.Reconnects())
	}
	if _, err := c.CommandIn(bg(), life1.ServerLife, "kill-session", "-t", "$0"); !errors.Is(err, ErrLifeChanged) {
		t.Fatalf("CommandIn old life: %v", err)
	}
	waitFor(t, "second Connected event", func() bool { return len(evs.kinds(Connected)) == 2 })
	con := evs.kinds(Connected)
	if con[0].Info.ServerLife != life1.ServerLife || con[1].Info.ServerLife != life2.ServerLife {
		t.Fatalf("Connected events %+v, want lives %+v then %+v", con, life1, life2)
	}
	dis := evs.kinds(Disconnected)
	if len(dis) != 1 || !errors.Is(dis[0].Err, ErrServerExited) {
		t.Fatalf("Disconnected events %+v", dis)
	}
	// Order: Connected(1) … Notify … Disconnected(1) Connected(2).
	evs.mu.Lock()
	var order []EventKind
	for _, ev := range evs.evs {
		if ev.Kind != Notify {
			order = append(order, ev.Kind)
		}
	}
	evs.mu.Unlock()
	if len(order) < 3 || order[0] != Connected || order[1] != Disconnected || order[2] != Connected {
		t.Fatalf("event order %v", order)
	}
	if notes := evs.kinds(Notify); len(notes) == 0 {
		t.Fatal("no notifications forwarded")
	}
}

func TestClientStopsCleanly(t *testing.T) {
	cfg := testConfig(t)
	c := NewClient(cfg)
	evs := collect(c)
	ctx, cancel := context.WithCancel(bg())
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(ctx) }()
	info, err := c.WaitConnected(bg())
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	<-evs.done
	if _, ok := c.Info(); ok {
		t.Fatal("still connected after Run returned")
	}
	if _, err := c.WaitConnected(bg()); !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitConnected after stop: %v", err)
	}
	if !waitGone(info.ClientPID, 10*time.Second) {
		t.Fatal("client process left")
	}
	dis := evs.kinds(Disconnected)
	if len(dis) != 1 || !errors.Is(dis[0].Err, ErrClosed) {
		t.Fatalf("Disconnected %+v", dis)
	}
	noChildrenLeft(t)
}

func TestClientBadConfig(t *testing.T) {
	c := NewClient(Config{})
	if err := c.Run(bg()); err == nil {
		t.Fatal("Run without a socket succeeded")
	}
	if _, ok := <-c.Events(); ok { // closed by Run, nothing to drain
		t.Fatal("event on a client that never connected")
	}
	if _, err := c.WaitConnected(bg()); !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitConnected: %v", err)
	}
}
