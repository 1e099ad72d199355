package lifecycle

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// faultChild is a daemon that creates one identity with SKC_FAULT set and so
// SIGKILLs itself at that point: `faultchild HOME POINT NAME [AGENT ARG…]`
// (an agent given runs with a 300 ms stop timeout). Reaching the end alive is
// a failure (exit 3).
func faultChild(args []string) int {
	home, point, name := args[0], args[1], args[2]
	e := &env{home: home, socket: filepath.Join(home, "tmux.sock")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := e.open(ctx, "after:"+point); err != nil {
		fmt.Fprintln(os.Stderr, "faultchild:", err)
		return 2
	}
	id, spec := e.identity(name)
	if len(args) > 3 {
		spec.Argv = append([]string{spec.Argv[0]}, args[3:]...)
		spec.StopTimeoutMS = 300
	}
	_, err := e.m.Create(ctx, CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	fmt.Fprintln(os.Stderr, "faultchild: survived the fault point:", err)
	return 3
}

func TestFaultPointsRecoverToOneSession(t *testing.T) {
	for _, point := range FaultPoints() {
		t.Run(point, func(t *testing.T) { testFaultPoint(t, point) })
	}
}

func testFaultPoint(t *testing.T, point string) {
	home := newHome(t)
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "faultchild", home, point, "crash")
	cmd.Stderr = os.Stderr
	err := cmd.Run()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("fault child did not die of SIGKILL at %s: %v", point, err)
	}
	e := startEnv(t, home, "", false)
	id, spec := e.identity("crash")
	before := e.sessions(id.Digest())
	if err := e.m.Recover(context.Background()); err != nil {
		t.Fatalf("recover: %v", err)
	}
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("create after crash at %s: %v", point, err)
	}
	after := e.sessions(id.Digest())
	if len(after) != 1 || after[0] != res.Session.ID {
		t.Fatalf("after crash at %s: sessions %v (before recovery %v), create %+v", point, after, before, res)
	}
	recs := e.verdicts(id)
	recoveries := 0
	for _, r := range recs {
		if r.Action == verdict.ActionRecover {
			recoveries++
			checkRecoveryEvidence(t, point, r)
		}
	}
	t.Logf("crash at %s: verdicts %v", point, verdictNames(recs))
	if recoveries != 1 {
		t.Fatalf("after crash at %s: %d recovery verdicts: %v", point, recoveries, verdictNames(recs))
	}
	rows, _ := e.store.Reservations(context.Background())
	if len(rows) != 0 {
		t.Fatalf("after crash at %s: rows left %+v", point, rows)
	}
	checkPublishedChildKept(t, point, before, res)
}

// checkPublishedChildKept: a crash after publication leaves an authoritative child,
// which must survive recovery and be the answer (existing), never killed.
func checkPublishedChildKept(t *testing.T, point string, before []string, res CreateResult) {
	published := point == FaultPublish || point == FaultPublished
	switch {
	case published && (res.Status != "existing" || len(before) != 1 || before[0] != res.Session.ID):
		t.Fatalf("crash at %s: authoritative child not kept: before %v, create %+v", point, before, res)
	case !published && res.Status != "published":
		t.Fatalf("crash at %s: create answered %s", point, res.Status)
	}
}

// checkRecoveryEvidence: after a crash past publication the one recovery verdict
// (preserved) must say that the generation was already published and only the
// release was missing — not read like a failure.
func checkRecoveryEvidence(t *testing.T, point string, r verdict.Record) {
	t.Helper()
	if point != FaultPublish && point != FaultPublished {
		return
	}
	ev := r.Evidence
	if r.Verdict != verdict.VerdictPreserved || r.Reason != verdict.ReasonChildAuthoritative ||
		ev["already_published"] != true || ev["missing_step"] != "release" || ev["error"] != nil ||
		r.Reservation == nil || r.Reservation.Phase != fence.PhasePublished.String() {
		t.Fatalf("crash at %s: recovery verdict does not say only the release was missing: %+v", point, r)
	}
	if r.Session == nil || fmt.Sprint(ev["published_generation"]) != fmt.Sprint(r.Session.Generation) {
		t.Fatalf("crash at %s: published_generation %v vs session %+v", point, ev["published_generation"], r.Session)
	}
}
