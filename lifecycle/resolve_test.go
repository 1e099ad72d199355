package lifecycle

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/sqlite"
	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
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
		if out, err := tmuxtest.Command(append([]string{"-S", e.socket}, args...)...).CombinedOutput(); err != nil {
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

// TestReclaimInPlaceIsRecorded: a create that meets a dead owner's row at
// phase reserved (no child could exist; Reserve replaces it in place) writes a
// reclaimed verdict naming the displaced reservation before its published one.
func TestReclaimInPlaceIsRecorded(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec := e.identity("reclaim")
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	inc, err := fence.Incarnation(os.Getpid()) // this boot's, for a pid that is gone: dead
	if err != nil {
		t.Fatal(err)
	}
	dead, err := sqlite.Open(filepath.Join(e.home, "fence.sqlite"), fence.Options{
		Self: func() (int, string, error) { return gone.Process.Pid, inc, nil }})
	if err != nil {
		t.Fatal(err)
	}
	rr, err := dead.Reserve(context.Background(), id, spec)
	dead.Close()
	if err != nil || rr.Outcome != fence.Reserved {
		t.Fatalf("planting a dead owner's row: %+v %v", rr, err)
	}
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil || res.Status != "published" {
		t.Fatalf("create over a dead owner's row: %+v %v", res, err)
	}
	vs := e.verdicts(id)
	if len(vs) != 2 || vs[0].Verdict != verdict.VerdictReclaimed || vs[0].Reservation == nil ||
		vs[0].Reservation.ID != rr.Reservation.ID || vs[1].Verdict != verdict.VerdictPublished {
		t.Fatalf("verdicts %+v", vs)
	}
}

// TestHandEditedGenerationSaysTheWayOut: a hand-edited @skc-generation makes a
// create answer identity_orphan_unresolved with the kill that clears it, by
// identity (by $id it failed once the reservation tag was removed too); that
// kill works and the next create publishes.
func TestHandEditedGenerationSaysTheWayOut(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, res := e.create(t, "edited")
	if out, err := tmuxtest.Command("-S", e.socket, "set-option", "-t", res.Session.ID, TagGeneration, "99").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	_, spec := e.identity("edited")
	_, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	ve := verdict.AsError(err)
	hint, _ := ve.Details["hint"].(string)
	want := "skc-supervisor kill --state-dir " + shellQuote(id.StateDir) + " --session-id " + shellQuote(id.SessionID)
	if ve.Code != verdict.CodeIdentityOrphanUnresolved || hint != want || !strings.Contains(ve.Message, hint) {
		t.Fatalf("create over an edited generation: %v %v", err, ve.Details)
	}
	if _, err := e.m.Kill(context.Background(), Ref{Identity: &id}); err != nil {
		t.Fatalf("the hinted kill: %v", err)
	}
	if _, again := e.create(t, "edited"); again.Status != "published" {
		t.Fatalf("create after the kill: %+v", again)
	}
}
