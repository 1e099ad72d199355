package lifecycle

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/sqlite"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// A helper waiting for its publication re-reads the fence when woken: with its
// own poll made an hour long, the wake after the publish is the only way it
// can return, and a wake before it (nothing published yet) does not end the
// wait.
func TestHelperWokenAfterPublish(t *testing.T) {
	old := helperPoll
	helperPoll = time.Hour
	t.Cleanup(func() { helperPoll = old })
	home := newHome(t)
	st, err := sqlite.Open(filepath.Join(home, "fence.sqlite"), fence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	dir := filepath.Join(home, "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	id := fence.Identity{StateDir: dir, SessionID: "woken"}
	ctx := context.Background()
	rr, err := st.Reserve(ctx, id, fence.Spec{StateFile: filepath.Join(dir, "woken.jsonl"), Argv: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	row := rr.Reservation
	// Unbuffered, so each send returns only once the helper has read the
	// fence and is waiting: the first wake is spurious (nothing published),
	// the second follows the publish.
	wake := make(chan os.Signal)
	done := make(chan bool, 1)
	go func() { done <- waitPublished(ctx, st, row, wake, false) }()
	wake <- syscall.SIGURG
	advancePublish(t, st, &row, "$1", tmuxctl.ServerLife{PID: 4242, StartTime: 1700000000})
	// The read that followed the first wake may already have seen the
	// publication (it runs beside advancePublish): then the helper returns
	// without waiting for the second wake, which must not block the test.
	second := wake
	bound := time.After(time.Minute) // a bound against hanging, not a speed claim
	for {
		select {
		case second <- syscall.SIGURG:
			second = nil
		case ok := <-done:
			if !ok {
				t.Fatal("waitPublished: false after its generation was published")
			}
			return
		case <-bound:
			t.Fatal("the helper did not re-read the fence when woken")
		}
	}
}

// advancePublish takes r through the saga's phases, as a session tmuxID of
// life, and publishes it.
func advancePublish(t testing.TB, s fence.Fence, r *fence.Reservation, tmuxID string, life tmuxctl.ServerLife) {
	t.Helper()
	ctx := context.Background()
	for _, st := range []struct {
		to fence.Phase
		p  fence.Patch
	}{
		{fence.PhaseHelperInvoked, fence.Patch{AttemptName: "skc-" + r.ID}},
		{fence.PhaseSpawned, fence.Patch{TmuxID: tmuxID, PanePID: 1, ServerPID: life.PID, ServerStart: life.StartTime}},
		{fence.PhaseTagged, fence.Patch{}},
	} {
		if err := s.Advance(ctx, r, st.to, st.p); err != nil {
			t.Fatal(err)
		}
	}
	rec := verdict.Record{Action: verdict.ActionCreate, Outcome: verdict.OutcomeSuccess, Verdict: verdict.VerdictPublished}
	if _, _, err := s.Publish(ctx, r, rec); err != nil {
		t.Fatal(err)
	}
}

// The wake goes only to a pane process that still runs the helper's binary:
// once the helper has exec'd its agent (same pid), the agent is not sent it.
func TestWakeOnlyReachesTheHelper(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m := &Manager{cfg: Config{HelperPath: exe}}
	if !m.isHelper(os.Getpid()) {
		t.Fatal("this process runs the helper's binary, isHelper says no")
	}
	agent := exec.Command("sleep", "1000")
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = agent.Process.Kill(); _ = agent.Wait() }()
	// Once sleep has exec'd, its exe is sleep's: wait for that, bounded.
	deadline := time.Now().Add(time.Minute)
	for {
		if l, _ := os.Readlink("/proc/" + strconv.Itoa(agent.Process.Pid) + "/exe"); filepath.Base(l) == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sleep did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if m.isHelper(agent.Process.Pid) {
		t.Fatal("an agent (another executable) taken for the helper")
	}
	if m.isHelper(1 << 30) {
		t.Fatal("a pid that does not exist taken for the helper")
	}
}
