package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
	"github.com/skc-supervisor/skc-supervisor/proctree"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// startPoolEnv starts an env whose Manager keeps a warm pool of size and
// waits until the pool is full.
func startPoolEnv(t *testing.T, home string, size int) *env {
	t.Helper()
	e := startEnvWith(t, &env{home: home, poolSize: size}, "", false)
	waitFor(t, "the pool full", func() bool { return e.m.PoolStats().Ready == size })
	return e
}

// paneList is one fork's read of every session: id, name, identity tag, pane pid.
type paneRow struct{ id, name, ident, pid string }

func (e *env) paneList() []paneRow {
	out, err := tmuxtest.Command("-S", e.socket, "list-sessions", "-F",
		"#{session_id}\t#{session_name}\t#{@skc-identity}\t#{pane_pid}").Output()
	if err != nil {
		return nil
	}
	var rows []paneRow
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(l, "\t")
		if len(f) == 4 {
			rows = append(rows, paneRow{f[0], f[1], f[2], f[3]})
		}
	}
	return rows
}

// checkNoStandbyTagged fails when a standby session carries an identity, or an
// identity's session a standby's name: a standby is never any identity's.
func checkNoStandbyTagged(rows []paneRow) error {
	for _, r := range rows {
		if strings.HasPrefix(r.name, standbyPrefix) && r.ident != "" {
			return fmt.Errorf("standby %s %s carries identity %s", r.id, r.name, r.ident)
		}
		if r.ident != "" && !strings.HasPrefix(r.name, "skc-"+r.ident[:12]+"-") {
			return fmt.Errorf("session %s %s carries identity %s under another name", r.id, r.name, r.ident)
		}
	}
	return nil
}

// TestPoolClaimRunsAgent: a create with a pool claims a standby, which runs
// the agent with the request's argv, cwd and env in the standby's own pane
// process (no process of ours left), tagged and named as its attempt; the pool
// refills; ls and show never see a standby.
func TestPoolClaimRunsAgent(t *testing.T) {
	e := startPoolEnv(t, "", 2)
	standbys := map[string]bool{}
	for _, r := range e.paneList() {
		if strings.HasPrefix(r.name, standbyPrefix) {
			standbys[r.pid] = true
		}
	}
	if len(standbys) != 2 {
		t.Fatalf("standbys %v", e.paneList())
	}
	list, err := e.m.List(context.Background())
	if err != nil || len(list.Sessions) != 0 {
		t.Fatalf("ls with only standbys: %+v %v", list.Sessions, err)
	}
	for _, r := range e.paneList() {
		if _, err := e.m.Show(context.Background(), Ref{Name: r.id}); verdict.CodeOf(err) != verdict.CodeNotFound {
			t.Fatalf("show %s (a standby): %v", r.id, err)
		}
	}
	id, spec := e.identity("claimed")
	out := filepath.Join(e.home, "pwdenv")
	spec.Argv = []string{spec.Argv[0], "agent", "pwdenv", out}
	spec.Env = []string{"SKC_POOL_TEST=yes"}
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil || res.Status != verdict.VerdictPublished {
		t.Fatalf("create: %+v %v", res, err)
	}
	if st := e.m.PoolStats(); st.Claims != 1 {
		t.Fatalf("pool stats %+v: the create did not claim", st)
	}
	if !standbys[strconv.Itoa(res.Session.PanePID)] {
		t.Fatalf("session pane %d is not a standby's %v", res.Session.PanePID, standbys)
	}
	waitFor(t, "the agent's report", func() bool { _, err := os.Stat(out); return err == nil })
	body, _ := os.ReadFile(out)
	if !strings.HasPrefix(string(body), spec.Cwd+"\n") || !strings.Contains(string(body), "\nSKC_POOL_TEST=yes\n") {
		t.Fatalf("agent cwd/env not applied:\n%s", body)
	}
	cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", res.Session.PanePID))
	if !strings.Contains(string(cmd), "pwdenv") || strings.Contains(string(cmd), "helper") {
		t.Fatalf("pane process is not the agent: %q", cmd)
	}
	if got := e.sessions(id.Digest()); len(got) != 1 || got[0] != res.Session.ID {
		t.Fatalf("sessions %v", got)
	}
	checkClaimStart(t, e, id, res.Session.PanePID)
	waitFor(t, "the pool refilled", func() bool { return e.m.PoolStats().Ready == 2 })
	if err := checkNoStandbyTagged(e.paneList()); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	if err := e.reg.WriteText(&text); err != nil || !strings.Contains(text.String(), "\nskc_pool_claims_total 1\n") ||
		!strings.Contains(text.String(), "\nskc_pool_standbys 2\n") {
		t.Fatalf("metrics: %v\n%s", err, text.String())
	}
	list, err = e.m.List(context.Background())
	if err != nil || len(list.Sessions) != 1 || list.Sessions[0].Name != res.Session.Name {
		t.Fatalf("ls: %+v %v", list.Sessions, err)
	}
}

// TestPoolConcurrentCreates: 32 concurrent creates with a pool of 4 — every
// identity gets exactly one session, running its agent, and no standby is
// ever seen as an identity's session (sampled from tmux throughout).
func TestPoolConcurrentCreates(t *testing.T) {
	e := startPoolEnv(t, "", 4)
	names := burst(t, e, "c", 32)
	checkOnePerIdentity(t, e, names)
	if st := e.m.PoolStats(); st.Claims == 0 {
		t.Fatalf("pool stats %+v: no create claimed a standby", st)
	}
	waitFor(t, "the pool refilled", func() bool { return e.m.PoolStats().Ready == 4 })
}

// burst runs n creates at once while a sampler checks tmux's sessions for a
// tagged standby; it returns the identities' names.
func burst(t *testing.T, e *env, prefix string, n int) []string {
	t.Helper()
	stop := make(chan struct{})
	var bad atomic.Value
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			if err := checkNoStandbyTagged(e.paneList()); err != nil {
				bad.Store(err.Error())
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	names := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range names {
		names[i] = fmt.Sprintf("%s%02d", prefix, i)
		id, spec := e.identity(names[i])
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req := CreateRequest{Identity: id, Spec: spec, Wait: 30 * time.Second}
			_, errs[i] = e.m.Create(context.Background(), req)
			for try := 0; retryableBurst(errs[i]) && try < 10; try++ {
				// A fence busy beyond its bound on a loaded machine (the
				// same without a pool): a client retries.
				_, errs[i] = e.m.Create(context.Background(), req)
			}
		}(i)
	}
	wg.Wait()
	close(stop)
	sampler.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %s: %v", names[i], err)
		}
	}
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
	return names
}

// retryableBurst: what a client retries (503: the fence stayed busy, or too
// many creates in flight).
func retryableBurst(err error) bool {
	c := verdict.CodeOf(err)
	return err != nil && (c == verdict.CodeFenceUnavailable || c == verdict.CodeBusy || c == verdict.CodeIdentityFenceContended)
}

// checkOnePerIdentity: each identity has exactly one session, whose pane runs
// the agent (the helper exec'd it), and ls shows exactly these sessions.
func checkOnePerIdentity(t *testing.T, e *env, names []string) {
	t.Helper()
	for _, n := range names {
		id, _ := e.identity(n)
		got := e.sessions(id.Digest())
		if len(got) != 1 {
			t.Fatalf("identity %s: sessions %v", n, got)
		}
	}
	rows := e.paneList()
	if err := checkNoStandbyTagged(rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.ident == "" {
			continue
		}
		waitFor(t, "agent of "+r.name, func() bool {
			b, _ := os.ReadFile("/proc/" + r.pid + "/cmdline")
			return strings.Contains(string(b), "\x00agent\x00")
		})
	}
	list, err := e.m.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range list.Sessions {
		if strings.HasPrefix(v.Name, standbyPrefix) {
			t.Fatalf("ls shows a standby: %+v", v)
		}
	}
}

// poolChild is a daemon with a warm pool, SIGKILLed at the end:
//
//	poolchild burst HOME N OUT  — N concurrent creates, then the free
//	                              standbys' "token pid" lines to OUT, then SIGKILL
//	poolchild fault HOME POINT  — one create with SKC_FAULT=after:POINT
func poolChild(args []string) int {
	mode, home := args[0], args[1]
	fault := ""
	if mode == "fault" {
		fault = "after:" + args[2]
	}
	e := &env{home: home, socket: filepath.Join(home, "tmux.sock"), poolSize: 4}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := e.open(ctx, fault); err != nil {
		fmt.Fprintln(os.Stderr, "poolchild:", err)
		return 2
	}
	go func() { _ = e.m.Run(ctx) }()
	for e.m.PoolStats().Ready < 4 {
		time.Sleep(10 * time.Millisecond)
	}
	if mode == "fault" {
		id, spec := e.identity("crash")
		_, err := e.m.Create(ctx, CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
		fmt.Fprintln(os.Stderr, "poolchild: survived the fault point:", err)
		return 3
	}
	n, _ := strconv.Atoi(args[2])
	var wg sync.WaitGroup
	var failed atomic.Bool
	for i := 0; i < n; i++ {
		id, spec := e.identity(fmt.Sprintf("k%02d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := CreateRequest{Identity: id, Spec: spec, Wait: 30 * time.Second}
			_, err := e.m.Create(ctx, req)
			for try := 0; retryableBurst(err) && try < 10; try++ {
				_, err = e.m.Create(ctx, req)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "poolchild: create:", err)
				failed.Store(true)
			}
		}()
	}
	wg.Wait()
	if failed.Load() {
		return 4
	}
	for e.m.PoolStats().Ready < 4 {
		time.Sleep(10 * time.Millisecond)
	}
	e.m.pool.mu.Lock()
	var b strings.Builder
	for _, sb := range e.m.pool.free {
		fmt.Fprintf(&b, "%s %d\n", sb.token, sb.panePID)
	}
	e.m.pool.mu.Unlock()
	_ = os.WriteFile(args[3], []byte(b.String()), 0o600)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// sigkilledPool runs a daemon with a pool of 4 in a child process that makes
// n creates at once and SIGKILLs itself with a full pool, and returns the
// standbys it left, token by pid.
func sigkilledPool(t *testing.T, home string, n int) map[string]string {
	t.Helper()
	exe, _ := os.Executable()
	outFile := filepath.Join(home, "standbys")
	cmd := exec.Command(exe, "poolchild", "burst", home, strconv.Itoa(n), outFile)
	cmd.Stderr = os.Stderr
	err := cmd.Run()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("pool child did not die of SIGKILL: %v", err)
	}
	b, err := os.ReadFile(outFile)
	if err != nil {
		t.Fatal(err)
	}
	old := map[string]string{} // pid → token
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		tok, pid, _ := strings.Cut(l, " ")
		old[pid] = tok
	}
	if len(old) != 4 {
		t.Fatalf("standbys left: %q", b)
	}
	return old
}

// TestPoolSIGKILLedDaemon: a daemon with a pool of 4 runs 32 creates at once
// and is SIGKILLed with a full pool; the next daemon removes every standby it
// left (never hands one out), keeps the 32 sessions, and serves 32 more
// creates, each identity with exactly one session.
func TestPoolSIGKILLedDaemon(t *testing.T) {
	home := newHome(t)
	old := sigkilledPool(t, home, 32)
	e := startEnvWith(t, &env{home: home, poolSize: 4}, "", false)
	if err := e.m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool full again", func() bool { return e.m.PoolStats().Ready == 4 })
	for pid, tok := range old {
		for _, r := range e.paneList() {
			if r.pid == pid || r.name == standbyPrefix+tok {
				t.Fatalf("a dead daemon's standby %s (pid %s) is still there: %+v", tok, pid, r)
			}
		}
		p, _ := strconv.Atoi(pid)
		waitFor(t, "old standby gone", func() bool { return !pidAlive(p) })
	}
	names := burst(t, e, "r", 32)
	first := make([]string, 32)
	for i := range first {
		first[i] = fmt.Sprintf("k%02d", i)
	}
	checkOnePerIdentity(t, e, append(first, names...))
	for _, r := range e.paneList() {
		if _, ok := old[r.pid]; ok {
			t.Fatalf("session %+v runs in a dead daemon's standby", r)
		}
	}
	if base := e.m.cgroupBase; base != "" {
		// Their cgroups go too, once empty: a later refill removes them.
		for _, tok := range old {
			dir := filepath.Join(base, standbyCgroupPrefix+tok)
			waitFor(t, "a dead daemon's standby cgroup removed", func() bool {
				_, err := os.Stat(dir)
				return errors.Is(err, os.ErrNotExist)
			})
		}
	}
}

// TestPoolFaultPoints: a daemon with a pool SIGKILLed at every point of a
// claimed create, in its saga's order (pool_claim.go: reserved, spawned,
// handed-off, claimed — renamed and tagged —, published and released), and at
// the pool's own refill point; the next daemon's recovery and sweep leave
// exactly one session for the identity after a create, and no standby of the
// dead daemon. A claim passes no helper_invoked, new-session, tagged or
// publish point (TestPoolClaimSkipsPoints).
func TestPoolFaultPoints(t *testing.T) {
	points := []string{FaultReserved, FaultSpawned, FaultHandedOff, FaultClaimed, FaultPublished,
		FaultStandbySpawned}
	for _, point := range points {
		t.Run(point, func(t *testing.T) { testPoolFaultPoint(t, point) })
	}
}

func testPoolFaultPoint(t *testing.T, point string) {
	home := newHome(t)
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "poolchild", "fault", home, point)
	cmd.Stderr = os.Stderr
	err := cmd.Run()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("pool child did not die of SIGKILL at %s: %v", point, err)
	}
	// What the dead daemon left, read before the next one starts (its pool
	// sweeps and refills at once).
	var left []paneRow
	for _, r := range (&env{socket: filepath.Join(home, "tmux.sock")}).paneList() {
		if strings.HasPrefix(r.name, standbyPrefix) {
			left = append(left, r)
		}
	}
	if len(left) == 0 {
		t.Fatalf("crash at %s: no standby left to check", point)
	}
	e := startEnvWith(t, &env{home: home, poolSize: 4}, "", false)
	if err := e.m.Recover(context.Background()); err != nil {
		t.Fatalf("recover: %v", err)
	}
	waitFor(t, "the pool full again", func() bool { return e.m.PoolStats().Ready == 4 })
	id, spec := e.identity("crash")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("create after crash at %s: %v", point, err)
	}
	if got := e.sessions(id.Digest()); len(got) != 1 || got[0] != res.Session.ID {
		t.Fatalf("after crash at %s: sessions %v, create %+v", point, got, res)
	}
	published := point == FaultPublished
	if published != (res.Status == verdict.VerdictExisting) {
		t.Fatalf("after crash at %s: create answered %s", point, res.Status)
	}
	for _, r := range left {
		if r.pid == strconv.Itoa(res.Session.PanePID) {
			t.Fatalf("after crash at %s: the dead daemon's standby %+v was handed out", point, r)
		}
		for _, now := range e.paneList() {
			if now.id == r.id {
				t.Fatalf("after crash at %s: the dead daemon's standby %+v is still there", point, r)
			}
		}
	}
	if err := checkNoStandbyTagged(e.paneList()); err != nil {
		t.Fatal(err)
	}
	checkPoolRecovered(t, e, point, id, res)
}

// checkPoolRecovered: one recovery verdict (none when no create had begun), no
// row left, and the session's agent running.
func checkPoolRecovered(t *testing.T, e *env, point string, id fence.Identity, res CreateResult) {
	t.Helper()
	recoveries := 0
	for _, r := range e.verdicts(id) {
		if r.Action == verdict.ActionRecover {
			recoveries++
		}
	}
	want := 1
	if point == FaultStandbySpawned || point == FaultPublished {
		want = 0 // no create had begun, or its row went with its publication
	}
	if recoveries != want {
		t.Fatalf("after crash at %s: %d recovery verdicts", point, recoveries)
	}
	if rows, _ := e.store.Reservations(context.Background()); len(rows) != 0 {
		t.Fatalf("after crash at %s: rows left %+v", point, rows)
	}
	waitFor(t, "the agent running", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", res.Session.PanePID))
		return strings.Contains(string(b), "\x00agent\x00")
	})
}

// TestPoolClaimSkipsPoints: a create served by a standby records no
// helper_invoked or tagged phase, sends no new-session and publishes and
// releases in one transaction, so a daemon set to die at those points lives
// through the claimed create and it publishes.
func TestPoolClaimSkipsPoints(t *testing.T) {
	for _, point := range []string{FaultHelperInvoked, FaultNewSession, FaultTagged, FaultPublish} {
		t.Run(point, func(t *testing.T) {
			home := newHome(t)
			exe, _ := os.Executable()
			out, err := exec.Command(exe, "poolchild", "fault", home, point).CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(string(out), "survived the fault point: <nil>") {
				t.Fatalf("a claimed create at %s: %v\n%s", point, err, out)
			}
		})
	}
}

// failSpawnedFence refuses (fence_unavailable, writing nothing) the first
// write that records a claimed standby: the reservation that carries the
// claim (ReserveClaim, an identity's first generation) or, for a later
// generation, the claim's Advance to spawned.
type failSpawnedFence struct {
	fence.Fence
	left atomic.Int64
}

func (f *failSpawnedFence) refused() error {
	return verdict.Errorf(verdict.CodeFenceUnavailable, nil, "test: the fence refuses the claim's write")
}

func (f *failSpawnedFence) ReserveClaim(ctx context.Context, id fence.Identity, spec fence.Spec, c fence.Claim) (fence.ReserveResult, error) {
	if f.left.Add(-1) >= 0 {
		return fence.ReserveResult{}, f.refused()
	}
	return f.Fence.ReserveClaim(ctx, id, spec, c)
}

func (f *failSpawnedFence) Advance(ctx context.Context, r *fence.Reservation, to fence.Phase, p fence.Patch) error {
	if to == fence.PhaseSpawned && f.left.Add(-1) >= 0 {
		return f.refused()
	}
	return f.Fence.Advance(ctx, r, to, p)
}

// TestPoolClaimFenceFailure: a claim whose recording write fails — the
// reservation itself for a first generation, the spawned step for a later
// one — leaves the standby it took to the refill, which removes its session:
// never handed out again, never left standing; and the next create is served.
func TestPoolClaimFenceFailure(t *testing.T) {
	for _, later := range []bool{false, true} {
		t.Run(fmt.Sprintf("later-generation=%v", later), func(t *testing.T) { testPoolClaimFenceFailure(t, later) })
	}
}

func testPoolClaimFenceFailure(t *testing.T, later bool) {
	ff := &failSpawnedFence{}
	e := startEnvWith(t, &env{poolSize: 2, wrapFence: func(f fence.Fence) fence.Fence { ff.Fence = f; return ff }}, "", false)
	waitFor(t, "the pool full", func() bool { return e.m.PoolStats().Ready == 2 })
	id, spec := e.identity("failclaim")
	if later { // generation 1 runs and is killed: the failing create is generation 2's
		if _, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.m.Kill(context.Background(), Ref{Identity: &id}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the pool full", func() bool { return e.m.PoolStats().Ready == 2 })
	}
	before := map[string]bool{}
	for _, r := range e.paneList() {
		before[r.id] = true
	}
	ff.left.Store(1)
	if _, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec}); verdict.CodeOf(err) != verdict.CodeFenceUnavailable {
		t.Fatalf("create with the claim's write refused: %v", err)
	}
	waitFor(t, "the taken standby removed and the pool full", func() bool {
		still := 0
		for _, r := range e.paneList() {
			if before[r.id] {
				still++
			}
		}
		return still == len(before)-1 && e.m.PoolStats().Ready == 2
	})
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	if err != nil || res.Status != verdict.VerdictPublished {
		t.Fatalf("create after: %+v %v", res, err)
	}
	if got := e.sessions(id.Digest()); len(got) != 1 {
		t.Fatalf("sessions %v", got)
	}
}

// checkClaimStart: the daemon recorded the claimed standby's start (pid,
// incarnation) and, with a cgroup base, the cgroup it placed the standby in
// at its spawn, which is the published generation's and holds the agent.
func checkClaimStart(t *testing.T, e *env, id fence.Identity, pid int) {
	t.Helper()
	ctx := context.Background()
	pub, ok, err := e.m.fence.PublishedFor(ctx, id)
	if err != nil || !ok {
		t.Fatalf("published: %v %v", ok, err)
	}
	pm, ok, err := e.m.fence.Postmortem(ctx, id, pub.Generation)
	if err != nil || !ok || pm.HelperPID != pid || pm.HelperIncarnation == "" {
		t.Fatalf("start record %+v %v %v (pane %d)", pm, ok, err, pid)
	}
	if e.m.cgroupBase == "" {
		t.Log("no cgroup base on this host: the pane's session holds the generation")
		return
	}
	if filepath.Dir(pub.Cgroup) != e.m.cgroupBase || !strings.HasPrefix(filepath.Base(pub.Cgroup), standbyCgroupPrefix) ||
		pm.Cgroup != pub.Cgroup || !proctree.InCgroup(pid, pub.Cgroup) {
		t.Fatalf("cgroup: published %q, start record %q, base %q, agent %d in it: %v",
			pub.Cgroup, pm.Cgroup, e.m.cgroupBase, pid, proctree.InCgroup(pid, pub.Cgroup))
	}
}

// TestPoolStandbyCgroups: with a cgroup base, every free standby sits in a
// cgroup of its own (placed at its spawn, so a claim moves nothing); a
// claimed one's is its generation's, removed when the generation is killed
// and proven gone; and a graceful shutdown removes the free standbys'
// cgroups once it has killed them.
func TestPoolStandbyCgroups(t *testing.T) {
	e := startPoolEnv(t, "", 2)
	base := e.m.cgroupBase
	if base == "" {
		t.Skip("no cgroup base on this host")
	}
	e.m.pool.mu.Lock()
	free := append([]standby(nil), e.m.pool.free...)
	e.m.pool.mu.Unlock()
	if len(free) != 2 {
		t.Fatalf("free standbys %+v", free)
	}
	for _, sb := range free {
		want := filepath.Join(base, standbyCgroupPrefix+sb.token)
		if sb.cgroup != want || !proctree.InCgroup(sb.panePID, want) {
			t.Fatalf("standby %d: cgroup %q (want %q), in it: %v", sb.panePID, sb.cgroup, want, proctree.InCgroup(sb.panePID, want))
		}
	}
	id, spec := e.identity("cg")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	pub, ok, err := e.m.fence.PublishedFor(context.Background(), id)
	if err != nil || !ok || !strings.HasPrefix(filepath.Base(pub.Cgroup), standbyCgroupPrefix) {
		t.Fatalf("published %+v %v %v", pub, ok, err)
	}
	if _, err := e.m.Kill(context.Background(), Ref{Name: res.Session.Name}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pub.Cgroup); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the killed generation's cgroup %s is still there: %v", pub.Cgroup, err)
	}
	waitFor(t, "the pool full again", func() bool { return e.m.PoolStats().Ready == 2 })
	e.m.pool.mu.Lock()
	free = append([]standby(nil), e.m.pool.free...)
	e.m.pool.mu.Unlock()
	e.close()
	for _, sb := range free {
		if _, err := os.Stat(sb.cgroup); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("standby cgroup %s left after shutdown: %v", sb.cgroup, err)
		}
	}
}

// TestHandoffFile: the hand-off file is made empty at a standby's spawn and
// written in place at its claim; a standby takes it only once it ends with
// its end line, so a read in the middle of the write (any prefix) is refused.
func TestHandoffFile(t *testing.T) {
	p := &pool{dir: filepath.Join(t.TempDir(), "pool")}
	const tok = "0123456789abcdef"
	p.prepareHandoff(tok)
	path := filepath.Join(p.dir, tok)
	if _, err := readHandoff(path); err == nil {
		t.Fatal("an empty hand-off file was taken")
	}
	want := handoff{resID: "00112233445566778899aabbccddeeff", generation: 3, cgroup: "/sys/fs/cgroup/x/gen-sb-" + tok, panePID: 4242}
	if err := p.writeHandoff(tok, want); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("hand-off file mode: %v %v", st, err)
	}
	got, err := readHandoff(path)
	if err != nil || got != want {
		t.Fatalf("read %+v %v, want %+v", got, err, want)
	}
	full, _ := os.ReadFile(path)
	for n := 0; n < len(full); n++ {
		if err := os.WriteFile(path, full[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		if h, err := readHandoff(path); err == nil {
			t.Fatalf("a prefix of %d bytes was taken: %+v", n, h)
		}
	}
}

// countingFence counts the writes that record a claimed standby.
type countingFence struct {
	fence.Fence
	claimed, advanced atomic.Int64
}

func (f *countingFence) ReserveClaim(ctx context.Context, id fence.Identity, spec fence.Spec, c fence.Claim) (fence.ReserveResult, error) {
	res, err := f.Fence.ReserveClaim(ctx, id, spec, c)
	if err == nil && res.Reservation.Phase == fence.PhaseSpawned {
		f.claimed.Add(1)
	}
	return res, err
}

func (f *countingFence) Advance(ctx context.Context, r *fence.Reservation, to fence.Phase, p fence.Patch) error {
	if to == fence.PhaseSpawned {
		f.advanced.Add(1)
	}
	return f.Fence.Advance(ctx, r, to, p)
}

// TestPoolClaimWithReservation: an identity's first create records its
// standby with its reservation (one transaction, no Advance to spawned);
// a later generation, which may have a session of its predecessor to reuse,
// reserves plainly, gives the standby back, and claims one after
// leftoverOf with its own spawned step. Both are served by a standby.
func TestPoolClaimWithReservation(t *testing.T) {
	cf := &countingFence{}
	e := startEnvWith(t, &env{poolSize: 2, wrapFence: func(f fence.Fence) fence.Fence { cf.Fence = f; return cf }}, "", false)
	waitFor(t, "the pool full", func() bool { return e.m.PoolStats().Ready == 2 })
	id, spec := e.identity("withres")
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	if err != nil || cf.claimed.Load() != 1 || cf.advanced.Load() != 0 || e.m.PoolStats().Claims != 1 {
		t.Fatalf("first create %+v %v: claims recorded with the reservation %d, advances to spawned %d, pool %+v",
			res, err, cf.claimed.Load(), cf.advanced.Load(), e.m.PoolStats())
	}
	checkClaimStart(t, e, id, res.Session.PanePID)
	if _, err := e.m.Kill(context.Background(), Ref{Identity: &id}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool full", func() bool { return e.m.PoolStats().Ready == 2 })
	res, err = e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	if err != nil || res.Session.Generation != 2 || cf.claimed.Load() != 1 || cf.advanced.Load() != 1 ||
		e.m.PoolStats().Claims != 2 {
		t.Fatalf("second create %+v %v: claims recorded with the reservation %d, advances to spawned %d, pool %+v",
			res, err, cf.claimed.Load(), cf.advanced.Load(), e.m.PoolStats())
	}
	checkClaimStart(t, e, id, res.Session.PanePID)
	if got := e.sessions(id.Digest()); len(got) != 1 {
		t.Fatalf("sessions %v", got)
	}
}

// TestPoolSameIdentityRace: eight creates of one identity at once with a pool
// of 2 — each create that finds a standby free takes it before it reserves;
// the reservation that wins records its standby (if it took one), the others
// answer existing and give theirs back. One session, at most one claim
// counted, and the pool holds exactly its size again (no standby lost, none
// handed out twice, none left tagged).
func TestPoolSameIdentityRace(t *testing.T) {
	e := startEnvWith(t, &env{poolSize: 2}, "", false)
	waitFor(t, "the pool full", func() bool { return e.m.PoolStats().Ready == 2 })
	id, spec := e.identity("race")
	const n = 8
	var wg sync.WaitGroup
	results := make([]CreateResult, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i], errs[i] = e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: 10 * time.Second})
		}(i)
	}
	wg.Wait()
	published := 0
	for i := range results {
		if errs[i] != nil {
			t.Fatalf("create %d: %v", i, errs[i])
		}
		if results[i].Status == verdict.VerdictPublished {
			published++
		}
		if results[i].Session.ID != results[0].Session.ID {
			t.Fatalf("creates answered different sessions: %+v / %+v", results[0].Session, results[i].Session)
		}
	}
	if published != 1 {
		t.Fatalf("%d creates published", published)
	}
	if got := e.sessions(id.Digest()); len(got) != 1 {
		t.Fatalf("sessions %v", got)
	}
	waitFor(t, "the pool back at its size", func() bool {
		standbys := 0
		for _, r := range e.paneList() {
			if strings.HasPrefix(r.name, standbyPrefix) {
				standbys++
			}
		}
		return standbys == 2 && e.m.PoolStats().Ready == 2
	})
	// The create that won the reservation may have found no standby free (the
	// losers held both while they reserved): at most one claim.
	if st := e.m.PoolStats(); st.Claims > 1 {
		t.Fatalf("claims counted %d", st.Claims)
	}
	if err := checkNoStandbyTagged(e.paneList()); err != nil {
		t.Fatal(err)
	}
}
