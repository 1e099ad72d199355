package lifecycle

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestIdentityTagRemovedByHand: a live generation whose session lost its
// @skc-identity tag by hand is still reached by its $id and by its identity
// — the fence records that id in this server life — so the way out a
// refused create names (kill '$N') works, and a create then starts afresh.
func TestIdentityTagRemovedByHand(t *testing.T) {
	for _, by := range []string{"id", "identity"} {
		t.Run(by, func(t *testing.T) {
			e := startEnv(t, "", "", false)
			id, res := e.create(t, "untagged-"+by, "agent", "sleep")
			if out, err := tmuxtest.Command("-S", e.socket, "set-option", "-u", "-t", res.Session.ID, census.TagIdentity).CombinedOutput(); err != nil {
				t.Fatalf("set-option -u: %v %s", err, out)
			}
			waitFor(t, "the census sees the tag gone", func() bool {
				s, ok := e.census.ByID(res.Session.ID)
				return ok && s.Identity() == ""
			})
			_, spec := e.identity("untagged-" + by)
			_, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
			if verdict.CodeOf(err) != verdict.CodeIdentityOrphanUnresolved {
				t.Fatalf("create beside the untagged session: %v, want %s", err, verdict.CodeIdentityOrphanUnresolved)
			}
			ref := Ref{Name: res.Session.ID}
			if by == "identity" {
				ref = Ref{Identity: &id}
			}
			wantStripped(t, e, ref, id)
			kr, err := e.m.Kill(boundedCtx(t), ref)
			if err != nil || kr.Verdict.Verdict != verdict.VerdictEnded {
				t.Fatalf("kill by %s: %+v %v", by, kr, err)
			}
			if _, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec}); err != nil {
				t.Fatalf("create after the kill: %v", err)
			}
		})
	}
}

// wantStripped: show (by ref) and ls name the generation living in a session
// whose identity tag was removed by hand — managed, its identity and
// generation from the record — not as an unmanaged session, and not as
// authoritative: the session no longer carries it exactly (found outside-in:
// both showed managed false, no identity, generation 0).
func wantStripped(t *testing.T, e *env, ref Ref, id fence.Identity) {
	t.Helper()
	sr, err := e.m.Show(context.Background(), ref)
	if err != nil || sr.Session == nil {
		t.Fatalf("show: %+v %v", sr, err)
	}
	v := *sr.Session
	if !v.Managed || v.StateDir != id.StateDir || v.SessionID != id.SessionID || v.Generation != 1 || v.Authoritative {
		t.Fatalf("show of the untagged session: %+v", v)
	}
	lr, err := e.m.List(context.Background())
	if err != nil || len(lr.Sessions) != 1 {
		t.Fatalf("ls: %+v %v", lr, err)
	}
	if l := lr.Sessions[0]; !l.Managed || l.SessionID != id.SessionID || l.Generation != 1 || l.Authoritative {
		t.Fatalf("ls of the untagged session: %+v", l)
	}
}

// TestRemainOnExitOffByHandStops: an agent whose window had remain-on-exit
// turned off by hand takes its session with it when it exits; whichever of
// its exit and its session's removal the daemon sees first, no restart
// follows (contract: the restart keeps its session, and that option is how
// it is kept) — it once started the next generation in a new session.
func TestRemainOnExitOffByHandStops(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec, marks := e.restartSpec("roe-off", fence.RestartOnFailure, 100*time.Millisecond, 5, "agent", "sleep")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the agent runs", func() bool {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", res.Session.PanePID))
		return strings.Contains(string(cmd), "agent\x00sleep")
	})
	if out, err := tmuxtest.Command("-S", e.socket, "set-option", "-w", "-t", res.Session.ID+":", "remain-on-exit", "off").CombinedOutput(); err != nil {
		t.Fatalf("set-option: %v %s", err, out)
	}
	if err := syscall.Kill(res.Session.PanePID, syscall.SIGTERM); err != nil { // a failure: on-failure would restart
		t.Fatal(err)
	}
	waitFor(t, "stopped", func() bool {
		p := e.published(id)
		return p.Ended && p.Restart.State == fence.RestartStopped || p.Generation > 1
	})
	if p := e.published(id); p.Generation != 1 || lines(marks) != 0 {
		t.Fatalf("after the agent took its session with it: generation %d, %d resumed runs; want 1 and none", p.Generation, lines(marks))
	}
}

// TestCreateBesideCopiedTags: a second session given a live identity's tags
// by hand makes live tmux contradict itself; a create of that identity is
// refused identity_orphan_unresolved, naming both sessions — not
// tmux_unavailable, which invites a retry that can never succeed.
func TestCreateBesideCopiedTags(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, res := e.create(t, "copied", "agent", "sleep")
	e.spoof(t, "copy", id)
	waitFor(t, "the census sees both", func() bool { return len(e.census.ByIdentity(id.Digest())) == 2 })
	_, spec := e.identity("copied")
	_, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	ve := verdict.AsError(err)
	if ve.Code != verdict.CodeIdentityOrphanUnresolved || !strings.Contains(ve.Error(), res.Session.ID) {
		t.Fatalf("create beside a copy of its tags: %v, want %s naming %s", err, verdict.CodeIdentityOrphanUnresolved, res.Session.ID)
	}
	if p := e.published(id); p.Ended || p.TmuxID != res.Session.ID {
		t.Fatalf("the identity's generation after the refusal: %+v", p)
	}
}

// TestRestartRefusesSpoofedSession: a session given an identity's tags by
// hand is not that identity's session: a restart naming it is not_found, as
// a kill is, and the identity's running generation is left alone.
func TestRestartRefusesSpoofedSession(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, res := e.create(t, "spoofed", "agent", "sleep")
	e.spoof(t, "spoof", id)
	if _, err := e.m.Kill(boundedCtx(t), Ref{Name: "spoof"}); verdict.CodeOf(err) != verdict.CodeNotFound {
		t.Fatalf("kill of the spoof: %v, want not_found", err)
	}
	if _, err := e.m.Restart(boundedCtx(t), Ref{Name: "spoof"}); verdict.CodeOf(err) != verdict.CodeNotFound {
		t.Fatalf("restart of the spoof: %v, want not_found", err)
	}
	if p := e.published(id); p.Generation != 1 || p.Ended || p.Stopping != nil || p.TmuxID != res.Session.ID {
		t.Fatalf("the identity's generation after the refusals: %+v", p)
	}
}

// TestWaitExitOnHandMadeSession: wait --exit on a session made by hand is
// not_found saying it is not a supervised generation, as kill and screen
// say it (found outside-in: it said "no session named").
func TestWaitExitOnHandMadeSession(t *testing.T) {
	e := startEnv(t, "", "", false)
	if out, err := tmuxtest.Command("-S", e.socket, "new-session", "-d", "-s", "hand", "sleep", "1000").CombinedOutput(); err != nil {
		t.Fatalf("new-session: %v %s", err, out)
	}
	waitFor(t, "the census lists the session", func() bool { _, ok := e.census.ByName("hand"); return ok })
	ref := Ref{Name: "hand"}
	_, err := e.m.Wait(boundedCtx(t), ref, WaitRequest{Exit: true})
	_, killErr := e.m.Kill(boundedCtx(t), ref)
	_, screenErr := e.m.Screen(boundedCtx(t), ref, 0, false)
	if verdict.CodeOf(err) != verdict.CodeNotFound || !strings.Contains(err.Error(), "not a running generation supervised") {
		t.Fatalf("wait --exit on a hand-made session: %v", err)
	}
	for _, other := range []error{killErr, screenErr} {
		if other == nil || other.Error() != err.Error() {
			t.Errorf("wait --exit says %v; kill and screen %v, %v", err, killErr, screenErr)
		}
	}
}

// spoof makes a session named name by hand and gives it id's identity and
// generation 1 tags, as a person copying them would; it returns once the
// census shows them.
func (e *env) spoof(t *testing.T, name string, id fence.Identity) {
	t.Helper()
	if out, err := tmuxtest.Command("-S", e.socket, "new-session", "-d", "-s", name, "sleep", "1000").CombinedOutput(); err != nil {
		t.Fatalf("new-session: %v %s", err, out)
	}
	for _, tag := range [][2]string{{census.TagIdentity, id.Digest()}, {census.TagGeneration, "1"}} {
		if out, err := tmuxtest.Command("-S", e.socket, "set-option", "-t", "="+name+":", tag[0], tag[1]).CombinedOutput(); err != nil {
			t.Fatalf("set-option: %v %s", err, out)
		}
	}
	waitFor(t, "the census sees the copied tags", func() bool {
		s, ok := e.census.ByName(name)
		return ok && s.Identity() == id.Digest()
	})
}

// TestKeptSessionTagRemovedByHand: a session kept for its identity's next
// start whose @skc-identity tag was removed by hand is shown as that
// identity's, by $id and in ls as by identity — exited, with its next start,
// not authoritative — not as an unmanaged session (found outside-in: show
// by $id and ls disagreed with show by identity).
func TestKeptSessionTagRemovedByHand(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, res := e.waitingIdentity(t, "keptuntagged")
	if out, err := tmuxtest.Command("-S", e.socket, "set-option", "-u", "-t", res.Session.ID, census.TagIdentity).CombinedOutput(); err != nil {
		t.Fatalf("set-option -u: %v %s", err, out)
	}
	waitFor(t, "the census sees the tag gone", func() bool {
		s, ok := e.census.ByID(res.Session.ID)
		return ok && s.Identity() == ""
	})
	want := func(what string, v *View) {
		t.Helper()
		if v == nil || !v.Managed || v.SessionID != id.SessionID || v.Generation != 1 || v.Authoritative ||
			v.State != StateExited || v.NextStartAt == nil {
			t.Fatalf("%s of the untagged kept session: %+v", what, v)
		}
	}
	sr, err := e.m.Show(context.Background(), Ref{Name: res.Session.ID})
	if err != nil {
		t.Fatal(err)
	}
	want("show by $id", sr.Session)
	lr, err := e.m.List(context.Background())
	if err != nil || len(lr.Sessions) != 1 {
		t.Fatalf("ls: %+v %v", lr, err)
	}
	want("ls", &lr.Sessions[0])
}
