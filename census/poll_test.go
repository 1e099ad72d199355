package census

import (
	"strconv"
	"testing"
	"time"
)

// TestPollsInsteadOfSubscribingAtScale: above cfg.pollAbove sessions the
// census drops its tmux subscription and reads every session's segment
// itself (poll.go); a pane's output still moves its activity_at, now through
// the polls alone (no subscription line arrives). Below cfg.pollBelow it
// subscribes again, and the subscription tells the next output. Every wait
// is for a condition.
func TestPollsInsteadOfSubscribingAtScale(t *testing.T) {
	cfg := testConfig()
	cfg.reconcile = time.Hour
	cfg.pollAbove, cfg.pollBelow = 4, 3
	r := newRig(t, &cfg)
	act := r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", "act", "cat")
	var others []string
	for i := 0; i < 4; i++ {
		others = append(others, r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", "p"+strconv.Itoa(i), "sleep 100000"))
	}
	// Two polls: whatever the subscription said before it was dropped has
	// been read by then.
	eventually(t, "the census polling", func() bool { return r.c.Stats().Polls >= 2 })
	lines := r.c.Stats().SubscriptionLines
	moved := func() bool { // types into act's pane (its echo is output) until its activity moves
		before, _ := r.c.ByID(act)
		r.tmux("send-keys", "-t", act, "x")
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if s, ok := r.c.ByID(act); ok && s.Activity.After(before.Activity) {
				return true
			}
			time.Sleep(20 * time.Millisecond)
		}
		return false
	}
	eventually(t, "activity seen by the polls", moved)
	if got := r.c.Stats().SubscriptionLines; got != lines {
		t.Fatalf("%d subscription lines while polling", got-lines)
	}
	for _, id := range others {
		r.tmux("kill-session", "-t", id)
	}
	eventually(t, "the census subscribed again", func() bool {
		return moved() && r.c.Stats().SubscriptionLines > lines
	})
}
