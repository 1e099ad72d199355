// Package fencetest is the behaviour suite every fence engine passes (one
// suite, two implementations): reservation, the saga's phases, publication,
// recovery's branches, stops, restarts, postmortems, the verdict journal, the
// caches and validation, asserted by error codes, never by message text.
//
// An engine's tests call Run with a Harness that makes a fresh fence per test
// (fence/sqlite: a file in t.TempDir()). What only one engine has — SQLite's
// files, locks, schema migrations, real processes re-executing the test binary
// — is tested next to that engine, with the helpers exported here.
package fencetest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Opener opens a new handle on one fence with opt. Each handle plays one
// process: its own connections, its own owner identity (opt.Self).
type Opener func(opt fence.Options) (fence.Fence, error)

// Harness is what the suite needs of an engine.
type Harness struct {
	// New makes a fresh, empty fence for the test t (removed at its end)
	// and returns how to open handles on it.
	New func(t *testing.T) Opener
	// Sound, when set, checks the fence's storage after a stress test
	// (SQLite: PRAGMA integrity_check) and fails t if it is damaged.
	Sound func(t testing.TB, f fence.Fence)
}

// suite lists the tests, named as the engine-neutral tests they were when
// fence had one engine.
var suite = []struct {
	name string
	run  func(t *testing.T, h Harness)
}{
	{"ReserveFresh", testReserveFresh},
	{"ReserveOverOtherOwner", testReserveOverOtherOwner},
	{"ReserveOwnAbandoned", testReserveOwnAbandoned},
	{"ReserveIncarnationUnavailable", testReserveIncarnationUnavailable},
	{"StateFileMismatch", testStateFileMismatch},
	{"SymlinkAliasIsSameIdentity", testSymlinkAliasIsSameIdentity},
	{"PublishedBlocksUntilEnded", testPublishedBlocksUntilEnded},
	{"GenerationNeverReused", testGenerationNeverReused},
	{"Advance", testAdvance},
	{"InvalidInputWritesNothing", testInvalidInputWritesNothing},
	{"ReclaimPinned", testReclaimPinned},
	{"JSONShape", testJSONShape},
	{"RecoverBranches", testRecoverBranches},
	{"RecoverAbsentWhileProcessesRun", testRecoverAbsentWhileProcessesRun},
	{"RecoverPreservedPublishedThenMaybeExisting", testRecoverPreservedPublishedThenMaybeExisting},
	{"RecoverReservedNeedsNoCensus", testRecoverReservedNeedsNoCensus},
	{"RecoverFailsClosed", testRecoverFailsClosed},
	{"RecoverOwnerNotProvenDead", testRecoverOwnerNotProvenDead},
	{"SmallEdges", testSmallEdges},
	{"CachedPublished", testCachedPublished},
	{"CachedGenerationMoves", testCachedGenerationMoves},
	{"PublishedByTmux", testPublishedByTmux},
	{"VerdictsFor", testVerdictsFor},
	{"RestartBookkeeping", testRestartBookkeeping},
	{"HelperSpecOutlivesRelease", testHelperSpecOutlivesRelease},
	{"PublishRelease", testPublishRelease},
	{"ReserveClaim", testReserveClaim},
	{"SequenceSurvivesRestart", testSequenceSurvivesRestart},
	{"Postmortem", testPostmortem},
	{"CancelledCallerNeverWedgesWriter", testCancelledCallerNeverWedgesWriter},
	{"CachedIdentityReads", testCachedIdentityReads},
	{"CachedIdentityReadsConcurrent", testCachedIdentityReadsConcurrent},
	{"CachedIdentityReadsBeyondBulk", testCachedIdentityReadsBeyondBulk},
	{"RemoteOwnerIsUnknown", testRemoteOwnerIsUnknown},
	{"EarlierBootIsDead", testEarlierBootIsDead},
	{"PublishedCarriesHost", testPublishedCarriesHost},
	{"ForgetHost", testForgetHost},
}

// Run runs the suite against the engine h makes, one subtest per behaviour.
func Run(t *testing.T, h Harness) {
	for _, tc := range suite {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, h) })
	}
}

var ctx = context.Background()

// World is one fence shared by several fake owners in this process, with
// their liveness injected: owner pid → Alive / Dead / LiveUnknown.
type World struct {
	t    *testing.T
	open Opener
	// Dir is an existing state directory, canonical (no symlink above it).
	Dir string

	mu   sync.Mutex
	live map[int]fence.Live
}

// NewWorld makes a fresh fence with h and a state directory for t.
func NewWorld(t *testing.T, h Harness) *World { return NewWorldWith(t, h.New(t)) }

// NewWorldWith is NewWorld on the fence open opens (an engine's own tests,
// which know where its storage is).
func NewWorldWith(t *testing.T, open Opener) *World {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return &World{t: t, open: open, Dir: dir, live: map[int]fence.Live{}}
}

// Set makes owner pid's liveness l.
func (w *World) Set(pid int, l fence.Live) {
	w.mu.Lock()
	w.live[pid] = l
	w.mu.Unlock()
}

// Liveness is the world's owner liveness (Options.Liveness): what Set said,
// LiveUnknown for an owner never set.
func (w *World) Liveness(pid int, inc string) fence.Live {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.live[pid]
}

// Open opens a handle with opt as it is (no injected owner), closed at the
// test's end.
func (w *World) Open(opt fence.Options) (fence.Fence, error) {
	f, err := w.open(opt)
	if err == nil {
		w.t.Cleanup(func() { f.Close() })
	}
	return f, err
}

// Owner opens a handle acting as process pid (alive until Set otherwise),
// with incarnation "inc-<pid>", closed at the test's end.
func (w *World) Owner(pid int) fence.Fence {
	w.t.Helper()
	w.Set(pid, fence.Alive)
	f, err := w.Open(fence.Options{
		Liveness: w.Liveness,
		Self:     func() (int, string, error) { return pid, "inc-" + strconv.Itoa(pid), nil },
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return f
}

// ID is the identity of session sid in the world's state directory.
func (w *World) ID(sid string) fence.Identity { return fence.Identity{StateDir: w.Dir, SessionID: sid} }

// Spec is SpecFor(w.Dir, sid).
func (w *World) Spec(sid string) fence.Spec { return SpecFor(w.Dir, sid) }

// SpecFor is a valid spec for session sid of state directory dir.
func SpecFor(dir, sid string) fence.Spec {
	return fence.Spec{StateFile: filepath.Join(dir, sid+".jsonl"), Argv: []string{"agent", "--flag"},
		Env: []string{"A=1"}, Label: "test"}
}

// Record is a create verdict named v.
func Record(v string) verdict.Record {
	return verdict.Record{Action: verdict.ActionCreate, Outcome: verdict.OutcomeSuccess, Verdict: v}
}

// IdentRecord is Record(v) about id (nil: about no identity).
func IdentRecord(v string, id *fence.Identity) verdict.Record {
	r := Record(v)
	if id != nil {
		r.Identity = &verdict.IdentityRef{StateDir: id.StateDir, SessionID: id.SessionID}
	}
	return r
}

// CodeOf is verdict.CodeOf, with a check that refusals are *verdict.Error.
func CodeOf(t testing.TB, err error) string {
	t.Helper()
	var ve *verdict.Error
	if err != nil && !errors.As(err, &ve) {
		t.Fatalf("error is not a *verdict.Error: %T %v", err, err)
	}
	return verdict.CodeOf(err)
}

// WantCode fails t unless err's code is code.
func WantCode(t testing.TB, err error, code string) {
	t.Helper()
	if got := CodeOf(t, err); got != code {
		t.Fatalf("code %q (%v), want %q", got, err, code)
	}
}

// MustReserve reserves id and fails t unless the outcome is Reserved.
func MustReserve(t testing.TB, f fence.Fence, id fence.Identity, spec fence.Spec) fence.Reservation {
	t.Helper()
	res, err := f.Reserve(ctx, id, spec)
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	if res.Outcome != fence.Reserved {
		t.Fatalf("reserve outcome %s, want reserved", res.Outcome)
	}
	return res.Reservation
}

// AdvanceTo walks r through every phase up to to (Publish for published),
// with made-up evidence.
func AdvanceTo(t testing.TB, f fence.Fence, r *fence.Reservation, to fence.Phase) {
	t.Helper()
	patches := map[fence.Phase]fence.Patch{
		fence.PhaseHelperInvoked: {AttemptName: "skc-" + r.ID},
		fence.PhaseSpawned:       {TmuxID: "$3", PanePID: 77, ServerPID: 55, ServerStart: 1234},
		fence.PhaseTagged:        {},
	}
	for p := r.Phase + 1; p <= to; p++ {
		if p == fence.PhasePublished {
			if _, _, err := f.Publish(ctx, r, Record("published")); err != nil {
				t.Fatalf("publish: %v", err)
			}
			continue
		}
		if err := f.Advance(ctx, r, p, patches[p]); err != nil {
			t.Fatalf("advance to %s: %v", p, err)
		}
	}
}

// PublishAt walks a fresh reservation of sid to published (and releases it)
// in tmux session tmuxID of server life (pid, start).
func PublishAt(t testing.TB, f fence.Fence, w *World, sid, tmuxID string, pid int, start int64) fence.Published {
	t.Helper()
	r := MustReserve(t, f, w.ID(sid), w.Spec(sid))
	steps := []struct {
		to fence.Phase
		p  fence.Patch
	}{
		{fence.PhaseHelperInvoked, fence.Patch{AttemptName: "skc-" + r.ID}},
		{fence.PhaseSpawned, fence.Patch{TmuxID: tmuxID, PanePID: 77, ServerPID: pid, ServerStart: start}},
		{fence.PhaseTagged, fence.Patch{}},
	}
	for _, st := range steps {
		if err := f.Advance(ctx, &r, st.to, st.p); err != nil {
			t.Fatalf("advance to %s: %v", st.to, err)
		}
	}
	pub, _, err := f.Publish(ctx, &r, Record(verdict.VerdictPublished))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Release(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	return pub
}

// OwnerOn is Owner(pid) on host: its empty fields are this machine's
// (fence.LocalHost), so a test names another host, or another boot of this
// one, by the fields it sets.
func (w *World) OwnerOn(pid int, host fence.Host) fence.Fence {
	w.t.Helper()
	w.Set(pid, fence.Alive)
	f, err := w.Open(fence.Options{
		Liveness: w.Liveness,
		Self:     func() (int, string, error) { return pid, "inc-" + strconv.Itoa(pid), nil },
		Host:     host,
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return f
}
