package fencetest

import (
	"context"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

func testSequenceSurvivesRestart(t *testing.T, h Harness) {
	open := h.New(t)
	for want := int64(1); want <= 3; want++ {
		s, err := open(fence.Options{})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := s.AppendVerdict(ctx, Record("published"))
		s.Close()
		if err != nil || rec.Sequence != want || rec.Timestamp.IsZero() {
			t.Fatalf("sequence %d (%v), want %d", rec.Sequence, err, want)
		}
	}
	s, err := open(fence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs, err := s.VerdictsSince(ctx, 1, 1)
	if err != nil || len(recs) != 1 || recs[0].Sequence != 2 {
		t.Fatalf("%+v %v", recs, err)
	}
}

func testPostmortem(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	s := w.Owner(1)
	helper := w.Owner(2) // the pane helper: another process, its own Store
	r := MustReserve(t, s, w.ID("x"), w.Spec("x"))
	AdvanceTo(t, s, &r, fence.PhaseSpawned)
	if err := helper.RecordHelperStart(ctx, r.ID, 4242, "boot/1/2/3", ""); err != nil {
		t.Fatal(err)
	}
	if err := helper.RecordHelperStart(ctx, "0123456789abcdef0123456789abcdef", 1, "x", ""); !errorsIsLost(err) {
		t.Fatalf("helper of an unknown reservation: %v", err)
	}
	AdvanceTo(t, s, &r, fence.PhasePublished)
	if err := s.Release(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if pub, ok, err := helper.PublishedByReservation(ctx, r.ID); !ok || err != nil || pub.Generation != 1 {
		t.Fatalf("published by reservation: %+v %v %v", pub, ok, err)
	}
	pm, ok, err := s.Postmortem(ctx, w.ID("x"), 1)
	if err != nil || !ok || pm.HelperPID != 4242 || !pm.EndedAt.IsZero() || pm.ExitStatus != nil {
		t.Fatalf("running postmortem %+v %v %v", pm, ok, err)
	}
	status := 7
	end := time.Now().UTC().Truncate(time.Microsecond)
	err = helper.RecordPostmortem(ctx, fence.Postmortem{ReservationID: r.ID, AgentPID: 4243, ExitStatus: &status,
		UserTime: time.Second, SystemTime: 2 * time.Millisecond, MaxRSS: 1024, EndedAt: end})
	if err != nil {
		t.Fatal(err)
	}
	pm, ok, err = s.Postmortem(ctx, w.ID("x"), 1)
	if err != nil || !ok || *pm.ExitStatus != 7 || pm.AgentPID != 4243 || pm.HelperPID != 4242 ||
		pm.HelperIncarnation != "boot/1/2/3" || pm.UserTime != time.Second || !pm.EndedAt.Equal(end) ||
		pm.Generation != 1 || pm.StartedAt.IsZero() {
		t.Fatalf("postmortem %+v %v %v", pm, ok, err)
	}
	if _, ok, _ := s.Postmortem(ctx, w.ID("x"), 2); ok {
		t.Fatal("postmortem of an unpublished generation")
	}
	err = helper.RecordPostmortem(ctx, fence.Postmortem{ReservationID: r.ID, Signal: "SIG KILL"})
	if CodeOf(t, err) != verdict.CodeInvalidRequest {
		t.Fatalf("bad signal: %v", err)
	}
}

func errorsIsLost(err error) bool { return err != nil && verdict.CodeOf(err) == verdict.CodeFenceLost }

// testCancelledCallerNeverWedgesWriter: callers whose context is cancelled at
// varying moments of a write (BEGIN included) must not leave the writer
// connection inside a transaction; the next write with a live context succeeds.
// (Before the fix this failed within a few rounds with "cannot start a
// transaction within a transaction".)
func testCancelledCallerNeverWedgesWriter(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	s := w.Owner(100)
	for i := 0; i < 400; i++ {
		c, cancel := context.WithCancel(context.Background())
		go func(d time.Duration) { time.Sleep(d); cancel() }(time.Duration(i%50) * 10 * time.Microsecond)
		_, _ = s.AppendVerdict(c, Record(verdict.VerdictPublished))
		if _, err := s.AppendVerdict(ctx, Record(verdict.VerdictPublished)); err != nil {
			t.Fatalf("round %d: a write after a cancelled one failed: %v", i, err)
		}
		cancel()
	}
	if h.Sound != nil {
		h.Sound(t, s)
	}
}
