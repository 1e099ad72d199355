package tmuxctl

import (
	"errors"
	"testing"
)

// TestPipelineOrderAndErrors: a pipeline's commands run in the order given
// (the rename is seen by the command after it), one refused in the middle
// answers an %error of its own and does not stop the next, and the reply
// numbers grow in wire order.
func TestPipelineOrderAndErrors(t *testing.T) {
	c := dialT(t, testConfig(t))
	drain(c)
	if _, err := c.Command(bg(), "new-session", "-d", "-s", "pipe-a"); err != nil {
		t.Fatal(err)
	}
	replies, errs := c.Pipeline(bg(), [][]string{
		{"rename-session", "-t", "pipe-a", "pipe-b"},
		{"set-option", "-t", "pipe-b", "@k", "v"},
		{"kill-session", "-t", "no-such-session"},
		{"show-options", "-v", "-t", "pipe-b", "@k"},
	})
	for i, want := range []bool{true, true, false, true} {
		if (errs[i] == nil) != want {
			t.Fatalf("command %d: %v", i, errs[i])
		}
	}
	var ce *CommandError
	if !errors.As(errs[2], &ce) {
		t.Fatalf("the refused command: %v, want a CommandError", errs[2])
	}
	if len(replies[3].Lines) != 1 || replies[3].Lines[0] != "v" {
		t.Fatalf("show-options after the rename: %q", replies[3].Lines)
	}
	if n := replies; !(n[0].Number < n[1].Number && n[1].Number < n[3].Number) {
		t.Fatalf("reply numbers out of wire order: %d, %d, %d", n[0].Number, n[1].Number, n[3].Number)
	}
}

// TestPipelineRefusesSubscriptions: a subscription change is Command's
// alone; a pipeline with one sends nothing.
func TestPipelineRefusesSubscriptions(t *testing.T) {
	c := dialT(t, testConfig(t))
	drain(c)
	_, errs := c.Pipeline(bg(), [][]string{
		{"set-option", "-g", "@k", "v"},
		{"refresh-client", "-B", "x::#{pane_id}"},
	})
	if errs[0] == nil || errs[1] == nil {
		t.Fatalf("errs %v", errs)
	}
	r, err := c.Command(bg(), "show-options", "-gv", "@k")
	if err == nil && len(r.Lines) > 0 && r.Lines[0] == "v" {
		t.Fatal("a refused pipeline was sent")
	}
}
