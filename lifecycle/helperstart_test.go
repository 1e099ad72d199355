package lifecycle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestHelperMissingIsRefused: a pane helper binary that is gone (removed under
// a running daemon) refuses the create spawn_failed (helper_missing) before
// anything is made, instead of a tag_failed naming tmux.
func TestHelperMissingIsRefused(t *testing.T) {
	e := startEnv(t, "", "", false)
	e.m.cfg.HelperPath = filepath.Join(e.home, "no-such-helper")
	id, spec := e.identity("nohelper")
	_, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	var ve *verdict.Error
	if !errors.As(err, &ve) || ve.Code != verdict.CodeSpawnFailed || ve.Details["reason"] != SpawnHelperMissing ||
		ve.Details["field"] != "helper" {
		t.Fatalf("create with the helper gone: %#v", err)
	}
	if len(e.sessions(id.Digest())) != 0 {
		t.Fatal("a session was made")
	}
	if rows, err := e.store.Reservations(context.Background()); err != nil || len(rows) != 0 {
		t.Fatalf("rows left %+v %v", rows, err)
	}
}

// TestHelperThatCannotStartIsAnEnd: the saga no longer waits for the pane helper,
// so a helper that cannot start (here: a binary that exits at once) is not a failed create but
// the session's end — end detection writes the generation's ended verdict. (If the
// pane is gone before the tags land, the create fails tag_failed and compensates
// instead, and spawn_failed if it is gone before the census admits it.) Either
// way no reservation row is left behind.
func TestHelperThatCannotStartIsAnEnd(t *testing.T) {
	e := startEnv(t, "", "", false)
	broken := filepath.Join(t.TempDir(), "broken-helper")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\nexit 3\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	e.m.cfg.HelperPath = broken
	id, spec := e.identity("nohelper")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	switch {
	case err == nil:
		if res.Status != verdict.VerdictPublished {
			t.Fatalf("create: %+v", res)
		}
		rec := e.ended(t, id)
		if rec.Session == nil || rec.Session.Generation != res.Session.Generation {
			t.Fatalf("ended %+v, want generation %d", rec, res.Session.Generation)
		}
	case verdict.CodeOf(err) == verdict.CodeTagFailed, verdict.CodeOf(err) == verdict.CodeSpawnFailed:
		// The pane died before the tags landed, or before the census admitted
		// it (a list had shown it gone): the create failed and compensated.
		if rec := lastVerdict(t, e, id); rec.Evidence["compensation"] != compReleased {
			t.Fatalf("verdict %+v", rec)
		}
	default:
		t.Fatalf("create: %v", err)
	}
	waitFor(t, "no session", func() bool { return len(e.sessions(id.Digest())) == 0 })
	if rows, err := e.store.Reservations(context.Background()); err != nil || len(rows) != 0 {
		t.Fatalf("rows left %+v %v", rows, err)
	}
}

// TestExecFailedIsRecorded: a command that passes the create's check but that
// the kernel refuses to execute (no #! line, not a binary: ENOEXEC) ends its
// generation with the helper's postmortem, status 126 and exit_source
// exec_failed, and the helper's reason in the output tail.
func TestExecFailedIsRecorded(t *testing.T) {
	e := startEnv(t, "", "", false)
	bogus := filepath.Join(t.TempDir(), "not-a-program")
	if err := os.WriteFile(bogus, []byte("no interpreter line here\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	id, spec := e.identity("execfail")
	spec.Argv = []string{bogus}
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	if err != nil || res.Status != verdict.VerdictPublished {
		t.Fatalf("create: %+v %v", res, err)
	}
	rec := e.ended(t, id)
	if rec.ExitKind != verdict.ExitKindExit || rec.Exit == nil || rec.Exit.Status == nil || *rec.Exit.Status != 126 ||
		rec.Evidence["exit_source"] != "exec_failed" {
		t.Fatalf("ended %+v exit %+v", rec, rec.Exit)
	}
	if !strings.Contains(rec.OutputTail, "exec format error") {
		t.Errorf("output tail %q: want the helper's reason", rec.OutputTail)
	}
}

// TestHelperWaitsOutAnUnreachableFence: a pane helper whose fence is
// unreachable (a fleet's PostgreSQL restarting right after the create was
// answered published) keeps waiting for it, says so on its pane, and goes on
// once it answers; it used to give up after 10 s, and the published agent
// never ran (found outside-in). Other errors end the wait at once, and so
// does the helper's context.
func TestHelperWaitsOutAnUnreachableFence(t *testing.T) {
	var out strings.Builder
	notice, retryMax, w := fenceWaitNotice, fenceRetryMax, fenceWaitOut
	fenceWaitNotice, fenceRetryMax, fenceWaitOut = 20*time.Millisecond, 2*time.Millisecond, &out
	t.Cleanup(func() { fenceWaitNotice, fenceRetryMax, fenceWaitOut = notice, retryMax, w })

	down := verdict.Errorf(verdict.CodeFenceUnavailable, nil, "fence down")
	calls, afterNotice := 0, 0
	err := retryFence(context.Background(), func() error {
		calls++
		if strings.Contains(out.String(), "waiting for the fence") {
			afterNotice++
		}
		if afterNotice < 20 { // well past the notice: the old deadline's place
			return down
		}
		return nil
	})
	if err != nil || !strings.Contains(out.String(), "the fence answers again") {
		t.Fatalf("retryFence = %v after %d calls; pane said %q", err, calls, out.String())
	}

	other := verdict.Errorf(verdict.CodeInvalidRequest, nil, "bad")
	calls = 0
	if err := retryFence(context.Background(), func() error { calls++; return other }); err != other || calls != 1 {
		t.Fatalf("another error: %v after %d calls", err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := retryFence(ctx, func() error { return down }); verdict.CodeOf(err) != verdict.CodeFenceUnavailable {
		t.Fatalf("cancelled: %v", err)
	}
}
