package tmuxctl

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

// followEnv starts a server with one session running script and returns its
// config and session id.
func followEnv(t *testing.T, script string) (Config, string) {
	t.Helper()
	cfg := testConfig(t)
	out, err := tmuxtest.Command("-S", cfg.Socket, "-f", "/dev/null", "new-session", "-d", "-P", "-F", "#{session_id}",
		"-x", "80", "-y", "24", "sh", "-c", script).Output()
	if err != nil {
		t.Fatal(err)
	}
	return cfg, strings.TrimSpace(string(out))
}

type collector struct {
	mu     sync.Mutex
	data   bytes.Buffer
	pauses int
	block  chan struct{} // when not nil, the first output blocks until closed
}

func (c *collector) on(ev FollowEvent) {
	if c.block != nil {
		<-c.block // closed, never reset: reads stay race-free
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ev.Paused {
		c.pauses++
	}
	c.data.Write(ev.Data)
}

func (c *collector) snapshot() (string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.data.String(), c.pauses
}

func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFollowerOutputAndEnd: a follower gets the pane's exact bytes, ends with
// its session, and leaves no goroutine behind (TestMain's leak check).
func TestFollowerOutputAndEnd(t *testing.T) {
	cfg, id := followEnv(t, `read x; printf 'a\\b\001\377é\n'; read y`)
	c := &collector{}
	f, err := DialFollower(context.Background(), cfg, id, 5, c.on)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := tmuxtest.Command("-S", cfg.Socket, "send-keys", "-t", id, "Enter").Run(); err != nil {
		t.Fatal(err)
	}
	waitCond(t, "output", func() bool {
		s, _ := c.snapshot()
		return strings.Contains(s, "a\\b\x01\xffé\r\n")
	})
	if err := tmuxtest.Command("-S", cfg.Socket, "kill-session", "-t", id).Run(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("follower did not end with its session")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFollowerPause: a reader that stops reading is paused by tmux, not
// dropped; the Follower reports the pause, asks tmux to continue, and output
// flows again.
func TestFollowerPause(t *testing.T) {
	cfg, id := followEnv(t, `yes tick`)
	c := &collector{block: make(chan struct{})}
	f, err := DialFollower(context.Background(), cfg, id, 1, c.on)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The reader is stuck in the callback while `yes` fills the pipe, so
	// tmux's queue for the pane ages past pause-after (1 s). This drives the
	// condition; the assertion below waits for its effect, with no deadline
	// on how soon.
	time.Sleep(2500 * time.Millisecond)
	close(c.block)
	waitCond(t, "the pause reported", func() bool { _, p := c.snapshot(); return p > 0 })
	s1, _ := c.snapshot()
	waitCond(t, "output flowing after the pause", func() bool { s2, _ := c.snapshot(); return len(s2) > len(s1)+4096 })
	if err := tmuxtest.Command("-S", cfg.Socket, "kill-session", "-t", id).Run(); err != nil {
		t.Fatal(err)
	}
	<-f.Done()
}

// TestFollowerNoSession: attaching to a session that does not exist fails
// with tmux's error, and leaves nothing running.
func TestFollowerNoSession(t *testing.T) {
	cfg, _ := followEnv(t, "sleep 100")
	_, err := DialFollower(context.Background(), cfg, "$999", 5, func(FollowEvent) {})
	var ce *CommandError
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want a CommandError", err)
	}
}
