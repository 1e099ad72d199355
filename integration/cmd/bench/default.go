package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// runDefault measures figures 1–6 at the default sizes (figure 7 is the fence
// package's own benchmark, cited in BENCHMARKS.md).
func runDefault(ctx context.Context, o options, r *reaper, bin string, rep *report) error {
	d, err := startDaemon(ctx, r, bin, agent, false)
	if err != nil {
		return err
	}
	ctl, err := startBaseline(ctx, r)
	if err != nil {
		return err
	}
	fork, err := startBaseline(ctx, r)
	if err != nil {
		return err
	}
	d.perfDir = o.perfDir
	f := d.follow(ctx)
	logf("figures 1, 2: %d sequential creates per side, interleaved", o.creates)
	var api, floor, forked samples
	err = withProfile(d.perfDir, d.pid, "create", func() (err error) {
		api, floor, forked, err = createFigures(ctx, d, ctl, fork, o.creates)
		return err
	})
	if err != nil {
		return err
	}
	createRows(rep, api, floor, forked)
	logf("figure 5: %d session ends at %d sessions", o.ends, d.count())
	at := d.count()
	var ends endResult
	err = withProfile(d.perfDir, 0, "ends-system-wide", func() (err error) {
		ends, err = endFigure(ctx, d, f, o.ends, true)
		return err
	})
	if err != nil {
		return err
	}
	endRow(rep, ends, at, 50*time.Millisecond)
	logf("figure 6: %d rounds of %d concurrent creates per side", o.rounds, o.par)
	var apiRate, tmuxRate []float64
	err = withProfile(d.perfDir, 0, "concurrent-system-wide", func() (err error) {
		apiRate, tmuxRate, err = concurrentFigure(ctx, d, ctl, o.rounds, o.par)
		return err
	})
	if err != nil {
		return err
	}
	concurrentRow(rep, apiRate, tmuxRate, o.par)
	if err := d.fill(ctx, o.listN, 8, nil); err != nil {
		return err
	}
	if err := listLookupRows(ctx, rep, d, o.listReps, o.lookups, "list"); err != nil {
		return err
	}
	rep.add(row{fig: "7. fence transition p99, 8 writer processes", ours: "see *fence* above", base: "—", ratio: "—",
		goal: "< 50 ms", met: "fence's own benchmark"})
	return finish(ctx, o, r, bin, rep, d)
}

// finish adds the daemon's RSS, its request times and the wire-log breakdown.
func finish(ctx context.Context, o options, r *reaper, bin string, rep *report, d *daemon) error {
	rss, hwm := d.rssKB()
	rep.extra = append(rep.extra, fmt.Sprintf("Daemon VmRSS at the end: %.1f MB (VmHWM %.1f MB) with %d sessions.",
		float64(rss)/1024, float64(hwm)/1024, d.count()), serverTimesMarkdown(d))
	if o.breakdownN > 0 {
		logf("breakdown: %d creates on a wire-logged daemon", o.breakdownN)
		bd, err := breakdownFigure(ctx, r, bin, agent, o.breakdownN)
		if err != nil {
			return err
		}
		rep.extra = append(rep.extra, bd.markdown())
	}
	rep.facts = append(rep.facts, [2]string{"load average at end", loadavg()})
	return nil
}

func createRows(rep *report, api, floor, forked samples) {
	n := len(api)
	p50, p99 := api.p50(), api.p99()
	both := fmt.Sprintf("%s / %s", ms(p50), ms(p99))
	rep.judge(row{fig: fmt.Sprintf("1. create → published, p50 / p99 (n=%d)", n), ours: both,
		base:  fmt.Sprintf("new-session on an open control connection: %s / %s", ms(floor.p50()), ms(floor.p99())),
		ratio: ratioD(p50, floor.p50()) + " / " + ratioD(p99, floor.p99()), goal: "≤ 1.15×"},
		float64(p50) <= 1.15*float64(floor.p50()) && float64(p99) <= 1.15*float64(floor.p99()),
		fmt.Sprintf("%s slower at p50, %s at p99", ratioD(p50, floor.p50()), ratioD(p99, floor.p99())))
	rep.judge(row{fig: fmt.Sprintf("2. create → published, p50 / p99 (n=%d)", n), ours: both,
		base:  fmt.Sprintf("fork way (new-session, 3 × set-option, has-session): %s / %s", ms(forked.p50()), ms(forked.p99())),
		ratio: ratioD(forked.p50(), p50) + " / " + ratioD(forked.p99(), p99) + " faster", goal: "≥ 3× faster"},
		float64(forked.p50()) >= 3*float64(p50),
		fmt.Sprintf("only %s faster at p50", ratioD(forked.p50(), p50)))
}

func endRow(rep *report, e endResult, at int, goal time.Duration) {
	rep.judge(row{fig: fmt.Sprintf("5. agent killed → `ended` verdict read on the follow stream, p50 / p99 (n=%d, %d sessions)", len(e.read), at),
		ours: fmt.Sprintf("%s / %s (verdict @timestamp: %s / %s)", ms(e.read.p50()), ms(e.read.p99()), ms(e.stamp.p50()), ms(e.stamp.p99())),
		base: "—", ratio: "—", goal: "p99 ≤ " + ms(goal)},
		e.read.p99() <= goal && e.missed == 0,
		fmt.Sprintf("p99 %s, max %s, %d without a verdict within 10 s", ms(e.read.p99()), ms(e.read.max()), e.missed))
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	c := append([]float64(nil), v...)
	sort.Float64s(c)
	return c[(len(c)-1)/2]
}

func concurrentRow(rep *report, api, tmux []float64, par int) {
	a, t := median(api), median(tmux)
	rep.judge(row{fig: fmt.Sprintf("6. %d concurrent creates of distinct identities, sessions/s (median of %d rounds)", par, len(api)),
		ours:  fmt.Sprintf("%.1f /s (rounds: %s)", a, rates(api)),
		base:  fmt.Sprintf("%d new-session pipelined on one control connection: %.1f /s (rounds: %s)", par, t, rates(tmux)),
		ratio: ratio(a, t), goal: "≥ 0.9×"}, a >= 0.9*t, fmt.Sprintf("%s of tmux's rate", ratio(a, t)))
}

func rates(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprintf("%.1f", x))
	}
	return strings.Join(s, ", ")
}

// listLookupRows measures and adds figures 3 and 4 at the daemon's current size.
func listLookupRows(ctx context.Context, rep *report, d *daemon, listReps, lookups int, tag string) error {
	n, err := d.waitListed(ctx)
	if err != nil {
		return err
	}
	logf("figure 4 (%s): list at %d sessions, %d requests per side", tag, n, listReps)
	var la, lf samples
	var ab, fb int
	err = withProfile(d.perfDir, d.pid, "list-"+tag, func() (err error) {
		la, lf, ab, fb, err = listFigure(ctx, d, listReps)
		return err
	})
	if err != nil {
		return err
	}
	rep.judge(row{fig: fmt.Sprintf("4. list of all sessions, p50 / p99 (%d sessions, n=%d)", n, len(la)),
		ours:  fmt.Sprintf("%s / %s (%d B JSON)", ms(la.p50()), ms(la.p99()), ab),
		base:  fmt.Sprintf("`tmux list-sessions -F` fork, same server: %s / %s (%d B)", ms(lf.p50()), ms(lf.p99()), fb),
		ratio: ratioD(lf.p50(), la.p50()) + " faster (p50)", goal: "≥ 10× faster"},
		float64(lf.p50()) >= 10*float64(la.p50()), fmt.Sprintf("%s faster at p50", ratioD(lf.p50(), la.p50())))
	logf("figure 3 (%s): %d lookups per side", tag, lookups)
	var ka, kf, kp samples
	err = withProfile(d.perfDir, d.pid, "lookup-"+tag, func() (err error) {
		ka, kf, kp, err = lookupFigure(ctx, d, lookups)
		return err
	})
	if err != nil {
		return err
	}
	ok, why := lookupGoal(ka.p50(), kf.p50(), kp.p50())
	rep.judge(row{fig: fmt.Sprintf("3. session lookup by name, p50 / p99 (%d sessions, n=%d)", n, len(ka)),
		ours:  fmt.Sprintf("%s / %s", ms(ka.p50()), ms(ka.p99())),
		base:  fmt.Sprintf("`tmux has-session -t =NAME` fork: %s / %s", ms(kf.p50()), ms(kf.p99())),
		ratio: ratioD(kf.p50(), ka.p50()) + " faster (p50)", goal: "≥ 50× faster, or ≤ 1.1× the HTTP floor where the fork is < 50× it"},
		ok, why)
	rep.add(row{fig: fmt.Sprintf("3a. HTTP floor: `GET /v1/ping` interleaved with the lookups (n=%d)", len(kp)),
		ours: fmt.Sprintf("%s / %s", ms(kp.p50()), ms(kp.p99())), base: fmt.Sprintf("lookup is %s the floor (p50)", ratioD(ka.p50(), kp.p50())),
		ratio: fmt.Sprintf("the fork is %s the floor", ratioD(kf.p50(), kp.p50())), goal: "—", met: "info"})
	return nil
}

// lookupGoal judges figure 3 as issue 18 states its goal: a lookup at least
// 50× faster than a has-session fork; or, where the HTTP round trip itself
// is the floor — a GET /v1/ping that does nothing is already within 50× of
// the fork, so no lookup through the API can be 50× faster — within 1.1× of
// that floor.
func lookupGoal(lookup, fork, ping time.Duration) (bool, string) {
	if float64(fork) >= 50*float64(lookup) {
		return true, fmt.Sprintf("%s faster at p50", ratioD(fork, lookup))
	}
	if float64(fork) < 50*float64(ping) {
		return float64(lookup) <= 1.1*float64(ping), fmt.Sprintf("%s faster at p50; the fork is only %s the HTTP floor, "+
			"and the lookup is %s of it (goal ≤ 1.1×)", ratioD(fork, lookup), ratioD(fork, ping), ratioD(lookup, ping))
	}
	return false, fmt.Sprintf("%s faster at p50", ratioD(fork, lookup))
}

// step is one row of a breakdown table: a name and its samples.
type step struct {
	name string
	v    samples
}

// stepTable writes a "| step | p50 | p99 |" table.
func stepTable(b *strings.Builder, rows []step) {
	b.WriteString("| step | p50 | p99 |\n|---|---|---|\n")
	for _, s := range rows {
		fmt.Fprintf(b, "| %s | %s | %s |\n", s.name, ms(s.v.p50()), ms(s.v.p99()))
	}
}

func (bd breakdown) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Where a create's time goes (%d sequential creates on a separate daemon run with `serve --wire-log`, "+
		"tmux round trips read from the log; p50 / p99):\n\n", bd.n)
	stepTable(&b, []step{
		{"whole `POST /v1/sessions`", bd.api},
		{"`new-session` round trip (tmux: fork, utempter, pty)", bd.newSession},
		{"after `new-session`: fence `spawned`", bd.helperGap},
		{"4 × `set-option` tags, pipelined (tmux)", bd.tags},
		{"rest: HTTP, validation, reserve, `helper_invoked`, `tagged`, publish, release", bd.outside},
	})
	e := bd.ends
	fmt.Fprintf(&b, "\nWhere an end's time goes (%d agents of that daemon killed one at a time; p50 / p99):\n\n", len(e.stream))
	stepTable(&b, []step{
		{"SIGTERM to the agent → tmux's `%sessions-changed` (the agent's exit, pane death, utempter)", e.toNotice},
		{"→ census re-list sent (coalescing quiet period)", e.coalesce},
		{"`list-sessions` round trip", e.relist},
		{"→ verdict written (fence reads, the dead pane's exit, MarkEnded)", e.daemon},
		{"→ read on the follow stream", e.stream},
	})
	b.WriteString("\nEvery command the daemon sent during those creates and ends (round trip on the control connection):\n\n")
	b.WriteString("| command | count | p50 | p99 |\n|---|---|---|---|\n")
	for _, v := range bd.verbs() {
		s := bd.cmdRTT[v]
		fmt.Fprintf(&b, "| `%s` | %d | %s | %s |\n", v, len(s), ms(s.p50()), ms(s.p99()))
	}
	return b.String()
}
