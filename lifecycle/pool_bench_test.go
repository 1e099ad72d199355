package lifecycle

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
)

// BenchmarkCreatePool measures the warm pool's two figures (BENCHMARKS.md,
// "Warm pool"), each side by side with tmux in the same run, against real
// tmux and SQLite. sequential: create → published p50/p99 with a pool of 4
// (refilled between creates, as between creates at a person's pace),
// interleaved with a bare new-session on the Manager's own open control
// connection. burst32-poolN: rounds of 32 concurrent creates with a pool of 4
// and of 32, interleaved with rounds of 32 new-session pipelined on that
// connection; sessions/s, medians of the rounds. Run the two apart (a burst
// round is 64 sessions):
//
//	go test -run '^$' -bench CreatePool/sequential -benchtime 100x ./lifecycle/
//	go test -run '^$' -bench CreatePool/burst -benchtime 20x ./lifecycle/
//
// sequential-nopool is the same sequential run without a pool (serve's
// default): every create takes the full saga and its pane helper.
func BenchmarkCreatePool(b *testing.B) {
	b.Run("sequential", func(b *testing.B) { benchPoolSequential(b, 4) })
	b.Run("sequential-nopool", func(b *testing.B) { benchPoolSequential(b, 0) })
	for _, size := range []int{4, 32} {
		b.Run(fmt.Sprintf("burst32-pool%d", size), func(b *testing.B) { benchPoolBurst(b, size) })
	}
}

func benchPoolSequential(b *testing.B, size int) {
	e := startEnvWith(b, &env{poolSize: size}, "", false)
	waitPool(b, e, size)
	exe, _ := os.Executable()
	var ours, floor, oursRun, floorRun []time.Duration
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id, spec := e.identity(fmt.Sprintf("seq%d", i))
		t0 := time.Now()
		res, err := e.m.Create(ctx, CreateRequest{Identity: id, Spec: spec})
		if err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(t0))
		// Each side's agent runs and settles before the other side starts:
		// an agent's start (~10 ms of CPU) beside the other's create was
		// charged to it.
		oursRun = append(oursRun, agentRuns(b, res.Session.PanePID, t0))
		t0 = time.Now()
		rep, err := e.client.Command(ctx, "new-session", "-d", "-P", "-F", "#{pane_pid}",
			"-s", fmt.Sprintf("floor%d", i), "-x", "200", "-y", "50", "--", exe, "agent", "sleep")
		if err != nil || len(rep.Lines) != 1 {
			b.Fatal(err, rep.Lines)
		}
		floor = append(floor, time.Since(t0))
		pid, _ := strconv.Atoi(rep.Lines[0])
		floorRun = append(floorRun, agentRuns(b, pid, t0))
		b.StopTimer()
		benchRemove(b, e, []fence.Identity{id}, []string{fmt.Sprintf("floor%d", i)})
		waitPool(b, e, size)
		waitQuiet(b)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(ms(pct(ours, 50)), "pool-p50-ms")
	b.ReportMetric(ms(pct(ours, 99)), "pool-p99-ms")
	b.ReportMetric(ms(pct(floor, 50)), "new-session-p50-ms")
	b.ReportMetric(ms(pct(floor, 99)), "new-session-p99-ms")
	b.ReportMetric(float64(pct(ours, 50))/float64(pct(floor, 50)), "p50-ratio")
	// Until the agent runs (its exec done: what a user waits for before the
	// agent does anything), from the create's call and from new-session's.
	b.ReportMetric(ms(pct(oursRun, 50)), "pool-agent-exec-p50-ms")
	b.ReportMetric(ms(pct(floorRun, 50)), "new-session-agent-exec-p50-ms")
}

// agentRuns (untimed) waits until pid runs the agent, returns how long after
// t0 its exec was first seen (polled every 100 µs), and waits for it to
// settle.
func agentRuns(b *testing.B, pid int, t0 time.Time) time.Duration {
	b.StopTimer()
	defer b.StartTimer()
	deadline := time.Now().Add(60 * time.Second)
	path := fmt.Sprintf("/proc/%d/cmdline", pid)
	for {
		cmd, err := os.ReadFile(path)
		if err != nil {
			b.Fatalf("pid %d gone before its agent ran: %v", pid, err)
		}
		if bytes.Contains(cmd, []byte("agent\x00sleep")) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("pid %d never ran its agent: %q", pid, cmd)
		}
		time.Sleep(100 * time.Microsecond)
	}
	d := time.Since(t0)
	waitSettled(b, []int{pid}, deadline)
	return d
}

func benchPoolBurst(b *testing.B, size int) {
	const par = 32
	e := startEnvWith(b, &env{poolSize: size}, "", false)
	exe, _ := os.Executable()
	var ours, tmux, oursCPU, tmuxCPU []float64
	b.ResetTimer()
	for r := 0; r < b.N; r++ {
		b.StopTimer()
		waitPool(b, e, size)
		// The identities' state directories exist before their creates, as a
		// client's do (and as in sequential): made inside the timed round (32
		// mkdirs in one directory at once), they were ~13 ms of the test
		// process's CPU per round in a profile, mostly in the kernel — the
		// harness's cost, not a create's, and the floor has none.
		ids, specs, floors := make([]fence.Identity, par), make([]fence.Spec, par), make([]string, par)
		for i := range ids {
			ids[i], specs[i] = e.identity(fmt.Sprintf("b%d-%d", r, i))
			floors[i] = fmt.Sprintf("fb%d-%d", r, i)
		}
		// The two sides alternate which goes first, and each starts only once
		// every agent the other started runs and has settled, on a quiet
		// machine (untimed): a side's round ends at its replies, while its
		// agents still exec and start, and the refill's standbys start after
		// waitPool — work that, left running, would be charged to whichever
		// side came next.
		for side := 0; side < 2; side++ {
			waitQuiet(b)
			if (r+side)%2 == 0 {
				rate, cpu := burstOurs(b, e, ids, specs)
				ours, oursCPU = append(ours, rate), append(oursCPU, cpu)
			} else {
				rate, cpu := burstFloor(b, e, floors, exe)
				tmux, tmuxCPU = append(tmux, rate), append(tmuxCPU, cpu)
			}
		}
		b.StopTimer()
		benchRemove(b, e, ids, floors)
		b.StartTimer()
	}
	b.StopTimer()
	sort.Float64s(ours)
	sort.Float64s(tmux)
	b.ReportMetric(ours[(len(ours)-1)/2], "creates/s")
	b.ReportMetric(tmux[(len(tmux)-1)/2], "new-session/s")
	b.ReportMetric(ours[(len(ours)-1)/2]/tmux[(len(tmux)-1)/2], "rate-ratio")
	// The machine's CPU over each timed round (all processes, /proc/stat's
	// 10 ms ticks, means): on two CPUs both sides' rounds are CPU-bound, so
	// the rate ratio follows the ratio of these.
	b.ReportMetric(mean(oursCPU), "ours-cpu-ms/round")
	b.ReportMetric(mean(tmuxCPU), "new-session-cpu-ms/round")
}

// perfCtl profiles one side's timed rounds only: with SKC_BENCH_PERF_CTL set
// to the control FIFO of `perf record --control fifo:CTL -D -1` and
// SKC_BENCH_PERF_SIDE to "ours" or "floor", it enables the recording around
// that side's rounds (BENCHMARKS.md names the command).
func perfCtl(side, cmd string) {
	ctl := os.Getenv("SKC_BENCH_PERF_CTL")
	if ctl == "" || os.Getenv("SKC_BENCH_PERF_SIDE") != side {
		return
	}
	if f, err := os.OpenFile(ctl, os.O_WRONLY, 0); err == nil {
		_, _ = f.WriteString(cmd + "\n")
		_ = f.Close()
	}
}

// tickMS is the machine's busy CPU time since busy0 (cpuTicks), in ms.
func tickMS(busy0 int64) float64 {
	busy, _ := cpuTicks()
	return float64(busy-busy0) * 1000 / 100 // USER_HZ is 100 on Linux
}

func mean(v []float64) float64 {
	var sum float64
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}

// burstOurs is one timed round of len(ids) concurrent creates; it returns
// creates per second and the machine's CPU time over the round, and waits
// (untimed) for their agents to run.
func burstOurs(b *testing.B, e *env, ids []fence.Identity, specs []fence.Spec) (float64, float64) {
	ctx := context.Background()
	pids := make([]int, len(ids))
	b.StartTimer()
	perfCtl("ours", "enable")
	busy0, _ := cpuTicks()
	t0 := time.Now()
	parallel(b, len(ids), func(i int) error {
		res, err := e.m.Create(ctx, CreateRequest{Identity: ids[i], Spec: specs[i], Wait: time.Minute})
		if err == nil {
			pids[i] = res.Session.PanePID
		}
		return err
	})
	rate := float64(len(ids)) / time.Since(t0).Seconds()
	cpu := tickMS(busy0)
	perfCtl("ours", "disable")
	b.StopTimer()
	waitAgents(b, pids)
	return rate, cpu
}

// burstFloor is one timed round of len(names) new-session pipelined on the
// Manager's control connection; it returns sessions per second and the
// machine's CPU time over the round, and waits (untimed) for their agents to
// run.
func burstFloor(b *testing.B, e *env, names []string, exe string) (float64, float64) {
	ctx := context.Background()
	pids := make([]int, len(names))
	b.StartTimer()
	perfCtl("floor", "enable")
	busy0, _ := cpuTicks()
	t0 := time.Now()
	parallel(b, len(names), func(i int) error {
		rep, err := e.client.Command(ctx, "new-session", "-d", "-P", "-F", "#{pane_pid}",
			"-s", names[i], "-x", "200", "-y", "50", "--", exe, "agent", "sleep")
		if err == nil && len(rep.Lines) == 1 {
			pids[i], err = strconv.Atoi(rep.Lines[0])
		}
		return err
	})
	rate := float64(len(names)) / time.Since(t0).Seconds()
	cpu := tickMS(busy0)
	perfCtl("floor", "disable")
	b.StopTimer()
	waitAgents(b, pids)
	return rate, cpu
}

// waitAgents waits until every pid runs the agent (its exec done) and has
// settled. An exec'd agent is not yet a started one: the test binary's
// runtime start and init run ~10 ms of CPU after the exec (page faults, init
// functions), 0.3 s for a round's 32 — which, left running, was charged to
// whichever side's round came next (rounds of the same build measured 37 to
// 84 ms as that spill-over came or went).
func waitAgents(b *testing.B, pids []int) {
	deadline := time.Now().Add(60 * time.Second)
	for _, pid := range pids {
		for {
			cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if err != nil || bytes.Contains(cmd, []byte("agent\x00sleep")) {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("pid %d never ran its agent: %q", pid, cmd)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	waitSettled(b, pids, deadline)
}

// waitSettled waits until the pids' main threads have used no CPU over two
// windows of 5 ms in a row (/proc/PID/schedstat: time on a CPU, in ns; a
// process gone counts as settled).
func waitSettled(b *testing.B, pids []int, deadline time.Time) {
	prev, quiet := onCPU(pids), 0
	for quiet < 2 {
		if time.Now().After(deadline) {
			b.Fatalf("agents %v never settled", pids)
		}
		time.Sleep(5 * time.Millisecond)
		cur := onCPU(pids)
		if cur == prev {
			quiet++
		} else {
			quiet = 0
		}
		prev = cur
	}
}

// waitQuiet waits (untimed) until the machine is quiet: the refill's
// standbys and the removal of the round before start Go runtimes, open the
// fence and reap for a while after waitPool and benchRemove return, and that
// work, left running, fell on whichever side's round came first. Quiet: of
// the /proc/stat ticks over 50 ms (5 per CPU), at most one busy, twice in a
// row.
func waitQuiet(b *testing.B) {
	deadline := time.Now().Add(5 * time.Second)
	prevBusy, prevAll := cpuTicks()
	for quiet := 0; quiet < 2; {
		if time.Now().After(deadline) {
			return // a machine that never settles: measure anyway
		}
		time.Sleep(50 * time.Millisecond)
		busy, all := cpuTicks()
		if all > prevAll && busy-prevBusy <= 1 {
			quiet++
		} else {
			quiet = 0
		}
		prevBusy, prevAll = busy, all
	}
}

// cpuTicks reads /proc/stat's first line: busy ticks (all but idle and
// iowait) and all ticks, over every CPU.
func cpuTicks() (busy, all int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for i, v := range strings.Fields(line)[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		all += n
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return busy, all
}

// onCPU sums the pids' main threads' time on a CPU.
func onCPU(pids []int) int64 {
	var sum int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			sum += n
		}
	}
	return sum
}

// benchRemove (untimed) kills the sessions a round made — the identities'
// through the Manager's kill (their stop proven and recorded), the floor's
// by name — so every round starts from the same few sessions, and a run
// needs no more ptys than one round (the machine's are shared).
func benchRemove(b *testing.B, e *env, ids []fence.Identity, floors []string) {
	ctx := context.Background()
	parallel(b, len(ids), func(i int) error {
		_, err := e.m.Kill(ctx, Ref{Identity: &ids[i]})
		return err
	})
	for _, n := range floors {
		if _, err := e.client.Command(ctx, "kill-session", "-t", "="+n); err != nil {
			b.Fatal(err)
		}
	}
}

// waitPool waits (untimed) until the pool holds n standbys.
func waitPool(b *testing.B, e *env, n int) {
	deadline := time.Now().Add(60 * time.Second)
	for e.m.PoolStats().Ready < n {
		if time.Now().After(deadline) {
			b.Fatalf("pool never refilled: %+v", e.m.PoolStats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func parallel(b *testing.B, n int, f func(i int) error) {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) { defer wg.Done(); errs[i] = f(i) }(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

func pct(v []time.Duration, p int) time.Duration {
	c := append([]time.Duration(nil), v...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	return c[(len(c)-1)*p/100]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
