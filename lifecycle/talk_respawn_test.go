package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestTalkAgentsPaneRespawnedReads: after the agent's pane is respawned by
// hand with a person's program (the agent, which ignores the hangup, lives
// on in no pane), what reads the pane answers as screen does — 409
// agent_not_running, agent_pane_missing — and a follow or wait already
// running ends: wait --text matched the person's output (status "text") and
// output --follow streamed it until the census's next reconcile (here: never).
// Found outside-in.
func TestTalkAgentsPaneRespawnedReads(t *testing.T) {
	for _, how := range []string{"wait-text", "follow", "wait-running", "follow-running"} {
		t.Run(how, func(t *testing.T) {
			// Only a talk tells: no reconcile, no census subscription (its
			// read of the session after the follower attached, a second
			// later, would see the respawned pane).
			var agent int
			t.Cleanup(func() { // after the env's: a failed test leaves no agent, which outlives a hangup
				if agent > 0 {
					_ = unix.Kill(agent, unix.SIGKILL)
				}
			})
			e := startEnvWith(t, &env{exitOnly: true}, "", false)
			id, spec, _ := e.restartSpec("respawned-"+how, fence.RestartNever, time.Millisecond, 5, "agent", "ignore")
			spec.StopTimeoutMS = 200
			res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			agent = res.Session.PanePID
			waitFor(t, "the agent ready", func() bool { return isReady(res.Session.PanePID) })
			ref, ctx := Ref{Name: res.Session.Name}, context.Background()
			running := make(chan error, 1)
			var sub *OutputSub
			switch how {
			case "wait-running":
				go func() { _, err := e.m.Wait(ctx, ref, WaitRequest{Text: "PERSON"}); running <- err }()
				waitFor(t, "the wait's follower attached", func() bool { return e.m.Follows() == 1 })
			case "follow-running":
				if sub, err = e.m.FollowOutput(ctx, ref); err != nil {
					t.Fatal(err)
				}
				defer sub.Close()
			}
			if sub != nil || how == "wait-running" {
				// The census re-lists when the follower attaches: done
				// before the respawn, as for a follow begun a while ago,
				// so that only the follow's own sight of the pane tells.
				waitFor(t, "the census sees the follower", func() bool {
					s, ok := e.m.census.ByID(res.Session.ID)
					return ok && s.Attached == 1
				})
			}
			respawnPerson(t, e, res.Session.ID)
			switch how {
			case "wait-text":
				_, err = e.m.Wait(ctx, ref, WaitRequest{Text: "PERSON", Timeout: time.Minute})
			case "follow":
				sub, err = e.m.FollowOutput(ctx, ref)
				if err == nil {
					sub.Close()
				}
			case "wait-running":
				err = <-running
			case "follow-running":
				err = followEnds(t, sub)
			}
			if ve := verdict.AsError(err); how != "follow-running" && (ve == nil || ve.Code != verdict.CodeAgentNotRunning ||
				ve.Details["reason"] != verdict.ReasonAgentPaneMissing) {
				t.Fatalf("%s after the pane was respawned by hand: %v, want agent_not_running (agent_pane_missing)", how, err)
			}
			if rec := e.ended(t, id); rec.Reason != verdict.ReasonAgentPaneMissing {
				t.Fatalf("ended verdict %+v: want reason %s", rec, verdict.ReasonAgentPaneMissing)
			}
		})
	}
}

// respawnPerson respawns session id's pane by hand with a person's program
// that writes PERSON lines, and waits until the pane shows one (read with
// tmux itself: a read of the daemon's would tell it).
func respawnPerson(t *testing.T, e *env, id string) {
	t.Helper()
	person := "while :; do echo PERSON; sleep 0.2; done"
	if out, err := tmuxtest.Command("-S", e.socket, "respawn-pane", "-k", "-t", id, person).CombinedOutput(); err != nil {
		t.Fatalf("respawn-pane: %v %s", err, out)
	}
	waitFor(t, "the person's program writes", func() bool {
		out, err := tmuxtest.Command("-S", e.socket, "capture-pane", "-p", "-t", id).Output()
		return err == nil && strings.Contains(string(out), "PERSON")
	})
}

// followEnds reads sub until its stream ends (nil) or a minute passes, which
// only bounds the failure: the person's program writes on forever.
func followEnds(t *testing.T, sub *OutputSub) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		if _, ok := sub.Next(ctx); !ok {
			if ctx.Err() != nil {
				t.Fatal("the follow went on streaming the person's program")
			}
			return nil
		}
	}
}
