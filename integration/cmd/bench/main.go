// Command bench is the end-to-end benchmark of `make bench`, `make
// bench-scale` and `make bench-fleet` (-fleet: the PostgreSQL fence against
// the SQLite fence, on a private PostgreSQL server of internal/pgtest that is
// stopped after the daemons). It starts private daemons (`skc-supervisor serve` in short
// temp homes, SKC_TMUX_CONFIG=/dev/null) and private baseline tmux servers,
// measures our side and tmux's side in the same run, interleaved, and writes a
// markdown table with the machine's facts to -out and stdout.
//
// Everything it starts is stopped and killed by pid at the end, also on error
// or on SIGINT/SIGTERM: daemons by SIGTERM then SIGKILL, tmux servers by
// kill-server then SIGKILL, and then every process that carries the bench's
// environment mark (helpers, agents); the temp homes are removed. All traffic
// is on unix sockets.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// options are the command-line flags.
type options struct {
	bin, out        string
	perfDir         string
	scale           bool
	paneCost        bool
	fleet           bool
	fleetCreates    int
	fleetSessions   int
	beforeBin       string
	paneN, memN     int
	creates, ends   int
	rounds, par     int
	listN, listReps int
	lookups         int
	breakdownN      int
	scaleN, scaleAt int
	scaleWire       bool
	createBudget    time.Duration
	timeout         time.Duration
	args            []string
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.bin, "bin", "", "skc-supervisor binary (default: go build ./cmd/skc-supervisor into a temp dir)")
	flag.StringVar(&o.out, "out", "", "also write the markdown here")
	flag.StringVar(&o.perfDir, "perf", "", "record `perf` profiles of the daemon during the figures into this directory")
	flag.BoolVar(&o.scale, "scale", false, "run the scale run (4,000 live sessions) instead of the default figures")
	flag.BoolVar(&o.paneCost, "pane-cost", false, "measure the per-session overhead (processes of ours per session, daemon memory per session) instead of the default figures")
	flag.BoolVar(&o.fleet, "fleet", false, "measure the fleet figures (PostgreSQL fence against SQLite fence, 3 hosts on one PostgreSQL) instead of the default figures; one SKIP line when PostgreSQL cannot start")
	flag.IntVar(&o.fleetCreates, "fleet-creates", 200, "fleet: sequential creates per fence (F1)")
	flag.IntVar(&o.fleetSessions, "fleet-sessions", 300, "fleet: sessions per daemon for the lookups (F3)")
	flag.StringVar(&o.beforeBin, "before-bin", "", "pane-cost: the binary to compare with (before the pane helper exec'd its agent)")
	flag.IntVar(&o.paneN, "pane-n", 20, "pane-cost: sessions whose pane trees are measured, per binary")
	flag.IntVar(&o.memN, "mem-n", 1000, "pane-cost: sessions for the daemon's memory per session (capped by free ptys and memory)")
	flag.IntVar(&o.creates, "creates", 100, "sequential creates per side (figures 1, 2)")
	flag.IntVar(&o.ends, "ends", 100, "session ends measured (figure 5; at -creates sessions)")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds of concurrent creates per side (figure 6)")
	flag.IntVar(&o.par, "par", 32, "concurrent creates per round (figure 6)")
	flag.IntVar(&o.listN, "list-n", 200, "sessions for the list and lookup figures (the goal's 1,000 is in -scale)")
	flag.IntVar(&o.listReps, "list-reps", 100, "list requests per side")
	flag.IntVar(&o.lookups, "lookups", 500, "lookups per side")
	flag.IntVar(&o.breakdownN, "breakdown", 30, "creates on a wire-logged daemon to attribute create time (0: skip)")
	flag.IntVar(&o.scaleN, "scale-n", 4000, "scale: live sessions wanted (capped by free ptys)")
	flag.IntVar(&o.scaleAt, "scale-list-at", 1000, "scale: also measure list and lookup at this many sessions")
	flag.BoolVar(&o.scaleWire, "scale-wire", false, "scale: run the daemon with a wire log and split each end into its steps")
	flag.DurationVar(&o.createBudget, "scale-create-budget", 40*time.Minute, "scale: stop creating after this long and measure what exists")
	flag.DurationVar(&o.timeout, "timeout", 0, "overall bound (default 30m, 90m with -scale)")
	flag.Parse()
	if o.timeout == 0 {
		o.timeout = 30 * time.Minute
		if o.scale {
			o.timeout = 90 * time.Minute
		}
	}
	o.args = os.Args[1:]
	return o
}

func main() { os.Exit(run()) }

func run() (code int) {
	o := parseFlags()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	r := &reaper{}
	rep := &report{command: "go run ./integration/cmd/bench " + strings.Join(o.args, " ")}
	defer func() {
		// Runs on return and on panic: nothing we started outlives us.
		if p := recover(); p != nil {
			rep.errs = append(rep.errs, fmt.Sprint("panic: ", p))
			code = 3
		}
		td := r.teardown()
		logf("teardown: daemons %v, tmux servers %v, swept %d stray processes, %d/%d homes removed",
			td.daemons.Round(time.Millisecond), td.servers.Round(time.Millisecond), td.swept, td.homesRemoved, td.homes)
		if o.scale {
			scaleTeardownRow(rep, td)
		}
		if err := emit(o, rep); err != nil && code == 0 {
			code = 1
		}
	}()
	bin, err := binary(ctx, o, r)
	if err != nil {
		rep.errs = append(rep.errs, err.Error())
		return 1
	}
	rep.facts = machineFacts(bin)
	switch {
	case o.scale:
		rep.title = "Scale (make bench-scale) — generated"
		err = runScale(ctx, o, r, bin, rep)
	case o.fleet:
		rep.title = "Fleet: PostgreSQL fence against SQLite fence (make bench-fleet) — generated"
		err = runFleet(ctx, o, r, bin, rep)
	case o.paneCost:
		rep.title = "Per-session overhead (make bench) — generated"
		err = runPaneCost(ctx, o, r, bin, rep)
	default:
		rep.title = "End to end (make bench) — generated"
		err = runDefault(ctx, o, r, bin, rep)
	}
	if err != nil {
		rep.errs = append(rep.errs, err.Error())
		logf("error: %v", err)
		return 1
	}
	return 0
}

func emit(o options, rep *report) error {
	md := rep.markdown()
	fmt.Print(md)
	if o.out == "" {
		return nil
	}
	if err := os.WriteFile(o.out, []byte(md), 0o644); err != nil {
		logf("write %s: %v", o.out, err)
		return err
	}
	return nil
}

// binary returns -bin, or builds the daemon into a temp dir of the reaper.
func binary(ctx context.Context, o options, r *reaper) (string, error) {
	if o.bin != "" {
		return filepath.Abs(o.bin)
	}
	dir, err := r.newHome()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "skc-supervisor")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "github.com/skc-supervisor/skc-supervisor/cmd/skc-supervisor")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build: %w", err)
	}
	return bin, nil
}

// logf is progress on stderr (stdout carries the markdown).
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// agent is what every session runs: it holds its pty and lives until killed.
var agent = []string{"sleep", "100000"}
