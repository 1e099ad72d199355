package main

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/skc-supervisor/skc-supervisor/api"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// envFlags collects repeated --env KEY=VALUE. A malformed entry is kept
// and refused after parsing, so the error names the field "env" rather than
// being a generic usage error.
type envFlags struct {
	m      map[string]string
	bad    string
	hasBad bool   // bad is set: an empty entry (`--env ''`) is malformed too
	dup    string // a KEY given twice: refused, as a repeated key of the API's env object is
}

func (e *envFlags) String() string { return "" }

func (e *envFlags) Set(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		if !e.hasBad {
			e.bad, e.hasBad = kv, true
		}
		return nil
	}
	if _, seen := e.m[k]; seen && e.dup == "" {
		e.dup = k
	}
	e.m[k] = v
	return nil
}

func (e *envFlags) check() error {
	if e.hasBad {
		return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "env", "name": e.bad},
			"env: %q is not KEY=VALUE", e.bad)
	}
	if e.dup != "" {
		return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "env", "name": e.dup},
			"env: %s is given twice; give each KEY once", e.dup)
	}
	return nil
}

// absPath resolves a relative CLI path against the caller's working
// directory (docs/contract.md); the daemon requires absolute paths.
func absPath(field, p string) (string, error) {
	if p == "" || filepath.IsAbs(p) {
		return p, nil
	}
	a, err := filepath.Abs(p)
	if err != nil {
		return "", verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": field}, "%s: %v", field, err)
	}
	return a, nil
}

func runCreate(cli *CLI, args []string) int {
	var o opts
	var req api.CreateRequest
	env := &envFlags{m: map[string]string{}}
	fs := newFlags("create", &o, true)
	fs.StringVar(&req.StateDir, "state-dir", "", "")
	fs.StringVar(&req.SessionID, "session-id", "", "")
	fs.StringVar(&req.StateFile, "state-file", "", "")
	fs.StringVar(&req.Cwd, "cwd", "", "")
	fs.StringVar(&req.Label, "label", "", "")
	fs.Var(env, "env", "")
	wait := durationFlag(api.DefaultWait)
	fs.Var(wholeFlag{&wait, time.Millisecond, "milliseconds"}, "wait", "")
	stopTimeout := durationFlag(api.DefaultStopTimeout)
	fs.Var(wholeFlag{&stopTimeout, time.Millisecond, "milliseconds"}, "stop-timeout", "")
	rf := restartFlags(fs, &req)
	argv, err := commandArgs(fs, args)
	if err == nil {
		err = explicitEmpty(fs, "state-file", "cwd", "restart") // written empty is not absent
	}
	if err != nil {
		return cli.fail(o, err)
	}
	req.Argv = argv
	if err := env.check(); err != nil {
		return cli.fail(o, err)
	}
	if len(env.m) > 0 {
		req.Env = env.m
	}
	ms := time.Duration(wait).Milliseconds()
	req.WaitMS = &ms
	if time.Duration(stopTimeout) != api.DefaultStopTimeout {
		st := time.Duration(stopTimeout).Milliseconds()
		req.StopTimeoutMS = &st
	}
	rf.apply(&req)
	if err := cli.resolveCreate(&req); err != nil {
		return cli.fail(o, err)
	}
	// Validate here too, so bad input is exit 2 even when the daemon is down.
	if _, err := api.Validate(req); err != nil {
		return cli.fail(o, err)
	}
	c, err := cli.client(o)
	if err != nil {
		return cli.fail(o, err)
	}
	defer c.Close()
	res, err := c.Create(cli.ctx, req)
	if err != nil {
		return cli.fail(o, err)
	}
	if o.json {
		cli.printJSON(res)
		return verdict.ExitOK
	}
	printCreate(cli.stdout, res, attachPrefix(o))
	return verdict.ExitOK
}

// commandArgs parses create's flags and returns the command after "--". The
// "--" is required: without it a typo'd or misplaced flag would silently become
// part of the agent's command (`create … sleep 100 --json`), or a flag after
// the command would be read as ours.
func commandArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	if err := fs.Parse(args); err != nil {
		wantJSON(fs, args)
		return nil, usageError(fs.Name(), err)
	}
	if err := onceEach(fs, args); err != nil {
		return nil, err
	}
	rest := fs.Args()
	if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
		return rest, nil
	}
	if len(rest) == 0 {
		return nil, verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "argv"},
			"argv: no command: give it after --, as in: skc-supervisor create … -- COMMAND [ARG]...")
	}
	wantJSON(fs, rest) // `create … sleep 100 --json`: the --json was meant for us
	return nil, verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "argv", "word": rest[0]},
		"argv: %q: put -- before the command (create … -- COMMAND [ARG]...); every word after -- is the command's", rest[0])
}

// resolveCreate makes the request's paths absolute against our working
// directory; --cwd defaults to it, so a relative COMMAND runs where it was
// typed.
func (cli *CLI) resolveCreate(req *api.CreateRequest) error {
	var err error
	if req.StateDir, err = absPath("state_dir", req.StateDir); err != nil {
		return err
	}
	if req.StateFile, err = absPath("state_file", req.StateFile); err != nil {
		return err
	}
	if req.Cwd == "" {
		wd, err := os.Getwd()
		switch {
		case err == nil:
			req.Cwd = wd
		case filepath.IsAbs(os.Getenv("PWD")):
			// The caller's directory was removed: sent as the shell named
			// it, so the daemon refuses it (spawn_failed, cwd_missing) with
			// its verdict, instead of starting the agent in its own.
			req.Cwd = filepath.Clean(os.Getenv("PWD"))
		default:
			return verdict.Errorf(verdict.CodeSpawnFailed, map[string]any{"field": "cwd", "reason": "cwd_missing"},
				"the working directory is gone (%v): give --cwd", err)
		}
		return nil
	}
	req.Cwd, err = absPath("cwd", req.Cwd)
	return err
}

// refArgs parses NAME | --state-dir DIR --session-id ID for show, kill and
// attach.
func refArgs(name string, args []string, withJSON bool) (opts, api.Ref, error) {
	var o opts
	var ref api.Ref
	fs := newFlags(name, &o, withJSON)
	fs.StringVar(&ref.StateDir, "state-dir", "", "")
	fs.StringVar(&ref.SessionID, "session-id", "", "")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return o, ref, err
	}
	switch {
	case len(pos) > 1:
		return o, ref, usageError(name, errors.New("more than one session name"))
	case len(pos) == 1:
		ref.Name = pos[0]
	case ref.StateDir == "" && ref.SessionID == "":
		return o, ref, usageError(name, errors.New("give a session NAME or --state-dir and --session-id"))
	}
	if ref.StateDir, err = absPath("state_dir", ref.StateDir); err != nil {
		return o, ref, err
	}
	ref, err = api.ValidateRef(ref)
	return o, ref, err
}

func runList(cli *CLI, args []string) int {
	var o opts
	fs := newFlags("ls", &o, true)
	fleet := fs.Bool("fleet", false, "")
	if err := parseNoArgs(fs, args); err != nil {
		return cli.fail(o, err)
	}
	if *fleet {
		return respond(cli, o, func(c *api.Client) (api.ListResponse, error) { return c.ListFleet(cli.ctx) },
			func(res api.ListResponse) { printFleetList(cli.stdout, res) })
	}
	return respond(cli, o, func(c *api.Client) (api.ListResponse, error) { return c.List(cli.ctx) },
		func(res api.ListResponse) { printList(cli.stdout, res) })
}

func runShow(cli *CLI, args []string) int {
	o, ref, err := refArgs("show", args, true)
	if err != nil {
		return cli.fail(o, err)
	}
	return respond(cli, o, func(c *api.Client) (api.ShowResponse, error) {
		res, err := c.Show(cli.ctx, ref)
		// docs/contract.md: "reservation" is null and "verdicts" a list, never absent.
		if len(res.Reservation) == 0 {
			res.Reservation = []byte("null")
		}
		if res.Verdicts == nil {
			res.Verdicts = []verdict.Record{}
		}
		return res, err
	}, func(res api.ShowResponse) { printShow(cli.stdout, res) })
}

func runKill(cli *CLI, args []string) int {
	o, ref, err := refArgs("kill", args, true)
	if err != nil {
		return cli.fail(o, err)
	}
	return respond(cli, o, func(c *api.Client) (api.KillResponse, error) { return c.Kill(cli.ctx, ref) },
		func(res api.KillResponse) { printKill(cli.stdout, ref, res) })
}

func runRestart(cli *CLI, args []string) int {
	o, ref, err := refArgs("restart", args, true)
	if err != nil {
		return cli.fail(o, err)
	}
	return respond(cli, o, func(c *api.Client) (api.RestartResponse, error) { return c.Restart(cli.ctx, ref) },
		func(res api.RestartResponse) { printRestart(cli.stdout, res) })
}

func runFence(cli *CLI, args []string) int {
	// The sub-verb may follow global flags (`fence --home DIR release …`,
	// and `--home DIR fence release …`, which Main hoists to just after
	// "fence"): they are moved past it, as Main moves them past the verb,
	// so the sub-verb's own flag set parses them with its own flags.
	if sub, err := hoistGlobals(args); err == nil && len(sub) > 0 {
		switch sub[0] {
		case "release":
			return runFenceRelease(cli, sub[1:])
		case "forget":
			return runFenceForget(cli, sub[1:])
		}
	}
	var o opts
	fs := newFlags("fence", &o, true)
	if err := parseNoArgs(fs, args); err != nil {
		return cli.fail(o, err)
	}
	return respond(cli, o, func(c *api.Client) (api.FenceResponse, error) { return c.Fence(cli.ctx) },
		func(res api.FenceResponse) { printFence(cli.stdout, res) })
}

func runVerdicts(cli *CLI, args []string) int {
	var o opts
	fs := newFlags("verdicts", &o, true)
	since := decimalVar(fs, "since", 0)
	follow := fs.Bool("follow", false, "")
	fleet := fs.Bool("fleet", false, "")
	if err := parseNoArgs(fs, args); err != nil {
		return cli.fail(o, err)
	}
	if int64(*since) < 0 {
		return cli.fail(o, verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "since"},
			"--since must be a sequence number >= 0"))
	}
	c, err := cli.client(o)
	if err != nil {
		return cli.fail(o, err)
	}
	defer c.Close()
	read := c.Verdicts
	if *fleet {
		read = c.FleetVerdicts
	}
	err = read(cli.ctx, int64(*since), *follow, func(line []byte) error {
		_, err := cli.stdout.Write(append(line, '\n'))
		return err
	})
	if err != nil && cli.ctx.Err() == nil {
		return cli.fail(o, err)
	}
	return verdict.ExitOK
}

// respond is every simple verb's second half: one request to the daemon, then its
// answer as the one JSON document with --json, or as text for people.
func respond[T any](cli *CLI, o opts, call func(*api.Client) (T, error), text func(T)) int {
	c, err := cli.client(o)
	if err != nil {
		return cli.fail(o, err)
	}
	defer c.Close()
	res, err := call(c)
	if err != nil {
		return cli.fail(o, err)
	}
	if o.json {
		cli.printJSON(res)
		return verdict.ExitOK
	}
	text(res)
	return verdict.ExitOK
}

// runFenceRelease is `fence release --reservation ID`: the operator's escape
// for a reservation row or a generation that can never be proven dead or gone.
// The daemon refuses while the owner or the processes are proven alive.
func runFenceRelease(cli *CLI, args []string) int {
	var o opts
	fs := newFlags("fence release", &o, true)
	resID := fs.String("reservation", "", "")
	if err := parseNoArgs(fs, args); err != nil {
		return cli.fail(o, err)
	}
	if *resID == "" {
		return cli.fail(o, verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "reservation"},
			"fence release needs --reservation ID"))
	}
	return respond(cli, o, func(c *api.Client) (api.ReleaseResponse, error) { return c.Release(cli.ctx, *resID) },
		func(res api.ReleaseResponse) { printRelease(cli.stdout, res) })
}

// runFenceForget is `fence forget --host NAME`: the operator's escape for a
// host that is gone for good — every row and running generation of it is
// cleared, with one verdict, so its identities can be created elsewhere. The
// daemon refuses its own host.
func runFenceForget(cli *CLI, args []string) int {
	var o opts
	fs := newFlags("fence forget", &o, true)
	host := fs.String("host", "", "")
	if err := parseNoArgs(fs, args); err != nil {
		return cli.fail(o, err)
	}
	if *host == "" {
		return cli.fail(o, verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "host"},
			"fence forget needs --host NAME (the host that is gone for good)"))
	}
	return respond(cli, o, func(c *api.Client) (api.ForgetResponse, error) { return c.Forget(cli.ctx, *host) },
		func(res api.ForgetResponse) { printForget(cli.stdout, res) })
}

// createRestartFlags are create's restart policy flags: --restart,
// --resume-arg (repeated: the resume command's words), --restart-delay,
// --restart-burst, --restart-interval. Each sets its field only when given,
// so the daemon's defaults apply otherwise.
type createRestartFlags struct {
	resume          multiFlag
	delay, interval durationFlag
	burst           *decimalFlag
	set             map[string]bool
	fs              *flag.FlagSet
}

type multiFlag []string

func (m *multiFlag) String() string     { return "" }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func restartFlags(fs *flag.FlagSet, req *api.CreateRequest) *createRestartFlags {
	rf := &createRestartFlags{delay: durationFlag(api.DefaultRestartDelay),
		interval: durationFlag(api.DefaultRestartInterval), fs: fs}
	fs.StringVar(&req.Restart, "restart", "", "")
	fs.Var(&rf.resume, "resume-arg", "")
	fs.Var(wholeFlag{&rf.delay, time.Millisecond, "milliseconds"}, "restart-delay", "")
	rf.burst = decimalVar(fs, "restart-burst", api.DefaultRestartBurst)
	fs.Var(wholeFlag{&rf.interval, time.Second, "seconds"}, "restart-interval", "")
	return rf
}

// apply copies the flags that were given into req.
func (rf *createRestartFlags) apply(req *api.CreateRequest) {
	rf.fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "resume-arg":
			req.ResumeArgv = append([]string(nil), rf.resume...)
		case "restart-delay":
			ms := time.Duration(rf.delay).Milliseconds()
			req.RestartDelayMS = &ms
		case "restart-burst":
			b := int64(*rf.burst)
			req.RestartBurst = &b
		case "restart-interval":
			s := int64(time.Duration(rf.interval) / time.Second)
			req.RestartIntervalS = &s
		}
	})
}
