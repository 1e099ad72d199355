package fencetest

import (
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// testRestartBookkeeping: a create publishes with its spec and one start; the
// end's decision (next start due) is recorded with the ended verdict; a
// restart's publish counts one more restart and start and keeps the
// failures; SetRestart is a compare-and-set; a create starts the count over.
func testRestartBookkeeping(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	s := w.Owner(100)
	id := w.ID("r")
	spec := w.Spec("r")
	spec.Restart, spec.ResumeArgv, spec.RestartDelayMS, spec.RestartBurst, spec.RestartIntervalS =
		fence.RestartOnFailure, []string{"agent", "--resume"}, 250, 5, 300
	p1 := publishSpec(t, s, id, spec, "")
	if p1.Restart.Restarts != 0 || len(p1.Restart.Starts) != 1 || p1.Spec.Restart != fence.RestartOnFailure {
		t.Fatalf("first publish: %+v", p1.Restart)
	}
	if got, _, _ := s.PublishedFor(ctx, id); got.Spec.Restart != fence.RestartOnFailure || len(got.Spec.ResumeArgv) != 2 {
		t.Fatalf("stored spec: %+v", got.Spec)
	}
	gave := IdentRecord(verdict.VerdictGaveUp, &id)
	ok, _, err := s.MarkEndedNext(ctx, id, p1.Generation, IdentRecord(verdict.VerdictEnded, &id),
		fence.RestartNext{State: fence.RestartExited, Delay: time.Hour, Reason: verdict.ReasonRestart, Failures: 1}, &gave)
	if err != nil || !ok || gave.Sequence == 0 {
		t.Fatalf("mark ended next: %v %v %+v", ok, err, gave)
	}
	for _, get := range []func() (fence.Published, bool, error){
		func() (fence.Published, bool, error) { return s.PublishedFor(ctx, id) },
		func() (fence.Published, bool, error) { return s.CachedPublished(ctx, id.Digest()) },
	} {
		// The due time is the end's own time plus the delay, both the fence's.
		if p, _, _ := get(); p.Restart.State != fence.RestartExited || !p.Restart.Due.Equal(p.EndedAt.Add(time.Hour)) ||
			p.Restart.Failures != 1 {
			t.Fatalf("recorded decision: %+v", p.Restart)
		}
	}
	if due2, err := s.RestartsDue(ctx, time.Now()); err != nil || len(due2) != 0 {
		t.Fatalf("due now: %v %v", due2, err)
	}
	if all, err := s.RestartsDue(ctx, time.Time{}); err != nil || len(all) != 1 {
		t.Fatalf("waiting: %v %v", all, err)
	}
	if ok, err := s.SetRestart(ctx, id, p1.Generation, fence.RestartStopped, fence.RestartNext{State: fence.RestartGaveUp}, nil); err != nil || ok {
		t.Fatalf("set restart from the wrong state: %v %v", ok, err)
	}
	now := fence.RestartNext{State: fence.RestartExited, Reason: verdict.ReasonRestart, Failures: 1}
	if ok, err := s.SetRestart(ctx, id, p1.Generation, fence.RestartExited, now, nil); err != nil || !ok {
		t.Fatalf("set restart: %v %v", ok, err)
	}
	p2 := publishSpec(t, s, id, spec, verdict.ReasonRestart)
	if p2.Restart.Restarts != 1 || len(p2.Restart.Starts) != 2 || p2.Restart.Failures != 1 || p2.Restart.State != "" {
		t.Fatalf("restart publish: %+v", p2.Restart)
	}
	if p2.Superseded == nil || p2.Superseded.Generation != p1.Generation {
		t.Fatalf("superseded: %+v", p2.Superseded)
	}
	if ok, _, err := s.MarkEnded(ctx, id, p2.Generation, IdentRecord(verdict.VerdictEnded, &id)); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if p3 := publishSpec(t, s, id, spec, ""); p3.Restart.Restarts != 0 || len(p3.Restart.Starts) != 1 || p3.Restart.Failures != 0 {
		t.Fatalf("create after restarts: %+v", p3.Restart)
	}
}

// publishSpec walks a reservation of id with spec to published; reason set
// makes it a restart in the kept session "skc-kept".
func publishSpec(t *testing.T, s fence.Fence, id fence.Identity, spec fence.Spec, reason string) fence.Published {
	t.Helper()
	r := MustReserve(t, s, id, spec)
	r.StartReason = reason
	name := fence.Patch{AttemptName: "skc-" + r.ID}
	if reason != "" {
		name = fence.Patch{AttemptName: "skc-kept", Kept: true}
	}
	for _, st := range []struct {
		to fence.Phase
		p  fence.Patch
	}{
		{fence.PhaseHelperInvoked, name},
		{fence.PhaseSpawned, fence.Patch{TmuxID: "$3", PanePID: 78, ServerPID: 55, ServerStart: 1000}},
		{fence.PhaseTagged, fence.Patch{}},
	} {
		if err := s.Advance(ctx, &r, st.to, st.p); err != nil {
			t.Fatalf("advance to %s: %v", st.to, err)
		}
	}
	pub, _, err := s.Publish(ctx, &r, Record(verdict.VerdictPublished))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	return pub
}
