package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skc-supervisor/skc-supervisor/internal/pgtest"
)

// The fleet figures (issue 19, `make bench-fleet`): the PostgreSQL fence
// against the SQLite fence end to end, through the daemon's API, in one run.
//
//	F1  create → published, p50 / p99: one daemon on PostgreSQL and one on
//	    SQLite, the same number of sequential creates, interleaved.
//	F2  3 hosts (three daemons: own homes, tmux servers and host names, one
//	    PostgreSQL) × -par concurrent creates of distinct identities, sessions/s
//	    fleet-wide, against one SQLite daemon doing the same -par creates, and
//	    one PostgreSQL host doing them alone; rounds interleaved.
//	F3  GET /v1/sessions/{name} with either fence at -fleet-sessions sessions,
//	    with GET /v1/ping on the same daemon as the floor, interleaved.
//
// Sessions are not killed between creates (as in the default figures); the
// two daemons of F1 and F3 and their tmux servers are retired before F2 (the
// machine's ptys are shared), the rest go in the reaper's teardown, and the
// PostgreSQL server after the daemons (reaper.addCloser).

// fleetHosts is the fleet's size in F2 (the three hosts).
const fleetHosts = 3

// runFleet measures F1–F3. Without a PostgreSQL server it writes one SKIP
// line and succeeds, so that `make bench` goes on (unless SKC_TEST_PG_BIN
// asked for one, as pgtest does in the tests).
func runFleet(ctx context.Context, o options, r *reaper, bin string, rep *report) error {
	srv, err := pgtest.New()
	if err != nil && os.Getenv(pgtest.EnvBin) != "" {
		// As in the tests: a run that asked for PostgreSQL cannot pass by skipping.
		return fmt.Errorf("%s=%s: cannot start PostgreSQL: %w", pgtest.EnvBin, os.Getenv(pgtest.EnvBin), err)
	}
	if err != nil {
		rep.extra = append(rep.extra, "SKIP fleet figures: PostgreSQL cannot start here: "+oneLine(err.Error()))
		return nil
	}
	r.addCloser(func() {
		if err := srv.Close(); err != nil {
			logf("stop PostgreSQL: %v", err)
		}
	})
	createURL, err := srv.CreateDB(ctx, "bench_create")
	if err != nil {
		return err
	}
	fleetURL, err := srv.CreateDB(ctx, "bench_fleet")
	if err != nil {
		return err
	}
	rep.facts = append(rep.facts, [2]string{"PostgreSQL", pgVersion(ctx, createURL) +
		", private server of internal/pgtest (unix socket, fsync and synchronous_commit off)"})
	pg, err := startDaemonEnv(ctx, r, bin, agent, false, "SKC_FENCE="+createURL, "SKC_HOST=pg-solo")
	if err != nil {
		return err
	}
	sq, err := startDaemonEnv(ctx, r, bin, agent, false)
	if err != nil {
		return err
	}
	logf("F1: %d sequential creates per fence, interleaved", o.fleetCreates)
	pgS, sqS, err := fenceCreateFigure(ctx, pg, sq, o.fleetCreates)
	if err != nil {
		return err
	}
	fenceCreateRow(rep, pgS, sqS)
	if err := fenceLookupRows(ctx, o, rep, pg, sq); err != nil {
		return err
	}
	rep.extra = append(rep.extra,
		"Daemon on the PostgreSQL fence (F1, F3), its own request log:\n\n"+serverTimesMarkdown(pg),
		"Daemon on the SQLite fence (F1, F3), its own request log:\n\n"+serverTimesMarkdown(sq))
	// F2 starts four more daemons: give these two's ptys back first.
	r.retire(pg)
	r.retire(sq)
	if err := fleetBurstRows(ctx, o, r, bin, rep, fleetURL); err != nil {
		return err
	}
	rep.facts = append(rep.facts, [2]string{"load average at end", loadavg()})
	return nil
}

// oneLine keeps the first line of a (possibly multi-line) error.
func oneLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// pgVersion is the server's version string, "PostgreSQL ?" when unreadable.
func pgVersion(ctx context.Context, url string) string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "PostgreSQL ?"
	}
	defer conn.Close(ctx)
	var v string
	if conn.QueryRow(ctx, "SHOW server_version").Scan(&v) != nil {
		return "PostgreSQL ?"
	}
	return "PostgreSQL " + v
}

// fenceCreateFigure is F1: n sequential creates on each daemon, alternating
// which goes first, so drifts in the machine's load hit both fences alike.
func fenceCreateFigure(ctx context.Context, pg, sq *daemon, n int) (pgS, sqS samples, err error) {
	sides := []*daemon{pg, sq}
	out := []*samples{&pgS, &sqS}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		for k := 0; k < 2; k++ {
			s := (i + k) % 2
			dt, err := timed(func() error { _, err := sides[s].create(ctx); return err })
			if err != nil {
				return nil, nil, fmt.Errorf("F1, %s fence, create %d: %w", fenceName(s), i, err)
			}
			*out[s] = append(*out[s], dt)
		}
	}
	return pgS, sqS, ctx.Err()
}

func fenceName(side int) string {
	if side == 0 {
		return "PostgreSQL"
	}
	return "SQLite"
}

func fenceCreateRow(rep *report, pgS, sqS samples) {
	r50, r99 := float64(pgS.p50())/float64(sqS.p50()), float64(pgS.p99())/float64(sqS.p99())
	rep.judge(row{fig: fmt.Sprintf("F1. create → published through the API, p50 / p99 (n=%d per fence)", len(pgS)),
		ours:  fmt.Sprintf("PostgreSQL fence: %s / %s", ms(pgS.p50()), ms(pgS.p99())),
		base:  fmt.Sprintf("SQLite fence: %s / %s", ms(sqS.p50()), ms(sqS.p99())),
		ratio: ratioD(pgS.p50(), sqS.p50()) + " / " + ratioD(pgS.p99(), sqS.p99()), goal: "≤ 1.5×"},
		r50 <= 1.5 && r99 <= 1.5, fmt.Sprintf("%.2f× at p50, %.2f× at p99", r50, r99))
}

// fenceLookupRows fills both daemons to -fleet-sessions and measures F3.
func fenceLookupRows(ctx context.Context, o options, rep *report, pg, sq *daemon) error {
	for _, d := range []*daemon{pg, sq} {
		if err := d.fill(ctx, o.fleetSessions, 8, nil); err != nil {
			return fmt.Errorf("fill to %d sessions: %w (failures: %s)", o.fleetSessions, err, d.failureSummary())
		}
	}
	logf("F3: %d lookups per fence at %d / %d sessions", o.lookups, pg.count(), sq.count())
	res, err := fenceLookupFigure(ctx, []*daemon{pg, sq}, o.lookups)
	if err != nil {
		return err
	}
	pgL, pgP, sqL, sqP := res[0][0], res[0][1], res[1][0], res[1][1]
	for i, d := range []*daemon{pg, sq} {
		l, p := res[i][0], res[i][1]
		rep.add(row{fig: fmt.Sprintf("F3%c. `GET /v1/sessions/{name}`, %s fence, p50 / p99 (%d sessions, n=%d)", 'a'+i, fenceName(i), d.count(), len(l)),
			ours:  fmt.Sprintf("%s / %s", ms(l.p50()), ms(l.p99())),
			base:  fmt.Sprintf("`GET /v1/ping`, same daemon: %s / %s", ms(p.p50()), ms(p.p99())),
			ratio: ratioD(l.p50(), p.p50()) + " / " + ratioD(l.p99(), p.p99()) + " the floor",
			goal:  "—", met: "info"})
	}
	// "Lookups must stay as fast with either fence": the PostgreSQL lookup
	// against the SQLite one, each net of its own daemon's HTTP floor.
	pgNet, sqNet := pgL.p50()-pgP.p50(), sqL.p50()-sqP.p50()
	ok := float64(pgL.p50()) <= 1.25*float64(sqL.p50())
	rep.judge(row{fig: "F3c. lookup, PostgreSQL fence against SQLite fence (p50)",
		ours:  fmt.Sprintf("%s (%s above its ping)", ms(pgL.p50()), ms(pgNet)),
		base:  fmt.Sprintf("%s (%s above its ping)", ms(sqL.p50()), ms(sqNet)),
		ratio: ratioD(pgL.p50(), sqL.p50()), goal: "≤ 1.25× (as fast)"},
		ok, fmt.Sprintf("%s of SQLite's lookup", ratioD(pgL.p50(), sqL.p50())))
	return nil
}

// fenceLookupFigure is F3: for each daemon, lookups of its sessions by name
// and GET /v1/ping, the daemons and the two requests interleaved and their
// order rotated. res[d] is {lookups, pings} of daemon d.
func fenceLookupFigure(ctx context.Context, ds []*daemon, reps int) ([][2]samples, error) {
	res := make([][2]samples, len(ds))
	for i := 0; i < reps && ctx.Err() == nil; i++ {
		for k := 0; k < 2*len(ds); k++ {
			j := (i + k) % (2 * len(ds))
			d, ping := ds[j/2], j%2 == 1
			name := d.pick(i * 7).Name
			dt, err := timed(func() error {
				if ping {
					_, _, err := d.do(ctx, http.MethodGet, "/v1/ping", nil)
					return err
				}
				return d.lookup(ctx, name)
			})
			if err != nil {
				return nil, fmt.Errorf("F3, %s fence: %w", fenceName(j/2), err)
			}
			res[j/2][j%2] = append(res[j/2][j%2], dt)
		}
	}
	return res, ctx.Err()
}

// fleetBurstRows starts the fleet (fleetHosts daemons on one PostgreSQL
// database) and a fresh SQLite daemon and measures F2.
func fleetBurstRows(ctx context.Context, o options, r *reaper, bin string, rep *report, url string) error {
	var hosts []*daemon
	for i := 0; i < fleetHosts; i++ {
		d, err := startDaemonEnv(ctx, r, bin, agent, false, "SKC_FENCE="+url, fmt.Sprintf("SKC_HOST=host-%c", 'a'+i))
		if err != nil {
			return err
		}
		hosts = append(hosts, d)
	}
	sq, err := startDaemonEnv(ctx, r, bin, agent, false)
	if err != nil {
		return err
	}
	logf("F2: %d rounds of %d hosts × %d concurrent creates, one PostgreSQL host × %d, one SQLite daemon × %d",
		o.rounds, fleetHosts, o.par, o.par, o.par)
	sides := [][]*daemon{hosts, hosts[:1], {sq}}
	got := make([][]float64, len(sides))
	for round := 0; round < o.rounds && ctx.Err() == nil; round++ {
		for k := range sides {
			s := (round + k) % len(sides)
			wall, err := burstHosts(ctx, sides[s], o.par)
			if err != nil {
				return fmt.Errorf("F2, round %d, side %d: %w", round, s, err)
			}
			got[s] = append(got[s], float64(len(sides[s])*o.par)/wall.Seconds())
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := fleetCounts(ctx, hosts, o.rounds*o.par*2, o.rounds*o.par); err != nil {
		return err
	}
	fleet, one, lite := median(got[0]), median(got[1]), median(got[2])
	rep.add(row{fig: fmt.Sprintf("F2. %d hosts × %d concurrent creates of distinct identities, sessions/s fleet-wide (median of %d rounds)",
		fleetHosts, o.par, len(got[0])),
		ours:  fmt.Sprintf("%.1f /s (rounds: %s)", fleet, rates(got[0])),
		base:  fmt.Sprintf("one daemon on SQLite, %d concurrent creates: %.1f /s (rounds: %s)", o.par, lite, rates(got[2])),
		ratio: ratio(fleet, lite), goal: "—", met: "info"})
	rep.add(row{fig: fmt.Sprintf("F2a. one PostgreSQL host alone × %d concurrent creates, sessions/s (median of %d rounds)", o.par, len(got[1])),
		ours:  fmt.Sprintf("%.1f /s (rounds: %s)", one, rates(got[1])),
		base:  fmt.Sprintf("SQLite, same rounds: %.1f /s", lite),
		ratio: ratio(one, lite), goal: "—", met: "info"})
	return nil
}

// burstHosts releases par creates on each daemon at once (distinct
// identities: each daemon's own state dir) and returns the wall time until
// the last one answered.
func burstHosts(ctx context.Context, ds []*daemon, par int) (time.Duration, error) {
	var next atomic.Int64
	return burst(len(ds)*par, func() error {
		i := int(next.Add(1) - 1)
		_, err := ds[i%len(ds)].create(ctx)
		return err
	})
}

// fleetCounts checks that each host lists exactly the sessions it created:
// host a took part in the fleet and the alone bursts, the others in the
// fleet's only. A figure over sessions that did not all come up would lie.
func fleetCounts(ctx context.Context, hosts []*daemon, wantA, wantOther int) error {
	var errs []error
	for i, d := range hosts {
		want := wantOther
		if i == 0 {
			want = wantA
		}
		n, err := d.waitListed(ctx)
		if err == nil && (n != want || d.count() != want) {
			err = fmt.Errorf("host-%c lists %d sessions, created %d, want %d", 'a'+i, n, d.count(), want)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
