package tmuxctl

import (
	"strings"
	"testing"
	"time"
)

// TestNotificationAfter: a notification carries the number of the last reply
// block read before it. A rename is notified after its own block, possibly
// after later commands' blocks too (tmux queues the notification behind the
// commands of the client's queue), with the session's name at the moment the
// line is written: so a line written before the second rename's block says
// "first", and the last line says "second" after that block.
func TestNotificationAfter(t *testing.T) {
	cfg := testConfig(t)
	c := dialT(t, cfg)
	id := tmuxRun(t, cfg.Socket, "new-session", "-d", "-P", "-F", "#{session_id}", "-s", "victim")
	id = strings.TrimSpace(id)
	cmds := [][]string{
		{"rename-session", "-t", id, "first"},
		{"list-sessions", "-F", "#{session_id} #{session_name}"},
		{"rename-session", "-t", id, "second"},
	}
	reps, errs := c.Pipeline(bg(), cmds)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var got []Notification
	deadline := time.After(30 * time.Second)
	for len(got) < 2 {
		select {
		case n, ok := <-c.Notifications():
			if !ok {
				t.Fatal("notification stream ended")
			}
			if n.Name == NoteSessionRenamed {
				got = append(got, n)
			}
		case <-deadline:
			t.Fatalf("renames not notified: %+v", got)
		}
	}
	for i, n := range got {
		nid, name, err := n.Session()
		want := "second"
		if numLess(n.After, reps[2].Number) {
			want = "first" // written before the second rename ran
		}
		if err != nil || nid != id || name != want {
			t.Errorf("%+v: want %s %s (the name when written)", n, id, want)
		}
		if numLess(n.After, reps[0].Number) || i > 0 && numLess(n.After, got[i-1].After) {
			t.Errorf("%+v: After below the first rename's block %d or the line before", n, reps[0].Number)
		}
	}
	if last := got[len(got)-1]; numLess(last.After, reps[2].Number) {
		t.Errorf("%+v: the last rename's line is not after its block %d", last, reps[2].Number)
	}
	// A command sent now runs after both lines were written.
	rep, err := c.Command(bg(), "display-message", "-p", "x")
	if err != nil {
		t.Fatal(err)
	}
	if !numLess(got[1].After, rep.Number) {
		t.Errorf("a later command's block %d is not above After %d", rep.Number, got[1].After)
	}
}

func numLess(a, b uint64) bool { return int32(uint32(a)-uint32(b)) < 0 }
