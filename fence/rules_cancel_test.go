package fence

import (
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestCancelledRestartIsNotASpawnFailure: the publication of a restart whose
// identity a kill stopped meanwhile is refused agent_not_running — nothing
// failed to spawn, and an alert on spawn_failed must not fire for a kill.
func TestCancelledRestartIsNotASpawnFailure(t *testing.T) {
	id := Identity{StateDir: "/s", SessionID: "a"}
	old := Published{Identity: id, Generation: 1, Ended: true, Restart: RestartInfo{State: RestartStopped}}
	cur := Reservation{Identity: id, Generation: 2, StartReason: verdict.ReasonRestart}
	_, err := NewPublished(cur, old, true, time.Now())
	if verdict.CodeOf(err) != verdict.CodeAgentNotRunning {
		t.Fatalf("publish of a cancelled restart: %v", err)
	}
	old.Restart.State = RestartExited
	if _, err := NewPublished(cur, old, true, time.Now()); err != nil {
		t.Fatalf("publish of a restart the identity waits for: %v", err)
	}
}
