package lifecycle

import (
	"context"
	"os/exec"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestResolveNames: a session is reached by its current name after a rename by
// hand, by its $id, by the name it was published under, and by identity; an
// unmanaged session is shown (without identity or verdicts) but not killed; an
// identity without any record is not_found.
func TestResolveNames(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, res := e.create(t, "ren")
	tmux := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("tmux", append([]string{"-S", e.socket}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("tmux %v: %v %s", args, err, out)
		}
	}
	tmux("rename-session", "-t", res.Session.ID, "my-renamed")
	tmux("new-session", "-d", "-s", "by-hand", "sleep 1000")
	ctx := context.Background()
	for _, ref := range []Ref{{Name: "my-renamed"}, {Name: res.Session.ID}, {Name: res.Session.Name}, {Identity: &id}} {
		waitFor(t, "resolve "+ref.Name, func() bool {
			tg, err := e.m.Resolve(ctx, ref)
			return err == nil && tg.Live && tg.Session.ID == res.Session.ID
		})
		sh, err := e.m.Show(ctx, ref)
		if err != nil || sh.Session == nil || sh.Session.ID != res.Session.ID || !sh.Session.Authoritative ||
			verdictList(sh) != "published" {
			t.Fatalf("show %+v: %+v %v", ref, sh, err)
		}
	}
	sh, err := e.m.Show(ctx, Ref{Name: "by-hand"})
	if err != nil || sh.Session == nil || sh.Session.Managed || sh.Reservation != nil || len(sh.Verdicts) != 0 {
		t.Fatalf("show of an unmanaged session: %+v %v", sh, err)
	}
	if _, err := e.m.Kill(ctx, Ref{Name: "by-hand"}); verdict.CodeOf(err) != verdict.CodeNotFound {
		t.Fatalf("kill of an unmanaged session: %v", err)
	}
	if _, err := e.m.Show(ctx, Ref{Name: "by-han"}); verdict.CodeOf(err) != verdict.CodeNotFound {
		t.Fatalf("a prefix of a name: %v", err)
	}
	nobody, _ := e.identity("nobody")
	if _, err := e.m.Show(ctx, Ref{Identity: &nobody}); verdict.CodeOf(err) != verdict.CodeNotFound {
		t.Fatalf("an identity without history: %v", err)
	}
	if _, err := e.m.Kill(ctx, Ref{Name: "my-renamed"}); err != nil {
		t.Fatalf("kill by the current name: %v", err)
	}
	e.ended(t, id)
	// The identity's history outlives its session; the name does not.
	sh, err = e.m.Show(ctx, Ref{Identity: &fence.Identity{StateDir: id.StateDir, SessionID: id.SessionID}})
	if err != nil || sh.Session != nil || verdictList(sh) != "published,ended" {
		t.Fatalf("show of an ended identity: %+v %v", sh, err)
	}
	if _, err := e.m.Show(ctx, Ref{Name: "my-renamed"}); verdict.CodeOf(err) != verdict.CodeNotFound {
		t.Fatalf("show of a killed session: %v", err)
	}
	if _, err := e.m.Kill(ctx, Ref{Identity: &id}); verdict.CodeOf(err) != verdict.CodeNotFound {
		t.Fatalf("kill of an ended identity: %v", err)
	}
}
