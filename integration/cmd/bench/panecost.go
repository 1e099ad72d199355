package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Per-session overhead (issue 18, goal 1), measured side by side in one run:
// the processes of ours in each session's pane tree (threads, Pss) with the
// binary from before the pane helper exec'd its agent (-before-bin) and with
// this one (-bin), and the daemon's own memory per session with this one:
// (VmRSS at -mem-n sessions − VmRSS at 0) / -mem-n.

// treeCost is what one session's pane tree costs: all of it, and the part
// that runs our binary.
type treeCost struct {
	procs, threads, pssKB          int64
	ourProcs, ourThreads, ourPssKB int64
}

// paneCost sums the pane tree of panePID (the pane's process and its
// descendants, walked in /proc). Ours is every process whose executable is
// the same file as bin.
func paneCost(panePID int, bin os.FileInfo) treeCost {
	var c treeCost
	for _, pid := range tree(panePID) {
		th, err := statusKB(pid, "Threads") // not kB, but the same "Name: N" line
		if err != nil {
			continue // gone meanwhile
		}
		pss := rollupKB(pid, "Pss")
		c.procs++
		c.threads += th
		c.pssKB += pss
		if exe, err := os.Stat(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && os.SameFile(exe, bin) {
			c.ourProcs++
			c.ourThreads += th
			c.ourPssKB += pss
		}
	}
	return c
}

// tree is pid and all its descendants.
func tree(pid int) []int {
	out := []int{pid}
	for _, c := range children(pid) {
		out = append(out, tree(c)...)
	}
	return out
}

// paneSide creates n sessions on a daemon of bin, waits until every agent
// runs, and returns the mean cost per session.
func paneSide(ctx context.Context, r *reaper, bin string, n int) (treeCost, error) {
	fi, err := os.Stat(bin)
	if err != nil {
		return treeCost{}, err
	}
	d, err := startDaemon(ctx, r, bin, agent, false)
	if err != nil {
		return treeCost{}, err
	}
	if err := d.fill(ctx, n, 4, nil); err != nil {
		return treeCost{}, fmt.Errorf("%s: fill to %d: %w", bin, n, err)
	}
	var sum treeCost
	for i := 0; i < d.count(); i++ {
		s := d.pick(i)
		if err := waitAgentRuns(ctx, s.PanePID); err != nil {
			return treeCost{}, fmt.Errorf("%s: %w", bin, err)
		}
		c := paneCost(s.PanePID, fi)
		sum.procs += c.procs
		sum.threads += c.threads
		sum.pssKB += c.pssKB
		sum.ourProcs += c.ourProcs
		sum.ourThreads += c.ourThreads
		sum.ourPssKB += c.ourPssKB
	}
	k := int64(d.count())
	return treeCost{procs: sum.procs / k, threads: sum.threads / k, pssKB: sum.pssKB / k,
		ourProcs: sum.ourProcs / k, ourThreads: sum.ourThreads / k, ourPssKB: sum.ourPssKB / k}, nil
}

// waitAgentRuns waits (bounded) until the agent (comm "sleep", the bench's
// agent) runs in the pane's tree: the pane's process after an exec, or the
// resident helper's child.
func waitAgentRuns(ctx context.Context, panePID int) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		for _, pid := range tree(panePID) {
			if readTrim(fmt.Sprintf("/proc/%d/comm", pid)) == agent[0] {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("no agent in the tree of pane pid %d", panePID)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// steadyRSS is the daemon's median VmRSS over five reads a second apart, once
// it has been idle a moment: one read may catch the heap between a burst's
// garbage and its collection.
func steadyRSS(ctx context.Context, d *daemon) int64 {
	var v []int64
	for i := 0; i < 5 && ctx.Err() == nil; i++ {
		time.Sleep(time.Second)
		rss, _ := d.rssKB()
		v = append(v, rss)
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	if len(v) == 0 {
		return 0
	}
	return v[len(v)/2]
}

// memPoint is the daemon's steady VmRSS at a number of sessions.
type memPoint struct {
	n   int
	rss int64
}

// daemonPerSession fills a fresh daemon of bin to n sessions (capped by free
// ptys and memory: a session of this binary is its agent, a `sleep`, budget
// 1 MB), reading its steady VmRSS at 0, n/4, n/2 and n.
func daemonPerSession(ctx context.Context, r *reaper, bin string, want int) (pts []memPoint, hwm int64, why string, err error) {
	n, why := sessionRoom(want, 1<<10)
	d, err := startDaemon(ctx, r, bin, agent, false)
	if err != nil {
		return nil, 0, why, err
	}
	t0 := time.Now()
	for _, at := range []int{0, n / 4, n / 2, n} {
		if err := d.fill(ctx, at, 16, nil); err != nil {
			return pts, 0, why, fmt.Errorf("fill to %d (reached %d): %w", at, d.count(), err)
		}
		if _, err := d.waitListed(ctx); err != nil {
			return pts, 0, why, err
		}
		pts = append(pts, memPoint{n: d.count(), rss: steadyRSS(ctx, d)})
		logf("pane cost: %d sessions after %v, VmRSS %.1f MB", d.count(), time.Since(t0).Round(time.Second), mb(pts[len(pts)-1].rss))
	}
	_, hwm = d.rssKB()
	return pts, hwm, why, nil
}

// runPaneCost is -pane-cost: goal 1's figures.
func runPaneCost(ctx context.Context, o options, r *reaper, bin string, rep *report) error {
	after, err := paneSide(ctx, r, bin, o.paneN)
	if err != nil {
		return err
	}
	base := "—"
	var before treeCost
	if o.beforeBin != "" {
		if before, err = paneSide(ctx, r, o.beforeBin, o.paneN); err != nil {
			return err
		}
		base = fmt.Sprintf("before (%s): %d of ours, %d threads, Pss %s", shortBin(o.beforeBin),
			before.ourProcs, before.ourThreads, kib(before.ourPssKB))
		rep.facts = append(rep.facts, [2]string{"before", o.beforeBin})
	}
	rep.judge(row{fig: fmt.Sprintf("processes of ours per session once the agent runs (mean of %d sessions)", o.paneN),
		ours:  fmt.Sprintf("%d processes, %d threads, Pss %s", after.ourProcs, after.ourThreads, kib(after.ourPssKB)),
		base:  base,
		ratio: "—", goal: "none"}, after.ourProcs == 0, fmt.Sprintf("%d per session", after.ourProcs))
	tb := "—"
	if o.beforeBin != "" {
		tb = fmt.Sprintf("before: %d processes, %d threads, Pss %s", before.procs, before.threads, kib(before.pssKB))
	}
	rep.add(row{fig: "whole pane tree per session (agent `sleep` included)",
		ours: fmt.Sprintf("%d processes, %d threads, Pss %s", after.procs, after.threads, kib(after.pssKB)),
		base: tb, ratio: "—", goal: "—", met: "info"})
	pts, hwm, why, err := daemonPerSession(ctx, r, bin, o.memN)
	if err != nil {
		return err
	}
	last := pts[len(pts)-1]
	rep.facts = append(rep.facts, [2]string{"sessions for the daemon's memory", fmt.Sprintf("%d (%s)", last.n, why)})
	per := float64(last.rss-pts[0].rss) / float64(last.n)
	var curve []string
	for _, p := range pts {
		curve = append(curve, fmt.Sprintf("%d: %.1f MB", p.n, mb(p.rss)))
	}
	rep.judge(row{fig: fmt.Sprintf("daemon memory per session: (VmRSS at %d − VmRSS at 0) / %d", last.n, last.n),
		ours: fmt.Sprintf("%.1f KiB (VmRSS at %s; VmHWM %.1f MB)", per, strings.Join(curve, ", "), mb(hwm)),
		base: "—", ratio: "—", goal: "≤ 16 KiB"}, per <= 16, fmt.Sprintf("%.1f KiB", per))
	return nil
}

func kib(kb int64) string {
	if kb >= 1024 {
		return fmt.Sprintf("%.2f MiB", float64(kb)/1024)
	}
	return strconv.FormatInt(kb, 10) + " KiB"
}

func mb(kb int64) float64 { return float64(kb) / 1024 }

func shortBin(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}
