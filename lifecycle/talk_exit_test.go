package lifecycle

import (
	"context"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestTalkWaitExitEndedByIDAndRenamed: wait --exit on a session that has
// ended answers with its ended verdict by each name it could be named by
// while it lived — its $id, the name a person gave it by hand (the last one
// `ls` showed), the name it was created with — as a wait begun before the
// end would have: by $id and by the hand-given name it was not_found.
// Found outside-in.
func TestTalkWaitExitEndedByIDAndRenamed(t *testing.T) {
	e := startEnv(t, "", "", false)
	ref, _ := e.echoSession(t, "exitnames")
	ctx := context.Background()
	show, err := e.m.Show(ctx, ref)
	if err != nil || show.Session == nil {
		t.Fatalf("show: %+v %v", show, err)
	}
	id := show.Session.ID
	if out, err := tmuxtest.Command("-S", e.socket, "rename-session", "-t", id, "by-hand").CombinedOutput(); err != nil {
		t.Fatalf("rename-session: %v %s", err, out)
	}
	waitFor(t, "the census lists the new name", func() bool {
		s, ok := e.m.census.ByName("by-hand")
		return ok && s.ID == id
	})
	if _, err := e.m.Kill(ctx, Ref{Name: "by-hand"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{id, "by-hand", ref.Name} {
		res, err := e.m.Wait(ctx, Ref{Name: name}, WaitRequest{Exit: true})
		if err != nil || res.Status != "exited" || res.Verdict == nil || res.Verdict.Verdict != verdict.VerdictEnded ||
			res.Verdict.Session == nil || res.Verdict.Session.ID != id {
			t.Fatalf("wait --exit %q on the ended session: %+v %v", name, res, err)
		}
	}
	if _, err := e.m.Wait(ctx, Ref{Name: "by-hand-not"}, WaitRequest{Exit: true}); codeOf(err) != verdict.CodeNotFound {
		t.Fatalf("wait --exit on a name that never was: %v", err)
	}
}
