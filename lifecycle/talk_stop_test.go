package lifecycle

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestTalkInputWhileStopping: while a kill or a restart stops a generation
// (its agent ignores SIGTERM, so the stop lasts until its long grace ends),
// input is refused agent_not_running with the stop's reason — it used to be
// "sent" to the agent about to be killed, and lost with it. Found outside-in.
func TestTalkInputWhileStopping(t *testing.T) {
	for _, how := range []string{"kill", "restart"} {
		t.Run(how, func(t *testing.T) {
			e := startEnv(t, "", "", false)
			id, spec, _ := e.restartSpec("stopping-"+how, fence.RestartNever, time.Millisecond, 5, "agent", "ignore")
			spec.StopTimeoutMS = 300000 // the most: the stop lasts the whole test
			res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the agent ready", func() bool { return isReady(res.Session.PanePID) })
			ref := Ref{Name: res.Session.Name}
			stopped := make(chan struct{})
			t.Cleanup(func() {
				// The agent outlives a hangup: its SIGKILL ends the stop (a
				// restart then starts its resume command, which does not).
				_ = unix.Kill(res.Session.PanePID, unix.SIGKILL)
				<-stopped
			})
			go func() {
				defer close(stopped)
				if how == "kill" {
					_, _ = e.m.Kill(context.Background(), ref)
				} else {
					_, _ = e.m.Restart(context.Background(), ref)
				}
			}()
			waitFor(t, "the stop begun", func() bool { return e.published(id).Stopping != nil })
			err = e.m.Input(context.Background(), ref, Input{Text: "for the agent", Enter: true})
			ve := verdict.AsError(err)
			if ve == nil || ve.Code != verdict.CodeAgentNotRunning || ve.Details["stopping"] != true {
				t.Fatalf("input while the generation stops: %v, want agent_not_running (stopping)", err)
			}
			reason, restarting := verdict.ReasonKilledByRequest, false
			if how == "restart" {
				reason, restarting = verdict.ReasonManualRestart, true
			}
			if ve.Details["reason"] != reason || (ve.Details["restarting"] == true) != restarting {
				t.Fatalf("details %v: want reason %s, restarting %v", ve.Details, reason, restarting)
			}
		})
	}
}
