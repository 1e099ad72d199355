package fence

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// world is one fence file shared by several fake owners in this process, with
// liveness injected: owner pid → Alive / Dead / LiveUnknown.
type world struct {
	t    *testing.T
	path string
	dir  string // an existing state directory

	mu   sync.Mutex
	live map[int]Live
}

func newWorld(t *testing.T) *world {
	root := t.TempDir()
	dir := filepath.Join(root, "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return &world{t: t, path: filepath.Join(root, "home", "fence.sqlite"), dir: dir, live: map[int]Live{}}
}

func (w *world) set(pid int, l Live) {
	w.mu.Lock()
	w.live[pid] = l
	w.mu.Unlock()
}

func (w *world) liveness(pid int, inc string) Live {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.live[pid]
}

// owner opens a Store acting as process pid (alive until set otherwise).
func (w *world) owner(pid int) *Store {
	w.t.Helper()
	w.set(pid, Alive)
	s, err := Open(w.path, Options{
		Liveness: w.liveness,
		Self:     func() (int, string, error) { return pid, "inc-" + strconv.Itoa(pid), nil },
	})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { s.Close() })
	return s
}

func (w *world) id(sid string) Identity { return Identity{StateDir: w.dir, SessionID: sid} }

func (w *world) spec(sid string) Spec { return testSpec(w.dir, sid) }

var ctx = context.Background()

func mustReserve(t *testing.T, s *Store, id Identity, spec Spec) Reservation {
	t.Helper()
	res, err := s.Reserve(ctx, id, spec)
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	if res.Outcome != Reserved {
		t.Fatalf("reserve outcome %s, want reserved", res.Outcome)
	}
	return res.Reservation
}

func advanceTo(t *testing.T, s *Store, r *Reservation, to Phase) {
	t.Helper()
	patches := map[Phase]Patch{
		PhaseHelperInvoked: {AttemptName: "skc-" + r.ID},
		PhaseSpawned:       {TmuxID: "$3", PanePID: 77, ServerPID: 55, ServerStart: 1234},
		PhaseTagged:        {},
	}
	for p := r.Phase + 1; p <= to; p++ {
		if p == PhasePublished {
			if _, _, err := s.Publish(ctx, r, testRecord("published")); err != nil {
				t.Fatalf("publish: %v", err)
			}
			continue
		}
		if err := s.Advance(ctx, r, p, patches[p]); err != nil {
			t.Fatalf("advance to %s: %v", p, err)
		}
	}
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := codeOf(t, err); got != code {
		t.Fatalf("code %q (%v), want %q", got, err, code)
	}
}

func TestReserveFresh(t *testing.T) {
	w := newWorld(t)
	s := w.owner(100)
	r := mustReserve(t, s, w.id("a"), w.spec("a"))
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(r.ID) {
		t.Fatalf("reservation id %q", r.ID)
	}
	if r.Generation != 1 || r.Phase != PhaseReserved || r.OwnerPID != 100 || r.OwnerIncarnation != "inc-100" {
		t.Fatalf("row %+v", r)
	}
	rows, err := s.Reservations(ctx)
	if err != nil || len(rows) != 1 || rows[0].ID != r.ID || rows[0].Spec.Argv[1] != "--flag" {
		t.Fatalf("reservations %+v %v", rows, err)
	}
	// A second Reserve by the same process while the first is in flight blocks.
	_, err = s.Reserve(ctx, w.id("a"), w.spec("a"))
	wantCode(t, err, verdict.CodeIdentityReservedLive)
}

func TestReserveOverOtherOwner(t *testing.T) {
	for _, tc := range []struct {
		name  string
		live  Live
		phase Phase
		code  string
		want  ReserveOutcome
	}{
		{"alive", Alive, PhaseReserved, verdict.CodeIdentityReservedLive, 0},
		{"unknown", LiveUnknown, PhaseReserved, verdict.CodeIdentityReservedUnknown, 0},
		{"alive_later_phase", Alive, PhaseSpawned, verdict.CodeIdentityReservedLive, 0},
		{"dead_reserved", Dead, PhaseReserved, "", Reserved},
		{"dead_helper_invoked", Dead, PhaseHelperInvoked, "", NeedsRecovery},
		{"dead_tagged", Dead, PhaseTagged, "", NeedsRecovery},
		{"dead_published", Dead, PhasePublished, "", NeedsRecovery},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			a, b := w.owner(1), w.owner(2)
			r := mustReserve(t, a, w.id("x"), w.spec("x"))
			advanceTo(t, a, &r, tc.phase)
			w.set(1, tc.live)
			res, err := b.Reserve(ctx, w.id("x"), w.spec("x"))
			if tc.code != "" {
				wantCode(t, err, tc.code)
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
			case Reserved: // reclaimed in place: new id, next generation, owner b
				nr := res.Reservation
				if nr.ID == r.ID || nr.Generation != 2 || nr.OwnerPID != 2 || nr.Phase != PhaseReserved {
					t.Fatalf("reclaimed row %+v", nr)
				}
			case NeedsRecovery:
				if res.Abandoned.ID != r.ID || res.Abandoned.Phase != tc.phase {
					t.Fatalf("abandoned %+v", res.Abandoned)
				}
			}
		})
	}
}

func TestReserveOwnAbandoned(t *testing.T) {
	w := newWorld(t)
	s := w.owner(1)
	r := mustReserve(t, s, w.id("x"), w.spec("x"))
	if err := s.Abandon(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	rows, _ := s.Reservations(ctx)
	if len(rows) != 1 || !rows[0].Abandoned {
		t.Fatalf("abandon must keep the row: %+v", rows)
	}
	// Our own abandoned row at phase reserved: no child, reclaimed directly.
	r2 := mustReserve(t, s, w.id("x"), w.spec("x"))
	if r2.ID == r.ID || r2.Generation != 2 {
		t.Fatalf("%+v", r2)
	}
	advanceTo(t, s, &r2, PhaseHelperInvoked)
	if err := s.Abandon(ctx, r2.ID); err != nil {
		t.Fatal(err)
	}
	// Past helper_invoked: resolvable, through recovery.
	res, err := s.Reserve(ctx, w.id("x"), w.spec("x"))
	if err != nil || res.Outcome != NeedsRecovery || res.Abandoned.ID != r2.ID || !res.Abandoned.Abandoned {
		t.Fatalf("%+v %v", res, err)
	}
	// An abandoned row is no longer ours to advance.
	err = s.Advance(ctx, &r2, PhaseSpawned, Patch{TmuxID: "$1"})
	if !errors.Is(err, ErrFenceLost) {
		t.Fatalf("advance after abandon: %v", err)
	}
}

func TestReserveIncarnationUnavailable(t *testing.T) {
	w := newWorld(t)
	s, err := Open(w.path, Options{Self: func() (int, string, error) { return 0, "", errors.New("no /proc") }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Reserve(ctx, w.id("x"), w.spec("x"))
	wantCode(t, err, verdict.CodeIdentityIncarnationUnavailable)
}

func TestStateFileMismatch(t *testing.T) {
	w := newWorld(t)
	a, b := w.owner(1), w.owner(2)
	r := mustReserve(t, a, w.id("x"), w.spec("x"))
	other := w.spec("x")
	other.StateFile = filepath.Join(w.dir, "other.jsonl")
	_, err := b.Reserve(ctx, w.id("x"), other)
	wantCode(t, err, verdict.CodeIdentityStateFileMismatch)
	// Against the published, not-ended record too.
	advanceTo(t, a, &r, PhasePublished)
	if err := a.Release(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	_, err = b.Reserve(ctx, w.id("x"), other)
	wantCode(t, err, verdict.CodeIdentityStateFileMismatch)
}

func TestSymlinkAliasIsSameIdentity(t *testing.T) {
	w := newWorld(t)
	alias := filepath.Join(filepath.Dir(w.dir), "alias")
	if err := os.Symlink(w.dir, alias); err != nil {
		t.Fatal(err)
	}
	a, b := w.owner(1), w.owner(2)
	r := mustReserve(t, a, w.id("x"), w.spec("x"))
	spec := testSpec(alias, "x") // the state file through the alias too
	_, err := b.Reserve(ctx, Identity{StateDir: alias + "/", SessionID: "x"}, spec)
	wantCode(t, err, verdict.CodeIdentityReservedLive)
	canon, err := CanonicalIdentity(Identity{StateDir: alias, SessionID: "x"})
	if err != nil || canon != r.Identity || canon.Digest() != r.Identity.Digest() {
		t.Fatalf("canonical %+v vs %+v (%v)", canon, r.Identity, err)
	}
}

func TestPublishedBlocksUntilEnded(t *testing.T) {
	w := newWorld(t)
	a, b := w.owner(1), w.owner(2)
	r := mustReserve(t, a, w.id("x"), w.spec("x"))
	advanceTo(t, a, &r, PhaseTagged)
	pub, rec, err := a.Publish(ctx, &r, testRecord(verdict.VerdictPublished))
	if err != nil || pub.Generation != 1 || rec.Sequence != 1 || r.Phase != PhasePublished {
		t.Fatalf("publish %+v %+v %v", pub, rec, err)
	}
	if pub.SessionName != "skc-"+r.ID || pub.TmuxID != "$3" || pub.ServerPID != 55 {
		t.Fatalf("published evidence %+v", pub)
	}
	if err := a.Advance(ctx, &r, PhasePublished, Patch{}); err != nil { // after Publish: a no-op
		t.Fatalf("advance to published after Publish: %v", err)
	}
	if err := a.Release(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, r.ID); err != nil { // idempotent
		t.Fatal(err)
	}
	res, err := b.Reserve(ctx, w.id("x"), w.spec("x"))
	if err != nil || res.Outcome != MaybeExisting || res.Published.Generation != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	// MarkEnded is a compare-and-set on the generation.
	if ok, _, err := b.MarkEnded(ctx, w.id("x"), 2, testRecord("ended")); ok || err != nil {
		t.Fatalf("mark wrong generation: %v %v", ok, err)
	}
	ok, rec, err := b.MarkEnded(ctx, w.id("x"), 1, testRecord("ended"))
	if !ok || err != nil || rec.Sequence != 2 {
		t.Fatalf("mark ended: %v %+v %v", ok, rec, err)
	}
	if ok, _, _ := b.MarkEnded(ctx, w.id("x"), 1, testRecord("ended")); ok {
		t.Fatal("second MarkEnded succeeded")
	}
	r2 := mustReserve(t, b, w.id("x"), w.spec("x"))
	if r2.Generation != 2 {
		t.Fatalf("generation %d, want 2", r2.Generation)
	}
	recs, err := b.VerdictsSince(ctx, 0, 0)
	if err != nil || len(recs) != 2 || recs[0].Verdict != "published" || recs[1].Sequence != 2 {
		t.Fatalf("verdicts %+v %v", recs, err)
	}
}

func TestGenerationNeverReused(t *testing.T) {
	w := newWorld(t)
	s := w.owner(1)
	for want := uint64(1); want <= 3; want++ {
		r := mustReserve(t, s, w.id("x"), w.spec("x"))
		if r.Generation != want {
			t.Fatalf("generation %d, want %d", r.Generation, want)
		}
		if err := s.Release(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAdvance(t *testing.T) {
	w := newWorld(t)
	a, b := w.owner(1), w.owner(2)
	r := mustReserve(t, a, w.id("x"), w.spec("x"))
	for _, tc := range []struct {
		name string
		to   Phase
		p    Patch
	}{
		{"unknown phase", Phase(9), Patch{}},
		{"published via advance", PhasePublished, Patch{}},
		{"no attempt name", PhaseHelperInvoked, Patch{}},
		{"attempt name without id", PhaseHelperInvoked, Patch{AttemptName: "skc-other"}},
		{"attempt name with newline", PhaseHelperInvoked, Patch{AttemptName: "skc-" + r.ID + "\n"}},
		{"no tmux id", PhaseSpawned, Patch{}},
		{"bad tmux id", PhaseSpawned, Patch{TmuxID: "@3"}},
	} {
		if err := a.Advance(ctx, &r, tc.to, tc.p); codeOf(t, err) != verdict.CodeInvalidRequest {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	advanceTo(t, a, &r, PhaseSpawned)
	back := r
	back.Phase = PhaseReserved // a stale copy cannot move the row backwards either
	if err := a.Advance(ctx, &back, PhaseHelperInvoked, Patch{AttemptName: "skc-" + r.ID}); codeOf(t, err) != verdict.CodeInvalidRequest {
		t.Fatalf("backwards: %v", err)
	}
	if err := a.Advance(ctx, &r, PhaseHelperInvoked, Patch{AttemptName: "skc-" + r.ID}); codeOf(t, err) != verdict.CodeInvalidRequest {
		t.Fatalf("backwards: %v", err)
	}
	// Publish before tagged is refused.
	if _, _, err := a.Publish(ctx, &r, testRecord("published")); codeOf(t, err) != verdict.CodeInvalidRequest {
		t.Fatalf("publish at spawned: %v", err)
	}
	if err := a.Advance(ctx, &r, PhasePublished, Patch{}); codeOf(t, err) != verdict.CodeInvalidRequest {
		t.Fatalf("advance to published before Publish: %v", err)
	}
	// Owner 1 dies; owner 2 recovers the row (absent) and takes it: owner 1's
	// Advance and Publish are fence_lost, and its Release spares the successor.
	w.set(1, Dead)
	res, err := b.RecoverAbandoned(ctx, r, fakeInspector{auth: Absent})
	if err != nil || res.Branch != BranchReclaimed {
		t.Fatalf("recover %+v %v", res, err)
	}
	err = a.Advance(ctx, &r, PhaseTagged, Patch{})
	if !errors.Is(err, ErrFenceLost) || codeOf(t, err) != verdict.CodeFenceLost {
		t.Fatalf("advance after loss: %v", err)
	}
	if _, _, err := a.Publish(ctx, &r, testRecord("published")); !errors.Is(err, ErrFenceLost) {
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

func TestInvalidInputWritesNothing(t *testing.T) {
	w := newWorld(t)
	s := w.owner(1)
	long := "/" + strings.Repeat("a", 1100)
	good := w.spec("x")
	mod := func(f func(*Spec)) Spec { sp := good; f(&sp); return sp }
	for _, tc := range []struct {
		name  string
		id    Identity
		spec  Spec
		field string
	}{
		{"empty dir", Identity{"", "x"}, good, "state_dir"},
		{"relative dir", Identity{"state", "x"}, good, "state_dir"},
		{"nul dir", Identity{w.dir + "\x00", "x"}, good, "state_dir"},
		{"newline dir", Identity{w.dir + "\n", "x"}, good, "state_dir"},
		{"cr dir", Identity{w.dir + "\r", "x"}, good, "state_dir"},
		{"long dir", Identity{long, "x"}, good, "state_dir"},
		{"empty sid", Identity{w.dir, ""}, good, "session_id"},
		{"dot sid", Identity{w.dir, ".x"}, good, "session_id"},
		{"slash sid", Identity{w.dir, "a/b"}, good, "session_id"},
		{"long sid", Identity{w.dir, strings.Repeat("a", 129)}, good, "session_id"},
		{"empty state file", w.id("x"), mod(func(s *Spec) { s.StateFile = "" }), "state_file"},
		{"relative state file", w.id("x"), mod(func(s *Spec) { s.StateFile = "x.jsonl" }), "state_file"},
		{"relative cwd", w.id("x"), mod(func(s *Spec) { s.Cwd = "here" }), "cwd"},
		{"no argv", w.id("x"), mod(func(s *Spec) { s.Argv = nil }), "argv"},
		{"nul argv", w.id("x"), mod(func(s *Spec) { s.Argv = []string{"a\x00"} }), "argv"},
		{"bad env", w.id("x"), mod(func(s *Spec) { s.Env = []string{"1A=x"} }), "env"},
		{"env no =", w.id("x"), mod(func(s *Spec) { s.Env = []string{"A"} }), "env"},
		{"label control", w.id("x"), mod(func(s *Spec) { s.Label = "a\tb" }), "label"},
	} {
		_, err := s.Reserve(ctx, tc.id, tc.spec)
		var ve *verdict.Error
		if !errors.As(err, &ve) || ve.Code != verdict.CodeInvalidRequest || ve.Details["field"] != tc.field {
			t.Errorf("%s: %v (details %v), want invalid_request on %s", tc.name, err, detailsOf(err), tc.field)
		}
	}
	if _, err := s.Reclaim(ctx, w.id("x"), "nothex", good); codeOf(t, err) != verdict.CodeInvalidRequest {
		t.Errorf("reclaim bad id: %v", err)
	}
	if err := s.Release(ctx, "../x"); codeOf(t, err) != verdict.CodeInvalidRequest {
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

func TestReclaimPinned(t *testing.T) {
	w := newWorld(t)
	a, b, c := w.owner(1), w.owner(2), w.owner(3)
	r := mustReserve(t, a, w.id("x"), w.spec("x"))
	if _, err := b.Reclaim(ctx, w.id("x"), r.ID, w.spec("x")); codeOf(t, err) != verdict.CodeIdentityReservedLive {
		t.Fatalf("reclaim of a live owner: %v", err)
	}
	w.set(1, LiveUnknown)
	if _, err := b.Reclaim(ctx, w.id("x"), r.ID, w.spec("x")); codeOf(t, err) != verdict.CodeIdentityReservedUnknown {
		t.Fatalf("reclaim of an unknown owner: %v", err)
	}
	w.set(1, Dead)
	nr, err := b.Reclaim(ctx, w.id("x"), r.ID, w.spec("x"))
	if err != nil || nr.OwnerPID != 2 || nr.Generation != 2 {
		t.Fatalf("reclaim: %+v %v", nr, err)
	}
	// c pinned the same abandoned id: someone else was first → fail closed.
	_, err = c.Reclaim(ctx, w.id("x"), r.ID, w.spec("x"))
	if !errors.Is(err, ErrFenceLost) {
		t.Fatalf("second reclaim: %v", err)
	}
}

func TestJSONShape(t *testing.T) {
	w := newWorld(t)
	s := w.owner(1)
	r := mustReserve(t, s, w.id("x"), w.spec("x"))
	advanceTo(t, s, &r, PhasePublished)
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
	if res["state_dir"] != w.dir || res["session_id"] != "x" || res["reservation_id"] != r.ID ||
		res["phase"] != "published" || res["owner_pid"] != 1.0 {
		t.Fatalf("reservation json %s", b)
	}
	if id["state_dir"] != w.dir || id["generation"] != 1.0 || id["session_name"] != "skc-"+r.ID {
		t.Fatalf("identity json %s", b)
	}
	var back Reservation
	raw, _ := json.Marshal(rows[0])
	if err := json.Unmarshal(raw, &back); err != nil || back.ID != r.ID || back.Identity != r.Identity || back.Phase != PhasePublished {
		t.Fatalf("round trip %+v %v", back, err)
	}
}
