package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"

	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

// createChild is one daemon process creating an identity: `createchild HOME NAME`.
// It prints the outcome (status or error code) on stdout.
func createChild(args []string) int {
	home, name := args[0], args[1]
	e := &env{home: home, socket: filepath.Join(home, "tmux.sock")}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { e.close(); cancel() }()
	e.cancel = cancel
	if err := e.open(ctx, ""); err != nil {
		fmt.Fprintln(os.Stderr, "createchild:", err)
		return 2
	}
	id, spec := e.identity(name)
	res, err := e.m.Create(ctx, CreateRequest{Identity: id, Spec: spec, Wait: 30 * time.Second})
	if err != nil {
		fmt.Println(verdict.CodeOf(err))
		return 0
	}
	fmt.Println(res.Status)
	return 0
}

// TestCrossProcessCreatesOneSession: eight daemons' creates of one identity
// race; exactly one publishes. Each process has its own control client, all
// attaching, creating and detaching together: tmux before 3.7 crashed in
// control_write under this (about one run in ten, then two "published" in
// two server lives); tmuxctl's attach lock now keeps our clients from
// notifying each other mid-identify, so no outcome may be tmux_unavailable.
func TestCrossProcessCreatesOneSession(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, _ := e.identity("xproc")
	exe, _ := os.Executable()
	const n = 8
	var wg sync.WaitGroup
	outs := make([]string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var out bytes.Buffer
			cmd := exec.Command(exe, "createchild", e.home, "xproc")
			cmd.Stdout, cmd.Stderr = &out, os.Stderr
			if err := cmd.Run(); err != nil {
				outs[i] = "exit: " + err.Error()
				return
			}
			outs[i] = strings.TrimSpace(out.String())
		}(i)
	}
	wg.Wait()
	published := 0
	for _, o := range outs {
		switch o {
		case "published":
			published++
		case "existing", verdict.CodeIdentityReservedLive:
		default:
			t.Errorf("unexpected outcome %q", o)
		}
	}
	if published != 1 || t.Failed() {
		for _, r := range e.verdicts(id) {
			t.Logf("%s %s %v", r.Verdict, r.Code, r.Evidence)
		}
		t.Fatalf("outcomes %v", outs)
	}
	if s := e.sessions(id.Digest()); len(s) != 1 {
		t.Fatalf("sessions %v", s)
	}
	if recs := e.verdicts(id); count(recs, "published") != 1 || count(recs, "existing")+count(recs, "refused")+count(recs, "failed")+1 != n {
		for _, r := range recs {
			t.Logf("%s %s %v", r.Verdict, r.Code, r.Evidence)
		}
		t.Fatalf("verdicts %v", verdictNames(recs))
	}
}

// TestHostileHelperPath: the pane command has several argv words, so tmux execs it
// without a shell and without format expansion; a helper path full of shell and
// tmux metacharacters must still start.
func TestHostileHelperPath(t *testing.T) {
	e := startEnv(t, "", "", false)
	dir := filepath.Join(e.home, `we ird;$HOME #{pid} 'q"~`)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	link := filepath.Join(dir, "hel per")
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	e.m.cfg.HelperPath = link
	id, res := e.create(t, "hostile")
	waitFor(t, "agent start", func() bool { return agentPID(res.Session.PanePID) != 0 })
	// The pane's process is the agent by now (the helper exec'd it); the
	// helper's start record, by the pane's pid, says the helper ran there.
	pm, ok, err := e.store.Postmortem(context.Background(), id, res.Session.Generation)
	if err != nil || !ok || pm.HelperPID != res.Session.PanePID {
		t.Fatalf("helper start record %+v %v %v, want helper pid %d", pm, ok, err, res.Session.PanePID)
	}
	if n := len(e.sessions(id.Digest())); n != 1 {
		t.Fatalf("%d sessions", n)
	}
}

// TestPaneProcessIsTheAgent: once its gate opened the helper is the agent (an
// exec, same pid): SIGTERM to the pane's pid kills the agent, and the dead
// pane's signal is the ended verdict's exit.
func TestPaneProcessIsTheAgent(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, res := e.create(t, "fwd")
	waitFor(t, "agent start", func() bool { return agentPID(res.Session.PanePID) != 0 })
	if err := syscall.Kill(res.Session.PanePID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rec := e.ended(t, id)
	if rec.ExitKind != verdict.ExitKindExit || rec.Exit == nil || rec.Exit.Signal != "SIGTERM" {
		t.Fatalf("ended %+v exit %+v", rec, rec.Exit)
	}
}

func TestListAndShow(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, res := e.create(t, "show")
	l, err := e.m.List(context.Background())
	if err != nil || !l.Census.Synced || l.Census.TmuxVersion == "" {
		t.Fatalf("list %+v %v", l, err)
	}
	listed := false
	for _, v := range l.Sessions {
		listed = listed || v.ID == res.Session.ID && v.Authoritative && v.SessionID == "show"
	}
	if !listed {
		t.Fatalf("a list right after create lacks the session: %+v", l)
	}
	sh, err := e.m.Show(context.Background(), Ref{Name: res.Session.Name})
	if err != nil || sh.Session.ID != res.Session.ID || sh.Reservation != nil || len(sh.Verdicts) != 1 {
		t.Fatalf("show %+v %v", sh, err)
	}
	b, _ := json.Marshal(sh)
	if !bytes.Contains(b, []byte(`"reservation":null`)) || !bytes.Contains(b, []byte(`"state_dir":"`+id.StateDir+`"`)) {
		t.Fatalf("show json %s", b)
	}
	// A prefix of the name is not the session (tmux would prefix-match it).
	if _, err := e.m.Show(context.Background(), Ref{Name: res.Session.Name[:10]}); verdict.CodeOf(err) != verdict.CodeNotFound {
		t.Fatalf("prefix show: %v", err)
	}
}

// TestCtrlCReachesAgentOnly: a human's Ctrl-C (typed into the pane) goes to the
// terminal's foreground group, which is the agent's own (the pane's process,
// a session and group leader): the agent dies of SIGINT, which tmux keeps.
func TestCtrlCReachesAgentOnly(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, res := e.create(t, "ctrlc")
	waitFor(t, "agent start", func() bool { return agentPID(res.Session.PanePID) != 0 })
	if out, err := tmuxtest.Command("-S", e.socket, "send-keys", "-t", res.Session.ID, "C-c").CombinedOutput(); err != nil {
		t.Fatalf("send-keys: %v %s", err, out)
	}
	rec := e.ended(t, id)
	if rec.ExitKind != verdict.ExitKindExit || rec.Exit == nil || rec.Exit.Signal != "SIGINT" {
		t.Fatalf("ended %+v exit %+v", rec, rec.Exit)
	}
}

// TestShutdownAbandonsInflight: a create still in flight when Shutdown's context
// ends is abandoned (its row kept for the next start), and new creates are refused.
func TestShutdownAbandonsInflight(t *testing.T) {
	e := startEnv(t, "", "", false)
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	withFaults(e, func(args []string) (bool, error) {
		if args[0] == "new-session" {
			entered <- struct{}{}
			<-gate
			return false, tmuxctl.ErrNotConnected
		}
		return false, nil
	})
	id, spec := e.identity("shutdown")
	done := make(chan error, 1)
	go func() {
		_, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
		done <- err
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := e.m.Shutdown(ctx); err == nil {
		t.Fatal("shutdown reported a clean finish with a create in flight")
	}
	rows, _ := e.store.Reservations(context.Background())
	if len(rows) != 1 || !rows[0].Abandoned {
		t.Fatalf("rows %+v", rows)
	}
	if _, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec}); verdict.CodeOf(err) != verdict.CodeBusy {
		t.Fatalf("create after shutdown: %v", err)
	}
	close(gate)
	<-done
}

// TestSymlinkedStateDirIsOneIdentity: two spellings of one state_dir are one
// identity; the tags carry the canonical digest, so the second create is existing.
func TestSymlinkedStateDirIsOneIdentity(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec := e.identity("alias")
	link := filepath.Join(e.home, "alias-link")
	if err := os.Symlink(id.StateDir, link); err != nil {
		t.Fatal(err)
	}
	aliased := id
	aliased.StateDir = link
	aspec := spec
	aspec.StateFile = filepath.Join(link, "alias.jsonl")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: aliased, Spec: aspec})
	if err != nil {
		t.Fatal(err)
	}
	if res.Session.StateDir != id.StateDir {
		t.Fatalf("state_dir %q, want the canonical %q", res.Session.StateDir, id.StateDir)
	}
	again, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	if err != nil || again.Status != "existing" || again.Session.ID != res.Session.ID {
		t.Fatalf("aliased create %+v %v", again, err)
	}
	if recs := e.verdicts(id); count(recs, "published") != 1 || count(recs, "existing") != 1 {
		t.Fatalf("verdicts under the canonical identity: %v", verdictNames(recs))
	}
}
