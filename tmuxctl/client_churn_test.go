package tmuxctl

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestBackoffPolicy(t *testing.T) {
	const ms = time.Millisecond
	b := backoff{min: 100 * ms, max: 400 * ms}
	within := func(d, base time.Duration) bool { return d >= base*8/10 && d < base*12/10 }
	for i, base := range []time.Duration{100 * ms, 200 * ms, 400 * ms, 400 * ms} {
		if d := b.failed(); !within(d, base) {
			t.Fatalf("failure %d: wait %v, want %v ±20%%", i+1, d, base)
		}
	}
	b.reset()
	if d := b.failed(); !within(d, 100*ms) {
		t.Fatalf("first failure after a healthy connection: wait %v, want min", d)
	}
}

// retryLog records the reconnect delays a Client chose.
type retryLog struct {
	mu     sync.Mutex
	delays []time.Duration
	after  []bool
}

func (l *retryLog) hook(d time.Duration, afterHealthy bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.delays = append(l.delays, d)
	l.after = append(l.after, afterHealthy)
}

func (l *retryLog) get() ([]time.Duration, []bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.delays...), append([]bool(nil), l.after...)
}

// runCollecting collects c.Events(), starts c.Run and stops it (checking no child is left) at cleanup.
func runCollecting(t *testing.T, c *Client) *eventLog {
	t.Helper()
	evs := collect(c)
	ctx, cancel := context.WithCancel(bg())
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
		<-evs.done
		noChildrenLeft(t)
	})
	return evs
}

// The hardening case: the control client is killed (by pid) or its session
// is killed, round after round. Each loss of a connection that served is
// retried at once (the chosen delay is 0, whatever ReconnectMax is), every
// round reconnects to the same server life, and Reconnects counts exactly
// one per round.
func TestClientReconnectsAtOnceAfterChurn(t *testing.T) {
	cfg := testConfig(t) // default backoff: 100ms doubling to 5s
	c := NewClient(cfg)
	var rl retryLog
	c.retried = rl.hook
	evs := runCollecting(t, c)
	wctx, wcancel := context.WithTimeout(bg(), 30*time.Second)
	defer wcancel()
	first, err := c.WaitConnected(wctx)
	if err != nil {
		t.Fatal(err)
	}
	// A second session keeps the server alive when the control session dies.
	tmuxRun(t, cfg.Socket, "new-session", "-d", "-s", "keep", "cat")
	const rounds = 20
	for i := 0; i < rounds; i++ {
		info, err := c.WaitConnected(wctx)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		// As the census does at every Connected: the connection serves.
		if _, err := c.CommandIn(bg(), info.ServerLife, "display-message", "-p", "x"); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if i%2 == 0 {
			if err := syscall.Kill(info.ClientPID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		} else {
			tmuxRun(t, cfg.Socket, "kill-session", "-t", "skc-control") // the default name, as a human types it
		}
		waitFor(t, "reconnect", func() bool {
			now, ok := c.Info()
			return ok && now.ClientPID != info.ClientPID
		})
		if now, _ := c.Info(); now.ServerLife != first.ServerLife {
			t.Fatalf("round %d: server life changed %+v → %+v", i, first.ServerLife, now.ServerLife)
		}
	}
	if n := c.Reconnects(); n != rounds {
		t.Fatalf("Reconnects = %d, want %d", n, rounds)
	}
	// Info shows the new connection before its Connected event has reached
	// the collector: wait for the event, then count exactly.
	waitFor(t, "the last Connected event", func() bool { return len(evs.kinds(Connected)) >= rounds+1 })
	if n := len(evs.kinds(Connected)); n != rounds+1 {
		t.Fatalf("%d Connected events, want %d", n, rounds+1)
	}
	delays, after := rl.get()
	if len(delays) != rounds {
		t.Fatalf("%d retries for %d losses: %v", len(delays), rounds, delays)
	}
	for i := range delays {
		if delays[i] != 0 || !after[i] {
			t.Fatalf("retry %d: delay %v after healthy %v, want an immediate retry", i, delays[i], after[i])
		}
	}
}

// A connection that ends before it served counts as a failure: the waits
// grow (a hook killing every new control client must not make us spin).
func TestClientBacksOffWhenConnectionsNeverServe(t *testing.T) {
	cfg := testConfig(t)
	cfg.ReconnectMin, cfg.ReconnectMax = 20*time.Millisecond, 40*time.Millisecond
	c := NewClient(cfg)
	c.healthyAfter = time.Hour // only a reply makes a connection healthy here
	var rl retryLog
	c.retried = rl.hook
	runCollecting(t, c)
	wctx, wcancel := context.WithTimeout(bg(), 30*time.Second)
	defer wcancel()
	if _, err := c.WaitConnected(wctx); err != nil {
		t.Fatal(err)
	}
	tmuxRun(t, cfg.Socket, "new-session", "-d", "-s", "keep", "cat")
	for i := 0; i < 3; i++ {
		info, err := c.WaitConnected(wctx)
		if err != nil {
			t.Fatal(err)
		}
		tmuxRun(t, cfg.Socket, "kill-session", "-t", info.ControlSessionID)
		waitFor(t, "reconnect", func() bool {
			now, ok := c.Info()
			return ok && now.ClientPID != info.ClientPID
		})
	}
	delays, after := rl.get()
	if len(delays) < 3 {
		t.Fatalf("retries %v", delays)
	}
	want := []time.Duration{20 * time.Millisecond, 40 * time.Millisecond, 40 * time.Millisecond}
	for i, base := range want {
		if after[i] || delays[i] < base*8/10 || delays[i] >= base*12/10 {
			t.Fatalf("retry %d: delay %v after healthy %v, want %v ±20%%", i, delays[i], after[i], base)
		}
	}
}
