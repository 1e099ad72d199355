package verdict

import (
	"errors"
	"fmt"
	"testing"
)

// TestErrorfSaysItsCodeOnce: a cause of the same code does not repeat the
// code inside the message (found outside-in: "fence_unavailable: fence …"
// in a fence_unavailable error's message); a cause of another code keeps it.
func TestErrorfSaysItsCodeOnce(t *testing.T) {
	inner := Errorf(CodeFenceUnavailable, nil, "fence mark_ended: down")
	e := Errorf(CodeFenceUnavailable, nil, "stop: %w", fmt.Errorf("kill: %w", inner))
	if e.Message != "stop: kill: fence mark_ended: down" || e.Error() != "fence_unavailable: stop: kill: fence mark_ended: down" {
		t.Fatalf("message %q, error %q", e.Message, e.Error())
	}
	var got *Error
	if !errors.As(e.Err, &got) || got != inner {
		t.Fatalf("the cause is no longer reachable: %v", e.Err)
	}
	other := Errorf(CodeTagFailed, nil, "tags: %w", Errorf(CodeTmuxUnavailable, nil, "no server"))
	if other.Message != "tags: tmux_unavailable: no server" {
		t.Fatalf("another code's cause: %q", other.Message)
	}
}
