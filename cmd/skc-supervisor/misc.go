package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/skc-supervisor/skc-supervisor/api"
	"github.com/skc-supervisor/skc-supervisor/doctor"
	"github.com/skc-supervisor/skc-supervisor/home"
	"github.com/skc-supervisor/skc-supervisor/lifecycle"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// runAttach resolves the session through the daemon, then replaces this
// process with `tmux -S <tmux.sock> attach -t <target>`. The target is the
// session's $id (exact, docs/tmux-facts.md §7.3) or, failing that, "=name": a plain
// name would be prefix-matched by tmux and could attach to another session.
func runAttach(cli *CLI, args []string) int {
	o, ref, err := refArgs("attach", args, false)
	if err != nil {
		return cli.fail(o, err)
	}
	p, err := cli.paths(o)
	if err != nil {
		return cli.fail(o, err)
	}
	c, err := cli.client(o)
	if err != nil {
		return cli.fail(o, err)
	}
	bin := attachTmux(cli, c, o, p.Tmux)
	exists := func(id string) bool {
		// The record's view of a generation whose session is gone names its
		// old id too: only tmux says whether a session has it now.
		return exec.Command(bin, "-S", p.TmuxSocket(), "has-session", "-t", id).Run() == nil
	}
	target, err := attachTarget(cli, c, ref, exists)
	c.Close()
	if err != nil {
		return cli.fail(o, err)
	}
	tmux, err := exec.LookPath(bin)
	if err != nil {
		return cli.fail(o, verdict.Errorf(verdict.CodeTmuxUnavailable, map[string]any{"tmux": p.Tmux},
			"cannot find tmux (%s): %w", p.Tmux, err))
	}
	if !socketAnswers(p.TmuxSocket(), attachSocketWait) {
		// attach-session at a path where no server answers starts one: a
		// throw-away server that says "no sessions" and leaves a stale
		// socket behind. The daemon recreates a removed socket within 5 s.
		return cli.fail(o, verdict.Errorf(verdict.CodeTmuxUnavailable, map[string]any{"socket": p.TmuxSocket()},
			"no tmux server answers on %s; a daemon recreates its server's removed socket within 5 s: try again", p.TmuxSocket()))
	}
	argv := []string{tmux, "-S", p.TmuxSocket(), "attach-session", "-t", target}
	if os.Getenv("TMUX") != "" {
		fmt.Fprintln(cli.stderr, "skc-supervisor: note: $TMUX is set; tmux may refuse to nest (unset TMUX to force)")
	}
	err = syscall.Exec(tmux, argv, os.Environ())
	return cli.fail(o, verdict.Errorf(verdict.CodeInternal, nil, "exec %s: %w", tmux, err))
}

// attachSocketWait bounds attach's wait for the server's socket to answer:
// a little over the daemon's look for a removed one (tmuxctl, 5 s).
const attachSocketWait = 6 * time.Second

// socketAnswers reports whether something accepts a connection at path,
// waiting up to d for it.
func socketAnswers(path string, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// attachTmux is the tmux binary attach runs (and doctor checks): the one given to this command
// (--tmux, SKC_TMUX), else the daemon's own (GET /v1/info) — a tmux client
// of another version than the server's cannot attach to it ("server exited
// unexpectedly"), and a daemon started with SKC_TMUX set (a unit file) is
// attached to from shells without it — else tmux on PATH.
func attachTmux(cli *CLI, c *api.Client, o opts, def string) string {
	if o.o.Tmux != "" || cli.getenv(home.EnvTmux) != "" {
		return def
	}
	info, err := c.Info(cli.ctx)
	if err != nil || info.Tmux == "" {
		return def
	}
	if fi, err := os.Stat(info.Tmux); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return def
	}
	return info.Tmux
}

// attachTarget resolves ref to the tmux target attach hands tmux: the
// session's $id, or "=name" for a session listed without one. A generation
// that is not running (stopping, or ended and waiting for its restart) may be
// shown from its published record after its session went, with the tmux id
// it had — an id a newer server may have given another session — so its id
// is resolved once more and must name a live session of the same generation
// (a kept session does): attaching a person to another agent's terminal would
// be worse than refusing.
func attachTarget(cli *CLI, c *api.Client, ref api.Ref, exists func(id string) bool) (string, error) {
	res, err := c.Show(cli.ctx, ref)
	if err != nil {
		return "", err
	}
	s := res.Session
	if s == nil {
		return "", verdict.Errorf(verdict.CodeNotFound, nil, "the identity has no live session to attach to")
	}
	if s.AttachHint != "" {
		// Another host's session: its tmux server is not reachable from here.
		return "", verdict.Errorf(verdict.CodeRemoteSession, map[string]any{"host": s.Host, "name": s.Name},
			"session %s runs on host %s: attach there with `%s`", s.Name, s.Host, s.AttachHint)
	}
	if s.ID == "" {
		return "=" + s.Name, nil
	}
	if s.State == "" || s.State == lifecycle.StateRunning {
		return s.ID, nil // listed, running (or not ours): the id is the live one's
	}
	again, err := c.Show(cli.ctx, api.Ref{Name: s.ID})
	if err == nil && again.Session != nil && sameGeneration(s, again.Session) && exists(s.ID) {
		return s.ID, nil
	}
	if err != nil && verdict.CodeOf(err) != verdict.CodeNotFound {
		return "", err
	}
	why := "is stopping until its processes are proven gone"
	if s.State != lifecycle.StateStopping {
		why = "has ended (" + s.State + ")"
	}
	return "", verdict.Errorf(verdict.CodeNotFound, map[string]any{"name": s.Name, "id": s.ID, "state": s.State},
		"session %s (%s) is gone: its generation %d %s; there is nothing to attach to", s.Name, s.ID, s.Generation, why)
}

// sameGeneration: a and b are one generation of one identity in one session.
func sameGeneration(a, b *api.Session) bool {
	return a.Managed && b.Managed && a.ID == b.ID && a.StateDir == b.StateDir &&
		a.SessionID == b.SessionID && a.Generation == b.Generation
}

// runTmuxctl is `tmuxctl decode`: control-mode bytes on stdin → JSON lines.
func runTmuxctl(cli *CLI, args []string) int {
	var o opts
	pos, err := parseArgs(newFlags("tmuxctl", &o, false), args)
	if err == nil && (len(pos) != 1 || pos[0] != "decode") {
		err = usageError("tmuxctl", errors.New("the only subcommand is decode"))
	}
	if err != nil {
		return cli.fail(o, err)
	}
	if err := tmuxctl.Decode(os.Stdin, cli.stdout); err != nil {
		fmt.Fprintf(cli.stderr, "skc-supervisor tmuxctl decode: %v\n", err)
		return verdict.ExitFailed
	}
	return verdict.ExitOK
}

// runHelper is the pane side of a supervised session (hidden verb).
func runHelper(cli *CLI, args []string) int {
	return lifecycle.RunHelper(args, openFence)
}

// runDoctor checks the installation; it only reads.
func runDoctor(cli *CLI, args []string) int {
	var o opts
	fs := newFlags("doctor", &o, true)
	if err := parseNoArgs(fs, args); err != nil {
		return cli.fail(o, err)
	}
	p, err := cli.paths(o)
	if err != nil {
		return cli.fail(o, err)
	}
	bin, conf := p.Tmux, p.TmuxConfig
	if c, err := cli.client(o); err == nil {
		// A running daemon's tmux and config are the ones that matter
		// (attachTmux), unless this command names its own.
		bin = attachTmux(cli, c, o, p.Tmux)
		if o.o.TmuxConfig == "" && cli.getenv(home.EnvTmuxConfig) == "" {
			if info, err := c.Info(cli.ctx); err == nil {
				conf = info.TmuxConfig
			}
		}
		c.Close()
	}
	return doctor.Run(cli.ctx, doctor.Config{Home: p.Home, RuntimeDir: p.RuntimeDir,
		TmuxPath: bin, TmuxConfig: conf}, cli.stdout, o.json)
}
