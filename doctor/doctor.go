// Package doctor checks that an skc-supervisor installation can work and says
// how to fix what cannot: tmux presence and version, socket path lengths,
// directory and file permissions, fence database integrity, daemon
// reachability, pty headroom and what holds a generation's processes. It is `skc-supervisor doctor`.
//
// Doctor only reads. The database is opened read-only (never created, never
// migrated), the instance lock is never taken (a shared flock, however brief,
// could make a starting daemon exit 75 "busy"), and nothing is chmod'ed: the
// fix lines say what to run.
package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Config is where to look; the lead wires it from home.Resolve's Paths.
type Config struct {
	Home       string // SKC_HOME
	RuntimeDir string // where api.sock and tmux.sock live
	TmuxPath   string // tmux binary; "" or a bare name → looked up on PATH
	TmuxConfig string // SKC_TMUX_CONFIG; "" → tmux's own default
	// PtyDir holds the pty counters nr and max; "" → /proc/sys/kernel/pty.
	PtyDir string
	// Timeout bounds each probe (tmux -V, the ping, the integrity check);
	// 0 → DefaultTimeout.
	Timeout time.Duration
}

// DefaultTimeout bounds one probe when Config.Timeout is zero.
const DefaultTimeout = 5 * time.Second

// MinTmux is the oldest tmux the supervisor supports (docs/tmux-facts.md is 3.3a).
var MinTmux = [2]int{3, 3}

// Status is a check's outcome.
type Status string

// Statuses. Warn and Fail are problems (exit 1); Skip means the check does not
// apply yet (a fresh home: nothing created so far).
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "fail"
	Skip Status = "skip"
)

// Result is one finding. Check is a stable snake_case name; Fix, set for every
// problem, is what to run or change.
type Result struct {
	Check   string `json:"check"`
	Status  Status `json:"status"`
	Message string `json:"message"`
	Fix     string `json:"fix"` // "" when there is nothing to fix: the field is always there (docs/contract.md)
}

// Report is every finding, in check order; OK is false when any is a problem.
type Report struct {
	OK     bool     `json:"ok"`
	Checks []Result `json:"checks"`
}

// Problems counts the results that are warnings or failures.
func (r Report) Problems() int {
	n := 0
	for _, c := range r.Checks {
		if c.Status == Warn || c.Status == Fail {
			n++
		}
	}
	return n
}

// checks run in this order: cheap and local first, the daemon last.
var checks = []func(context.Context, Config) []Result{
	checkTmux,
	checkTmuxConfig,
	checkSocketPaths,
	checkDirs,
	checkFiles,
	checkDatabase,
	checkDaemon,
	checkPty,
	checkCgroups,
}

// Check runs every check and returns the findings.
func Check(ctx context.Context, cfg Config) Report {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	var rep Report
	for _, c := range checks {
		rep.Checks = append(rep.Checks, c(ctx, cfg)...)
	}
	rep.OK = rep.Problems() == 0
	return rep
}

// Run checks, writes the report to w (text, or one JSON document when
// jsonOut), and returns the exit code: 0 when all is well, 1 when any problem
// was found.
func Run(ctx context.Context, cfg Config, w io.Writer, jsonOut bool) int {
	rep := Check(ctx, cfg)
	if jsonOut {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		writeText(w, rep)
	}
	if rep.OK {
		return 0
	}
	return 1
}

func writeText(w io.Writer, rep Report) {
	for _, c := range rep.Checks {
		fmt.Fprintf(w, "%-5s %-12s %s\n", strings.ToUpper(string(c.Status)), c.Check, c.Message)
		if c.Fix != "" {
			fmt.Fprintf(w, "%-5s %-12s fix: %s\n", "", "", c.Fix)
		}
	}
	switch n := rep.Problems(); n {
	case 0:
		fmt.Fprintln(w, "all checks passed")
	case 1:
		fmt.Fprintln(w, "1 problem found")
	default:
		fmt.Fprintf(w, "%d problems found\n", n)
	}
}

// shq quotes a path for a fix line the user may paste into a shell.
func shq(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+:@%=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
