package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// censusListFormat is the census's own list (census/sync.go listFormat, copied:
// it is unexported), so the raw baseline reads exactly what a resync reads.
const censusListFormat = "#{session_id}\t#{session_created}\t#{session_attached}\t" +
	"#{pane_id}\t#{pane_pid}\t#{pane_dead}\t#{pane_dead_status}\t#{pane_dead_signal}\t#{window_activity}\t" +
	"#{@skc-control}\t#{@skc-identity}\t#{@skc-generation}\t#{@skc-reservation}\t#{@skc-state}\t#{@skc-since}\t" +
	"#{session_name}"

// scaleTarget caps the wanted sessions by free ptys (every live pane holds
// one; keep 128 for everyone else on the machine and our control sessions)
// and by memory (a pane costs its agent, and with a binary from before the
// exec a resident helper too: budget 4 MB each, keep 4 GB).
func scaleTarget(want int) (int, string) { return sessionRoom(want, 4<<10) }

// sessionRoom is scaleTarget with a memory budget of perKB per session.
func sessionRoom(want int, perKB int64) (int, string) {
	nr, _ := strconv.Atoi(readTrim("/proc/sys/kernel/pty/nr"))
	max, _ := strconv.Atoi(readTrim("/proc/sys/kernel/pty/max"))
	byPty := max - nr - 128
	byMem := int((memAvailableKB() - 4<<20) / perKB)
	n := min(want, byPty, byMem)
	return n, fmt.Sprintf("wanted %d; ptys %d in use of %d → room for %d; memory room for %d", want, nr, max, byPty, byMem)
}

// runScale fills one daemon to the target with concurrent API clients and
// measures at -scale-list-at sessions and at the target.
func runScale(ctx context.Context, o options, r *reaper, bin string, rep *report) error {
	target, why := scaleTarget(o.scaleN)
	rep.facts = append(rep.facts, [2]string{"scale target", fmt.Sprintf("%d sessions (%s)", target, why)})
	d, err := startDaemon(ctx, r, bin, agent, o.scaleWire)
	if err != nil {
		return err
	}
	d.perfDir = o.perfDir
	empty := baseCost(d)
	defer func() {
		// Also after an error: the daemon's own view of its requests.
		rep.extra = append(rep.extra, "Failed creates: "+d.failureSummary()+".", serverTimesMarkdown(d))
	}()
	f := d.follow(ctx)
	t0 := time.Now()
	fillCtx, cancel := context.WithTimeout(ctx, o.createBudget)
	defer cancel()
	var printed atomic.Int64
	progress := func(n int) {
		if b := int64(n / 250); b > printed.Load() && printed.CompareAndSwap(printed.Load(), b) {
			rss, _ := d.rssKB()
			logf("%d sessions after %v (daemon RSS %.1f MB, load %s)", n, time.Since(t0).Round(time.Second), float64(rss)/1024, loadavg())
		}
	}
	if err := d.fill(fillCtx, min(o.scaleAt, target), 16, progress); err != nil {
		return fmt.Errorf("fill to %d: %w", o.scaleAt, err)
	}
	if err := listLookupRows(ctx, rep, d, 50, 300, "scale"); err != nil {
		return err
	}
	err = d.fill(fillCtx, target, 8, progress)
	reached := d.count()
	rep.extra = append(rep.extra, fmt.Sprintf("Creating %d sessions (16 concurrent API clients up to %d, then 8) took %v.",
		reached, o.scaleAt, time.Since(t0).Round(time.Second)))
	switch {
	case errors.Is(err, errStreak) && reached*10 >= target*9:
		// The machine's own limit (pid_max, ptys) near the top: measure there.
		rep.errs = append(rep.errs, fmt.Sprintf("the machine refused sessions beyond %d of %d (%v); measured there", reached, target, err))
	case err != nil && fillCtx.Err() == nil:
		return fmt.Errorf("fill to %d (reached %d): %w", target, reached, err)
	}
	if reached < target && err == nil {
		why := "live sessions fewer than created: some ended or failed on the way (Failed creates)"
		if fillCtx.Err() != nil {
			why = fmt.Sprintf("creation budget %v spent", o.createBudget)
		}
		rep.errs = append(rep.errs, fmt.Sprintf("%d of %d sessions (%s); measured there", reached, target, why))
	}
	return scaleMeasure(ctx, rep, d, f, bin, empty, o.scaleWire)
}

// daemonCost is the daemon's resident memory and open fds at one moment.
type daemonCost struct {
	rssKB int64
	fds   int
}

// baseCost reads the daemon's cost before any session exists.
func baseCost(d *daemon) daemonCost {
	rss, _ := d.rssKB()
	return daemonCost{rssKB: rss, fds: openFDs(d.pid)}
}

// openFDs counts a process's open file descriptors (-1 when unreadable).
func openFDs(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// scaleMeasure takes the figures at the full size.
func scaleMeasure(ctx context.Context, rep *report, d *daemon, f *follower, bin string, empty daemonCost, wire bool) error {
	n := d.count()
	rss, hwm := d.rssKB()
	rep.judge(row{fig: fmt.Sprintf("daemon VmRSS (%d live sessions)", n), ours: fmt.Sprintf("%.1f MB (VmHWM %.1f MB)", float64(rss)/1024, float64(hwm)/1024),
		base: tmuxRSS(d), ratio: "—", goal: "≤ 64 MB"}, rss <= 64<<10, fmt.Sprintf("%.1f MB", float64(rss)/1024))
	perKB := float64(rss-empty.rssKB) / float64(max(n, 1))
	rep.judge(row{fig: "daemon memory per session, (VmRSS at the full size − at 0) / sessions",
		ours: fmt.Sprintf("%.1f KiB ((%.1f − %.1f) MB / %d)", perKB, float64(rss)/1024, float64(empty.rssKB)/1024, n),
		base: "—", ratio: "—", goal: "≤ 16 KiB"}, perKB <= 16, fmt.Sprintf("%.1f KiB", perKB))
	fds := openFDs(d.pid)
	rep.add(row{fig: "daemon open fds per session, (fds at the full size − at 0) / sessions",
		ours: fmt.Sprintf("%.2f (%d − %d) / %d", float64(fds-empty.fds)/float64(max(n, 1)), fds, empty.fds, n),
		base: "—", ratio: "—", goal: "—", met: "info"})
	rep.add(row{fig: "per-session memory outside the daemon", ours: helperMemory(d, bin), base: "—", ratio: "—", goal: "—", met: "info"})
	if err := listLookupRows(ctx, rep, d, 30, 50, "full"); err != nil {
		return err
	}
	// Ends before the census row: that row's second control client attaching
	// to and leaving the daemon's control session changes an attached count,
	// which costs the daemon's census a full list (~0.65 s of tmux's time at
	// 4,000 sessions) that the first ends would wait behind — the harness's
	// doing, not the steady state figure 5 is about (BENCHMARKS.md, Scale).
	logf("end verdicts at %d sessions", n)
	ends, err := endFigure(ctx, d, f, min(100, n/2), false)
	if err != nil {
		return err
	}
	endRow(rep, ends, n, 100*time.Millisecond) // issue 18, goal 4
	if wire {
		scaleEndRows(rep, filepath.Join(d.home, "wire.log"), ends)
	}
	if err := censusRow(ctx, rep, d); err != nil {
		return err
	}
	rep.facts = append(rep.facts, [2]string{"load average at end", loadavg()})
	return nil
}

func tmuxRSS(d *daemon) string {
	rss, err := statusKB(d.serverPID, "VmRSS")
	if err != nil {
		return "tmux server RSS: ?"
	}
	return fmt.Sprintf("tmux server VmRSS %.1f MB", float64(rss)/1024)
}

// helperMemory samples the pane trees of 20 sessions: the processes of ours
// in them (none once the pane helper has exec'd its agent) and the whole
// tree's proportional memory (Pss; shared pages split among sharers).
func helperMemory(d *daemon, bin string) string {
	fi, err := os.Stat(bin)
	if err != nil {
		return "?"
	}
	var sum treeCost
	k := int64(0)
	for i := 0; i < 20 && i < d.count(); i++ {
		c := paneCost(d.pick(i*97).PanePID, fi)
		if c.procs == 0 {
			continue
		}
		sum.ourProcs += c.ourProcs
		sum.ourPssKB += c.ourPssKB
		sum.pssKB += c.pssKB
		k++
	}
	if k == 0 {
		return "?"
	}
	return fmt.Sprintf("processes of ours per session %.1f (Pss %s); whole pane tree Pss %s (mean of %d)",
		float64(sum.ourProcs)/float64(k), kib(sum.ourPssKB/k), kib(sum.pssKB/k), k)
}

// censusRow compares a full census resync (census.Refresh on a synced census,
// its own control connection on the daemon's tmux server, joining the
// daemon's control session) with the raw list-sessions it starts with, on the
// same connection, interleaved.
func censusRow(ctx context.Context, rep *report, d *daemon) error {
	cctx, cancel := context.WithCancel(ctx)
	cl := tmuxctl.NewClient(tmuxctl.Config{Socket: d.tmuxSock, CommandTimeout: 120 * time.Second})
	c := census.New(cl, nil)
	done := make(chan struct{}, 2)
	go func() { _ = cl.Run(cctx); done <- struct{}{} }()
	go func() { _ = c.Run(cctx); done <- struct{}{} }()
	defer func() {
		cancel()
		<-done
		<-done
		for range cl.Events() { // closed once drained
		}
	}()
	// A joining census reads every session's own tags once (census.needExact:
	// a new id is read exactly), 4,000 show-options on a server that is busy.
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Minute)
	defer wcancel()
	if err := c.WaitSynced(wctx); err != nil {
		return fmt.Errorf("census on %s: %w", filepath.Base(d.tmuxSock), err)
	}
	info, _ := c.Info()
	var raw, full samples
	for i := 0; i < 20 && ctx.Err() == nil; i++ {
		dt, err := timed(func() error {
			_, err := cl.CommandIn(ctx, info.ServerLife, "list-sessions", "-F", censusListFormat)
			return err
		})
		if err != nil {
			return err
		}
		raw = append(raw, dt)
		dt, err = timed(func() error { return c.Refresh(ctx) })
		if err != nil {
			return err
		}
		full = append(full, dt)
	}
	n := len(c.Snapshot().Sessions)
	rep.judge(row{fig: fmt.Sprintf("census full resync, p50 / p99 (%d sessions, n=%d)", n, len(full)),
		ours:  fmt.Sprintf("%s / %s", ms(full.p50()), ms(full.p99())),
		base:  fmt.Sprintf("raw `list-sessions -F` on the same control connection: %s / %s", ms(raw.p50()), ms(raw.p99())),
		ratio: ratioD(full.p50(), raw.p50()) + " (p50)", goal: "≤ 1.1×"},
		float64(full.p50()) <= 1.1*float64(raw.p50()), fmt.Sprintf("%s of the raw list", ratioD(full.p50(), raw.p50())))
	return nil
}

func scaleTeardownRow(rep *report, td teardownReport) {
	clean := td.homesRemoved == td.homes
	rep.judge(row{fig: "clean teardown (everything killed by pid, homes removed)",
		ours: fmt.Sprintf("daemon stop %v, kill-server %v, %d leftover processes killed by pid in %v, %d/%d homes removed",
			td.daemons.Round(time.Millisecond), td.servers.Round(time.Millisecond), td.swept, td.sweep.Round(time.Millisecond), td.homesRemoved, td.homes),
		base: "—", ratio: "—", goal: "clean"}, clean, "homes left behind")
}
