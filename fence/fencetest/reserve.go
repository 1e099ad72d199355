package fencetest

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

func testReserveFresh(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	s := w.Owner(100)
	r := MustReserve(t, s, w.ID("a"), w.Spec("a"))
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(r.ID) {
		t.Fatalf("reservation id %q", r.ID)
	}
	if r.Generation != 1 || r.Phase != fence.PhaseReserved || r.OwnerPID != 100 || r.OwnerIncarnation != "inc-100" {
		t.Fatalf("row %+v", r)
	}
	rows, err := s.Reservations(ctx)
	if err != nil || len(rows) != 1 || rows[0].ID != r.ID || rows[0].Spec.Argv[1] != "--flag" {
		t.Fatalf("reservations %+v %v", rows, err)
	}
	// A second Reserve by the same process while the first is in flight blocks.
	_, err = s.Reserve(ctx, w.ID("a"), w.Spec("a"))
	WantCode(t, err, verdict.CodeIdentityReservedLive)
}

func testReserveOverOtherOwner(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name  string
		live  fence.Live
		phase fence.Phase
		code  string
		want  fence.ReserveOutcome
	}{
		{"alive", fence.Alive, fence.PhaseReserved, verdict.CodeIdentityReservedLive, 0},
		{"unknown", fence.LiveUnknown, fence.PhaseReserved, verdict.CodeIdentityReservedUnknown, 0},
		{"alive_later_phase", fence.Alive, fence.PhaseSpawned, verdict.CodeIdentityReservedLive, 0},
		{"dead_reserved", fence.Dead, fence.PhaseReserved, "", fence.Reserved},
		{"dead_helper_invoked", fence.Dead, fence.PhaseHelperInvoked, "", fence.NeedsRecovery},
		{"dead_tagged", fence.Dead, fence.PhaseTagged, "", fence.NeedsRecovery},
		{"dead_published", fence.Dead, fence.PhasePublished, "", fence.NeedsRecovery},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWorld(t, h)
			a, b := w.Owner(1), w.Owner(2)
			r := MustReserve(t, a, w.ID("x"), w.Spec("x"))
			AdvanceTo(t, a, &r, tc.phase)
			w.Set(1, tc.live)
			res, err := b.Reserve(ctx, w.ID("x"), w.Spec("x"))
			if tc.code != "" {
				WantCode(t, err, tc.code)
				rows, _ := b.Reservations(ctx)
				if len(rows) != 1 || rows[0].ID != r.ID {
					t.Fatalf("a refusal changed the rows: %+v", rows)
				}
				return
			}
			if err != nil || res.Outcome != tc.want {
				t.Fatalf("outcome %s err %v, want %s", res.Outcome, err, tc.want)
			}
			switch tc.want {
			case fence.Reserved: // reclaimed in place: new id, next generation, owner b
				nr := res.Reservation
				if nr.ID == r.ID || nr.Generation != 2 || nr.OwnerPID != 2 || nr.Phase != fence.PhaseReserved {
					t.Fatalf("reclaimed row %+v", nr)
				}
			case fence.NeedsRecovery:
				if res.Abandoned.ID != r.ID || res.Abandoned.Phase != tc.phase {
					t.Fatalf("abandoned %+v", res.Abandoned)
				}
			}
		})
	}
}

func testReserveOwnAbandoned(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	s := w.Owner(1)
	r := MustReserve(t, s, w.ID("x"), w.Spec("x"))
	if err := s.Abandon(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	rows, _ := s.Reservations(ctx)
	if len(rows) != 1 || !rows[0].Abandoned {
		t.Fatalf("abandon must keep the row: %+v", rows)
	}
	// Our own abandoned row at phase reserved: no child, reclaimed directly.
	r2 := MustReserve(t, s, w.ID("x"), w.Spec("x"))
	if r2.ID == r.ID || r2.Generation != 2 {
		t.Fatalf("%+v", r2)
	}
	AdvanceTo(t, s, &r2, fence.PhaseHelperInvoked)
	if err := s.Abandon(ctx, r2.ID); err != nil {
		t.Fatal(err)
	}
	// Past helper_invoked: resolvable, through recovery.
	res, err := s.Reserve(ctx, w.ID("x"), w.Spec("x"))
	if err != nil || res.Outcome != fence.NeedsRecovery || res.Abandoned.ID != r2.ID || !res.Abandoned.Abandoned {
		t.Fatalf("%+v %v", res, err)
	}
	// An abandoned row is no longer ours to advance.
	err = s.Advance(ctx, &r2, fence.PhaseSpawned, fence.Patch{TmuxID: "$1"})
	if !errors.Is(err, fence.ErrFenceLost) {
		t.Fatalf("advance after abandon: %v", err)
	}
}

func testReserveIncarnationUnavailable(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	s, err := w.Open(fence.Options{Self: func() (int, string, error) { return 0, "", errors.New("no /proc") }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Reserve(ctx, w.ID("x"), w.Spec("x"))
	WantCode(t, err, verdict.CodeIdentityIncarnationUnavailable)
}

func testStateFileMismatch(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	a, b := w.Owner(1), w.Owner(2)
	r := MustReserve(t, a, w.ID("x"), w.Spec("x"))
	other := w.Spec("x")
	other.StateFile = filepath.Join(w.Dir, "other.jsonl")
	_, err := b.Reserve(ctx, w.ID("x"), other)
	WantCode(t, err, verdict.CodeIdentityStateFileMismatch)
	// Against the published, not-ended record too.
	AdvanceTo(t, a, &r, fence.PhasePublished)
	if err := a.Release(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	_, err = b.Reserve(ctx, w.ID("x"), other)
	WantCode(t, err, verdict.CodeIdentityStateFileMismatch)
}

func testSymlinkAliasIsSameIdentity(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	alias := filepath.Join(filepath.Dir(w.Dir), "alias")
	if err := os.Symlink(w.Dir, alias); err != nil {
		t.Fatal(err)
	}
	a, b := w.Owner(1), w.Owner(2)
	r := MustReserve(t, a, w.ID("x"), w.Spec("x"))
	spec := SpecFor(alias, "x") // the state file through the alias too
	_, err := b.Reserve(ctx, fence.Identity{StateDir: alias + "/", SessionID: "x"}, spec)
	WantCode(t, err, verdict.CodeIdentityReservedLive)
	canon, err := fence.CanonicalIdentity(fence.Identity{StateDir: alias, SessionID: "x"})
	if err != nil || canon != r.Identity || canon.Digest() != r.Identity.Digest() {
		t.Fatalf("canonical %+v vs %+v (%v)", canon, r.Identity, err)
	}
}

func testPublishedBlocksUntilEnded(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	a, b := w.Owner(1), w.Owner(2)
	r := MustReserve(t, a, w.ID("x"), w.Spec("x"))
	AdvanceTo(t, a, &r, fence.PhaseTagged)
	pub, rec, err := a.Publish(ctx, &r, Record(verdict.VerdictPublished))
	if err != nil || pub.Generation != 1 || rec.Sequence != 1 || r.Phase != fence.PhasePublished {
		t.Fatalf("publish %+v %+v %v", pub, rec, err)
	}
	if pub.SessionName != "skc-"+r.ID || pub.TmuxID != "$3" || pub.ServerPID != 55 {
		t.Fatalf("published evidence %+v", pub)
	}
	if err := a.Advance(ctx, &r, fence.PhasePublished, fence.Patch{}); err != nil { // after Publish: a no-op
		t.Fatalf("advance to published after Publish: %v", err)
	}
	if err := a.Release(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, r.ID); err != nil { // idempotent
		t.Fatal(err)
	}
	res, err := b.Reserve(ctx, w.ID("x"), w.Spec("x"))
	if err != nil || res.Outcome != fence.MaybeExisting || res.Published.Generation != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	// MarkEnded is a compare-and-set on the generation.
	if ok, _, err := b.MarkEnded(ctx, w.ID("x"), 2, Record("ended")); ok || err != nil {
		t.Fatalf("mark wrong generation: %v %v", ok, err)
	}
	ok, rec, err := b.MarkEnded(ctx, w.ID("x"), 1, Record("ended"))
	if !ok || err != nil || rec.Sequence != 2 {
		t.Fatalf("mark ended: %v %+v %v", ok, rec, err)
	}
	if ok, _, _ := b.MarkEnded(ctx, w.ID("x"), 1, Record("ended")); ok {
		t.Fatal("second MarkEnded succeeded")
	}
	r2 := MustReserve(t, b, w.ID("x"), w.Spec("x"))
	if r2.Generation != 2 {
		t.Fatalf("generation %d, want 2", r2.Generation)
	}
	recs, err := b.VerdictsSince(ctx, 0, 0)
	if err != nil || len(recs) != 2 || recs[0].Verdict != "published" || recs[1].Sequence != 2 {
		t.Fatalf("verdicts %+v %v", recs, err)
	}
}

func testGenerationNeverReused(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	s := w.Owner(1)
	for want := uint64(1); want <= 3; want++ {
		r := MustReserve(t, s, w.ID("x"), w.Spec("x"))
		if r.Generation != want {
			t.Fatalf("generation %d, want %d", r.Generation, want)
		}
		if err := s.Release(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
	}
}

func testAdvance(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	a, b := w.Owner(1), w.Owner(2)
	r := MustReserve(t, a, w.ID("x"), w.Spec("x"))
	for _, tc := range []struct {
		name string
		to   fence.Phase
		p    fence.Patch
	}{
		{"unknown phase", fence.Phase(9), fence.Patch{}},
		{"published via advance", fence.PhasePublished, fence.Patch{}},
		{"no attempt name", fence.PhaseHelperInvoked, fence.Patch{}},
		{"attempt name without id", fence.PhaseHelperInvoked, fence.Patch{AttemptName: "skc-other"}},
		{"attempt name with newline", fence.PhaseHelperInvoked, fence.Patch{AttemptName: "skc-" + r.ID + "\n"}},
		{"no tmux id", fence.PhaseSpawned, fence.Patch{}},
		{"bad tmux id", fence.PhaseSpawned, fence.Patch{TmuxID: "@3"}},
	} {
		if err := a.Advance(ctx, &r, tc.to, tc.p); CodeOf(t, err) != verdict.CodeInvalidRequest {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	AdvanceTo(t, a, &r, fence.PhaseSpawned)
	back := r
	back.Phase = fence.PhaseReserved // a stale copy cannot move the row backwards either
	if err := a.Advance(ctx, &back, fence.PhaseHelperInvoked, fence.Patch{AttemptName: "skc-" + r.ID}); CodeOf(t, err) != verdict.CodeInvalidRequest {
		t.Fatalf("backwards: %v", err)
	}
	if err := a.Advance(ctx, &r, fence.PhaseHelperInvoked, fence.Patch{AttemptName: "skc-" + r.ID}); CodeOf(t, err) != verdict.CodeInvalidRequest {
		t.Fatalf("backwards: %v", err)
	}
	// Publish before tagged is refused.
	if _, _, err := a.Publish(ctx, &r, Record("published")); CodeOf(t, err) != verdict.CodeInvalidRequest {
		t.Fatalf("publish at spawned: %v", err)
	}
	if err := a.Advance(ctx, &r, fence.PhasePublished, fence.Patch{}); CodeOf(t, err) != verdict.CodeInvalidRequest {
		t.Fatalf("advance to published before Publish: %v", err)
	}
	// Owner 1 dies; owner 2 recovers the row (absent) and takes it: owner 1's
	// Advance and Publish are fence_lost, and its Release spares the successor.
	w.Set(1, fence.Dead)
	res, err := b.RecoverAbandoned(ctx, r, fakeInspector{auth: fence.Absent})
	if err != nil || res.Branch != fence.BranchReclaimed {
		t.Fatalf("recover %+v %v", res, err)
	}
	err = a.Advance(ctx, &r, fence.PhaseTagged, fence.Patch{})
	if !errors.Is(err, fence.ErrFenceLost) || CodeOf(t, err) != verdict.CodeFenceLost {
		t.Fatalf("advance after loss: %v", err)
	}
	if _, _, err := a.Publish(ctx, &r, Record("published")); !errors.Is(err, fence.ErrFenceLost) {
		t.Fatalf("publish after loss: %v", err)
	}
	if err := a.Release(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	rows, _ := b.Reservations(ctx)
	if len(rows) != 1 || rows[0].ID != res.Reservation.ID {
		t.Fatalf("release deleted the successor: %+v", rows)
	}
}

func testInvalidInputWritesNothing(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	s := w.Owner(1)
	long := "/" + strings.Repeat("a", 1100)
	good := w.Spec("x")
	mod := func(f func(*fence.Spec)) fence.Spec { sp := good; f(&sp); return sp }
	for _, tc := range []struct {
		name  string
		id    fence.Identity
		spec  fence.Spec
		field string
	}{
		{"empty dir", fence.Identity{StateDir: "", SessionID: "x"}, good, "state_dir"},
		{"relative dir", fence.Identity{StateDir: "state", SessionID: "x"}, good, "state_dir"},
		{"nul dir", fence.Identity{StateDir: w.Dir + "\x00", SessionID: "x"}, good, "state_dir"},
		{"newline dir", fence.Identity{StateDir: w.Dir + "\n", SessionID: "x"}, good, "state_dir"},
		{"cr dir", fence.Identity{StateDir: w.Dir + "\r", SessionID: "x"}, good, "state_dir"},
		{"long dir", fence.Identity{StateDir: long, SessionID: "x"}, good, "state_dir"},
		{"empty sid", fence.Identity{StateDir: w.Dir, SessionID: ""}, good, "session_id"},
		{"dot sid", fence.Identity{StateDir: w.Dir, SessionID: ".x"}, good, "session_id"},
		{"slash sid", fence.Identity{StateDir: w.Dir, SessionID: "a/b"}, good, "session_id"},
		{"long sid", fence.Identity{StateDir: w.Dir, SessionID: strings.Repeat("a", 129)}, good, "session_id"},
		{"empty state file", w.ID("x"), mod(func(s *fence.Spec) { s.StateFile = "" }), "state_file"},
		{"relative state file", w.ID("x"), mod(func(s *fence.Spec) { s.StateFile = "x.jsonl" }), "state_file"},
		{"relative cwd", w.ID("x"), mod(func(s *fence.Spec) { s.Cwd = "here" }), "cwd"},
		{"no argv", w.ID("x"), mod(func(s *fence.Spec) { s.Argv = nil }), "argv"},
		{"nul argv", w.ID("x"), mod(func(s *fence.Spec) { s.Argv = []string{"a\x00"} }), "argv"},
		{"bad env", w.ID("x"), mod(func(s *fence.Spec) { s.Env = []string{"1A=x"} }), "env"},
		{"env no =", w.ID("x"), mod(func(s *fence.Spec) { s.Env = []string{"A"} }), "env"},
		{"label control", w.ID("x"), mod(func(s *fence.Spec) { s.Label = "a\tb" }), "label"},
	} {
		_, err := s.Reserve(ctx, tc.id, tc.spec)
		var ve *verdict.Error
		if !errors.As(err, &ve) || ve.Code != verdict.CodeInvalidRequest || ve.Details["field"] != tc.field {
			t.Errorf("%s: %v (details %v), want invalid_request on %s", tc.name, err, detailsOf(err), tc.field)
		}
	}
	if _, err := s.Reclaim(ctx, w.ID("x"), "nothex", good); CodeOf(t, err) != verdict.CodeInvalidRequest {
		t.Errorf("reclaim bad id: %v", err)
	}
	if err := s.Release(ctx, "../x"); CodeOf(t, err) != verdict.CodeInvalidRequest {
		t.Errorf("release bad id: %v", err)
	}
	rows, _ := s.Reservations(ctx)
	ids, _ := s.Identities(ctx)
	if len(rows) != 0 || len(ids) != 0 {
		t.Fatalf("invalid input wrote rows: %+v %+v", rows, ids)
	}
}

func detailsOf(err error) map[string]any {
	var ve *verdict.Error
	if errors.As(err, &ve) {
		return ve.Details
	}
	return nil
}

func testReclaimPinned(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	a, b, c := w.Owner(1), w.Owner(2), w.Owner(3)
	r := MustReserve(t, a, w.ID("x"), w.Spec("x"))
	if _, err := b.Reclaim(ctx, w.ID("x"), r.ID, w.Spec("x")); CodeOf(t, err) != verdict.CodeIdentityReservedLive {
		t.Fatalf("reclaim of a live owner: %v", err)
	}
	w.Set(1, fence.LiveUnknown)
	if _, err := b.Reclaim(ctx, w.ID("x"), r.ID, w.Spec("x")); CodeOf(t, err) != verdict.CodeIdentityReservedUnknown {
		t.Fatalf("reclaim of an unknown owner: %v", err)
	}
	w.Set(1, fence.Dead)
	nr, err := b.Reclaim(ctx, w.ID("x"), r.ID, w.Spec("x"))
	if err != nil || nr.OwnerPID != 2 || nr.Generation != 2 {
		t.Fatalf("reclaim: %+v %v", nr, err)
	}
	// c pinned the same abandoned id: someone else was first → fail closed.
	_, err = c.Reclaim(ctx, w.ID("x"), r.ID, w.Spec("x"))
	if !errors.Is(err, fence.ErrFenceLost) {
		t.Fatalf("second reclaim: %v", err)
	}
}

func testJSONShape(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	s := w.Owner(1)
	r := MustReserve(t, s, w.ID("x"), w.Spec("x"))
	AdvanceTo(t, s, &r, fence.PhasePublished)
	rows, _ := s.Reservations(ctx)
	ids, _ := s.Identities(ctx)
	b, err := json.Marshal(map[string]any{"reservations": rows, "identities": ids})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Reservations []map[string]any `json:"reservations"`
		Identities   []map[string]any `json:"identities"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	res, id := doc.Reservations[0], doc.Identities[0]
	if res["state_dir"] != w.Dir || res["session_id"] != "x" || res["reservation_id"] != r.ID ||
		res["phase"] != "published" || res["owner_pid"] != 1.0 {
		t.Fatalf("reservation json %s", b)
	}
	if id["state_dir"] != w.Dir || id["generation"] != 1.0 || id["session_name"] != "skc-"+r.ID {
		t.Fatalf("identity json %s", b)
	}
	var back fence.Reservation
	raw, _ := json.Marshal(rows[0])
	if err := json.Unmarshal(raw, &back); err != nil || back.ID != r.ID || back.Identity != r.Identity || back.Phase != fence.PhasePublished {
		t.Fatalf("round trip %+v %v", back, err)
	}
}
