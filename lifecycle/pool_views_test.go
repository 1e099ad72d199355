package lifecycle

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// TestPoolCreatedAt: a session served by a standby is dated by its create,
// not by the standby's spawn (which may be long before, even before the
// identity's previous generation ended), in the create's answer, in Show and
// in List — also after the census re-read tmux's session_created.
func TestPoolCreatedAt(t *testing.T) {
	e := startPoolEnv(t, "", 1)
	waitFor(t, "the pool full", func() bool { return e.m.PoolStats().Ready == 1 })
	// tmux's session_created counts whole seconds: let the standby's lie
	// wholly before the create.
	time.Sleep(1100 * time.Millisecond)
	ctx := context.Background()
	id, spec := e.identity("dated")
	t0 := time.Now()
	res, err := e.m.Create(ctx, CreateRequest{Identity: id, Spec: spec})
	if err != nil || e.m.PoolStats().Claims != 1 {
		t.Fatalf("create %+v %v, pool %+v", res, err, e.m.PoolStats())
	}
	if res.Session.CreatedAt.Before(t0) {
		t.Errorf("create's answer: created_at %v before the create (%v)", res.Session.CreatedAt, t0)
	}
	if err := e.census.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	sh, err := e.m.Show(ctx, Ref{Identity: &id})
	if err != nil || sh.Session == nil || sh.Session.CreatedAt.Before(t0) {
		t.Errorf("show: %+v %v: created_at before the create (%v)", sh.Session, err, t0)
	}
	l, err := e.m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Sessions {
		if s.ID == res.Session.ID && s.CreatedAt.Before(t0) {
			t.Errorf("ls: created_at %v before the create (%v)", s.CreatedAt, t0)
		}
	}
}

// TestPoolRestartKeepsDate: a restart in the session a standby served keeps
// the session's date (its @skc-since) instead of going back to the
// standby's spawn, and an agent that never wrote has no activity_at — not
// the standby's spawn second that tmux's dead-pane notice left behind.
func TestPoolRestartKeepsDate(t *testing.T) {
	e := startPoolEnv(t, "", 1)
	time.Sleep(1100 * time.Millisecond) // the standby's creation second wholly before the create
	ctx := context.Background()
	id, spec, marks := e.restartSpec("redated", fence.RestartOnFailure, 10*time.Millisecond, 5, "agent", "exit", "2")
	t0 := time.Now()
	res, err := e.m.Create(ctx, CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil || e.m.PoolStats().Claims != 1 {
		t.Fatalf("create %+v %v, pool %+v", res, err, e.m.PoolStats())
	}
	waitFor(t, "the restarted agent", func() bool { return lines(marks) == 1 && e.published(id).Restart.Restarts == 1 })
	if err := e.census.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	sh, err := e.m.Show(ctx, Ref{Identity: &id})
	if err != nil || sh.Session == nil || sh.Session.ID != res.Session.ID {
		t.Fatalf("show: %+v %v, want the kept session %s", sh.Session, err, res.Session.ID)
	}
	if !sh.Session.CreatedAt.Equal(res.Session.CreatedAt) || sh.Session.CreatedAt.Before(t0) {
		t.Errorf("after the restart: created_at %v, want the create's %v", sh.Session.CreatedAt, res.Session.CreatedAt)
	}
	if sh.Session.ActivityAt != nil {
		t.Errorf("after the restart: activity_at %v, want null (no agent wrote)", sh.Session.ActivityAt)
	}
}

// TestListHidesUnpublished: a create's session, tagged but not yet
// published, is not listed — neither a claimed standby's nor a new
// session's — so `ls` never shows a managed session with no identity.
func TestListHidesUnpublished(t *testing.T) {
	for _, pool := range []int{0, 1} {
		e := startEnvWith(t, &env{poolSize: pool}, "", false)
		if pool > 0 {
			waitFor(t, "the pool full", func() bool { return e.m.PoolStats().Ready == pool })
		}
		var seen, leaked atomic.Int32
		publishHook = func(name string) {
			ctx := context.Background()
			if err := e.census.Refresh(ctx); err != nil {
				t.Error(err)
				return
			}
			s, ok := e.census.ByName(name)
			if !ok || s.Identity() == "" {
				return // the census has not read its tags: nothing to hide yet
			}
			seen.Add(1)
			res, err := e.m.List(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			for _, v := range res.Sessions {
				if v.Name == name || v.Managed && v.StateDir == "" {
					leaked.Add(1)
				}
			}
		}
		id, spec := e.identity(fmt.Sprintf("hidden%d", pool))
		_, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
		publishHook = nil
		if err != nil {
			t.Fatal(err)
		}
		if seen.Load() == 0 || leaked.Load() != 0 {
			t.Fatalf("pool %d: looked %d times with the tags read, listed %d times before publication", pool, seen.Load(), leaked.Load())
		}
		if l, err := e.m.List(context.Background()); err != nil || len(l.Sessions) != 1 || l.Sessions[0].StateDir != id.StateDir {
			t.Fatalf("after publication: %+v %v", l.Sessions, err)
		}
	}
}

// TestPoolOffSweepsLeftovers: a daemon with a pool of 4 is SIGKILLed with a
// full pool; the next one runs with the pool off and still removes every
// standby the dead one left — sessions, processes, hand-off files — and
// keeps the sessions it had created.
func TestPoolOffSweepsLeftovers(t *testing.T) {
	home := newHome(t)
	var pids []int
	for pid := range sigkilledPool(t, home, 2) {
		p, _ := strconv.Atoi(pid)
		pids = append(pids, p)
	}
	e := startEnvWith(t, &env{home: home}, "", false)
	if err := e.m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		waitFor(t, "a dead daemon's standby gone with the pool off", func() bool { return !pidAlive(p) })
	}
	waitFor(t, "standby sessions and hand-off files removed", func() bool {
		for _, r := range e.paneList() {
			if strings.HasPrefix(r.name, standbyPrefix) {
				return false
			}
		}
		ents, _ := os.ReadDir(filepath.Join(home, "pool"))
		return len(ents) == 0
	})
	checkOnePerIdentity(t, e, []string{"k00", "k01"})
	if e.m.PoolStats().Ready != 0 {
		t.Fatal("a standby spawned with the pool off")
	}
}

// TestPoolTrimsGivenBack: a standby given back after a refill replaced it
// (a claim undone) makes the pool one too many; the next fill removes the
// extra — the pool is N standbys, not N plus what came back.
func TestPoolTrimsGivenBack(t *testing.T) {
	e := startEnvWith(t, &env{poolSize: 2}, "", false)
	waitFor(t, "the pool full", func() bool { return e.m.PoolStats().Ready == 2 })
	life, _ := e.m.serverLife()
	sb, ok := e.m.pool.take(life)
	if !ok {
		t.Fatal("no standby to take")
	}
	e.m.pool.refill()
	waitFor(t, "the taken standby replaced", func() bool { return e.m.PoolStats().Ready == 2 })
	e.m.pool.giveBack(sb)
	e.m.pool.refill()
	waitFor(t, "the extra standby removed", func() bool {
		n := 0
		for _, r := range e.paneList() {
			if strings.HasPrefix(r.name, standbyPrefix) {
				n++
			}
		}
		return e.m.PoolStats().Ready == 2 && n == 2
	})
}

// TestStandbyDropsTypedInput: what a person types into a standby (attached
// to a blank pane) is discarded while it waits — it was the claiming agent's
// first input, and a shell agent ran it — and its echo is cleared from the
// screen the identity's session starts with.
func TestStandbyDropsTypedInput(t *testing.T) {
	e := startPoolEnv(t, "", 1)
	var sb paneRow
	for _, r := range e.paneList() {
		if strings.HasPrefix(r.name, standbyPrefix) {
			sb = r
		}
	}
	if out, err := tmuxtest.Command("-S", e.socket, "send-keys", "-t", sb.id, "echo INJECTED", "Enter").CombinedOutput(); err != nil {
		t.Fatalf("send-keys: %v %s", err, out)
	}
	waitFor(t, "the typed line flushed", func() bool { return pendingInput(t, sb.pid) == 0 })
	id, spec := e.identity("typed")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil || strconv.Itoa(res.Session.PanePID) != sb.pid {
		t.Fatalf("create: %+v %v (standby pid %s)", res, err, sb.pid)
	}
	waitFor(t, "the agent runs", func() bool {
		cmd, _ := os.ReadFile("/proc/" + sb.pid + "/cmdline")
		return strings.Contains(string(cmd), "agent\x00sleep")
	})
	out, err := tmuxtest.Command("-S", e.socket, "capture-pane", "-p", "-S", "-", "-t", res.Session.ID).Output()
	if err != nil || strings.Contains(string(out), "INJECTED") {
		t.Fatalf("the claimed session's screen and history: %q %v", out, err)
	}
}

// pendingInput is how many bytes of whole lines wait in the input queue of
// pid's terminal (its stdin).
func pendingInput(t *testing.T, pid string) int {
	f, err := os.Open("/proc/" + pid + "/fd/0")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCINQ)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPoolSweepsClaimedHandoffs: a hand-off file written for a claimed
// standby that was stopped before it read it (a restart or kill right after
// the create) is removed while the pool runs, not only by the next daemon;
// the files prepared for the free standbys stay.
func TestPoolSweepsClaimedHandoffs(t *testing.T) {
	e := startPoolEnv(t, "", 2)
	dir := filepath.Join(e.home, "pool")
	waitFor(t, "the standbys' files", func() bool { ents, _ := os.ReadDir(dir); return len(ents) == 2 })
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(dir, "0123456789abcdef")
	body := fmt.Sprintf("reservation=r\ngeneration=1\ncgroup=\npane_pid=%d\n%s\n", c.Process.Pid, handoffEnd)
	if err := os.WriteFile(orphan, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the orphaned hand-off removed", func() bool { _, err := os.Stat(orphan); return os.IsNotExist(err) })
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Fatalf("pool files after the sweep: %v", ents)
	}
}

// TestPoolTakeKeepsDeadServersStandbysForRemoval: a create right after the
// server died takes no standby of the dead server, and hands every one it
// passes over to the refill's removal (hand-off file and cgroup): they were
// dropped from the free list without it, and both stayed behind (found
// outside-in).
func TestPoolTakeKeepsDeadServersStandbysForRemoval(t *testing.T) {
	old := tmuxctl.ServerLife{PID: 1, StartTime: 1}
	now := tmuxctl.ServerLife{PID: 2, StartTime: 2}
	p := &pool{free: []standby{{token: "a", life: old}, {token: "b", life: old}}}
	if sb, ok := p.take(now); ok {
		t.Fatalf("took %+v of a dead server", sb)
	}
	if len(p.free) != 0 || len(p.dead) != 2 || p.dead[0].token != "a" || p.dead[1].token != "b" {
		t.Fatalf("free %+v, dead %+v: want both for removal", p.free, p.dead)
	}
}
