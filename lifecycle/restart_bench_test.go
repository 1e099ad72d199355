package lifecycle

import (
	"context"
	"fmt"
	"github.com/skc-supervisor/skc-supervisor/verdict"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
)

// BenchmarkRestartLatency measures agent exit → next agent running (its pid
// in /proc), with restart_delay_ms 0, through the whole restart (the proof,
// the ended verdict, the fence's phases, respawn-pane in the kept session,
// the helper's gate), against a bare respawn-pane of a plain pane over the
// same open control connection, in the same run.
//
//	go test -run '^$' -bench RestartLatency -benchtime 40x ./lifecycle/
func BenchmarkRestartLatency(b *testing.B) {
	e := startEnvB(b)
	id, spec := e.identity("rbench")
	marks := filepath.Join(id.StateDir, "marks")
	spec.Argv = []string{spec.Argv[0], "agent", "mark", marks}
	spec.Restart, spec.RestartDelayMS, spec.RestartBurst, spec.RestartIntervalS = fence.RestartAlways, 0, 1000000, 1
	spec.ResumeArgv = spec.Argv
	if _, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second}); err != nil {
		b.Fatal(err)
	}
	bare := filepath.Join(e.home, "bare-marks")
	exe, _ := os.Executable()
	cmd := []string{exe, "agent", "mark", bare}
	if _, err := e.client.Command(context.Background(), append([]string{"new-session", "-d", "-s", "bare", "--"}, cmd...)...); err != nil {
		b.Fatal(err)
	}
	if _, err := e.client.Command(context.Background(), "set-option", "-w", "-t", "bare", "remain-on-exit", "on"); err != nil {
		b.Fatal(err)
	}
	var lat, base []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lat = append(lat, nextAgent(b, marks, nil))
		base = append(base, nextAgent(b, bare, func() {
			if _, err := e.client.Command(context.Background(), append([]string{"respawn-pane", "-k", "-t", "bare", "--"}, cmd...)...); err != nil {
				b.Fatal(err)
			}
		}))
	}
	b.StopTimer()
	report := func(name string, d []time.Duration) {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, name+"-p50-ms")
		b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, name+"-p99-ms")
	}
	report("restart", lat)
	report("bare-respawn", base)
}

// nextAgent waits for the one agent of token, SIGTERMs it (then, for the
// baseline, runs respawn), and returns the time until another one runs.
func nextAgent(b *testing.B, token string, respawn func()) time.Duration {
	var cur int
	deadline := time.Now().Add(30 * time.Second)
	for {
		if a := agentsWith(token); len(a) == 1 {
			cur = a[0]
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("no agent")
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	_ = syscall.Kill(cur, syscall.SIGTERM)
	if respawn != nil {
		for liveNonZombie(cur) {
			time.Sleep(200 * time.Microsecond)
		}
		respawn()
	}
	for {
		if a := agentsWith(token); len(a) == 1 && a[0] != cur {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			b.Fatal("no next agent")
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// BenchmarkServerDeathRestart measures, with SKC_BENCH_SESSIONS (default
// 1,000) on-failure identities: creating them from scratch, then kill -9 of
// the tmux server → every one running again (published, generation 2) in a
// new server, in the same run.
//
//	SKC_BENCH_SESSIONS=1000 go test -run '^$' -bench ServerDeathRestart -benchtime 1x -timeout 30m ./lifecycle/
func BenchmarkServerDeathRestart(b *testing.B) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("SKC_BENCH_SESSIONS")); err == nil && v > 0 {
		n = v
	}
	for i := 0; i < b.N; i++ {
		e := startEnvB(b)
		ctx := context.Background()
		start := time.Now()
		for k := 0; k < n; k++ {
			id, spec := e.identity(fmt.Sprintf("sd%d", k))
			spec.Restart, spec.RestartDelayMS, spec.RestartBurst, spec.RestartIntervalS = fence.RestartOnFailure, 0, 5, 300
			for {
				_, err := e.m.Create(ctx, CreateRequest{Identity: id, Spec: spec, Wait: time.Minute})
				if err == nil {
					break
				}
				if c := verdict.CodeOf(err); c != verdict.CodeBusy && c != verdict.CodeFenceUnavailable {
					b.Fatal(err)
				}
			}
		}
		created := time.Since(start)
		info, _ := e.census.Info()
		start = time.Now()
		if err := syscall.Kill(info.PID, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Minute)
		for {
			pubs, err := e.store.Identities(ctx)
			running := 0
			for _, p := range pubs {
				if err == nil && !p.Ended && p.Restart.Restarts == 1 {
					running++
				}
			}
			if running == n {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d running again", running, n)
			}
			time.Sleep(50 * time.Millisecond)
		}
		back := time.Since(start)
		b.ReportMetric(created.Seconds(), "create-all-s")
		b.ReportMetric(back.Seconds(), "server-death-all-back-s")
		e.close()
	}
}
