package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestStaleTagsJoinByTmuxID: a session the census listed before the saga set its
// tags is shown as the published generation living in that tmux id (managed,
// authoritative), not as an unmanaged session; a session with any @skc-* tag is
// judged by its tags as before.
func TestStaleTagsJoinByTmuxID(t *testing.T) {
	s := census.Session{ID: "$7", Name: "skc-x", PanePID: 42, Created: time.Unix(1700000000, 0), Tags: map[string]string{}}
	p := fence.Published{Identity: fence.Identity{StateDir: "/s", SessionID: "a"}, Generation: 3,
		TmuxID: "$7", SessionName: "skc-x", StateFile: "/s/a.jsonl", Label: "L"}
	if !staleTags(&s) {
		t.Fatal("a session without tags is not stale")
	}
	v := publishedView(&s, p)
	if !v.Managed || !v.Authoritative || v.Generation != 3 || v.SessionID != "a" || v.StateFile != "/s/a.jsonl" ||
		v.Label != "L" || v.PanePID != 42 || v.ID != "$7" {
		t.Fatalf("view %+v", v)
	}
	p.Ended = true
	if publishedView(&s, p).Authoritative {
		t.Fatal("an ended generation is authoritative")
	}
	s.Tags[census.TagGeneration] = "3"
	if staleTags(&s) {
		t.Fatal("a session with an @skc- tag is stale")
	}
}

// TestViewStartingInKeptSession: while the next generation is being started in
// its kept session — tagged with it, not published yet — the session shows
// state starting with the identity's restart count, not as a bare session.
func TestViewStartingInKeptSession(t *testing.T) {
	s := census.Session{ID: "$7", Name: "skc-x", Managed: true, PanePID: 42, Created: time.Unix(1700000000, 0),
		Tags: map[string]string{census.TagGeneration: "4"}}
	p := fence.Published{Identity: fence.Identity{StateDir: "/s", SessionID: "a"}, Generation: 3, TmuxID: "$7",
		Ended: true, Spec: fence.Spec{Restart: fence.RestartAlways},
		Restart: fence.RestartInfo{State: fence.RestartExited, Restarts: 2, Due: time.Unix(1700000100, 0)}}
	v := (&Manager{}).viewOf(&s, &p)
	if v.State != StateStarting || v.Restart != fence.RestartAlways || v.Restarts != 2 || v.Authoritative || v.Generation != 4 {
		t.Fatalf("view %+v", v)
	}
}

// TestWaitExitUnknown: wait --exit on a name nothing of this host ever wore,
// or an identity without a generation, is not_found saying so (it said the
// session "is gone", with an empty name for an identity).
func TestWaitExitUnknown(t *testing.T) {
	e := startEnv(t, "", "", false)
	_, err := e.m.Wait(context.Background(), Ref{Name: "never-was"}, WaitRequest{Exit: true})
	if ve := verdict.AsError(err); ve == nil || ve.Code != verdict.CodeNotFound || !strings.Contains(ve.Message, `no session named "never-was"`) {
		t.Errorf("wait on an unknown name: %v", err)
	}
	id, _ := e.identity("never-created")
	_, err = e.m.Wait(context.Background(), Ref{Identity: &id}, WaitRequest{Exit: true})
	if ve := verdict.AsError(err); ve == nil || ve.Code != verdict.CodeNotFound || !strings.Contains(ve.Message, "no generation to wait for") {
		t.Errorf("wait on an unknown identity: %v", err)
	}
}
