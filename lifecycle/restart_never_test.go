package lifecycle

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestRestartVerbStartFailsNever: under policy never, a restart request whose
// start fails is answered by that failure and not tried again — no later
// starts, no next_start_at: the identity gives up at once (it used to be
// retried with doubling delays until the start limit, a policy it never
// had). A later request starts it once the command is back.
func TestRestartVerbStartFailsNever(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec := e.identity("nevergone")
	script, write := exitScript(t, id)
	spec.Argv = []string{script}
	if _, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "generation 1 ended", func() bool { return count(e.verdicts(id), verdict.VerdictEnded) == 1 })
	if err := os.Remove(script); err != nil {
		t.Fatal(err)
	}
	ctx := boundedCtx(t)
	_, err := e.m.Restart(ctx, Ref{Identity: &id})
	ve := verdict.AsError(err)
	if ve == nil || ve.Code != verdict.CodeSpawnFailed || ve.Details["reason"] != SpawnExecutableNotFound || ve.Details["next_start_at"] != nil {
		t.Fatalf("restart of a removed command under policy never: %v %+v", err, ve)
	}
	if p := e.published(id); p.Restart.State != fence.RestartGaveUp || p.Restart.Failures != 1 {
		t.Fatalf("after the failed start: %+v, want gave up after that one start", p.Restart)
	}
	write()
	v, err := e.m.Restart(ctx, Ref{Identity: &id})
	if err != nil || v.Generation <= 1 {
		t.Fatalf("restart with the command back: %+v %v", v, err)
	}
}

// exitScript writes an agent script in id's state dir that exits 2, and
// returns its path and the func that writes it again (after a test removed
// it: a command gone since the create).
func exitScript(t *testing.T, id fence.Identity) (string, func()) {
	script := filepath.Join(id.StateDir, "agent.sh")
	write := func() {
		if err := os.WriteFile(script, []byte("#!/bin/sh\nexit 2\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write()
	return script, write
}
