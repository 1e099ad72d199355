package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/skc-supervisor/skc-supervisor/api"
	"github.com/skc-supervisor/skc-supervisor/api/backend"
	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/sqlite"
	"github.com/skc-supervisor/skc-supervisor/home"
	"github.com/skc-supervisor/skc-supervisor/lifecycle"
	"github.com/skc-supervisor/skc-supervisor/metrics"
	"github.com/skc-supervisor/skc-supervisor/scope"
	"github.com/skc-supervisor/skc-supervisor/sdnotify"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Bounds of the daemon's own start and stop.
const (
	shutdownBound   = 10 * time.Second // in-flight creates finish or compensate within it
	connectBound    = 60 * time.Second // the tmux server must answer within it at start
	controlSession  = "skc-control"
	envFault        = "SKC_FAULT"
	readyStatusText = "ready"

	// defaultPool is serve's --pool: the warm pool's standby panes (each a
	// waiting pane helper). maxPool bounds it: standbys are processes that
	// wait, and a burst past the pool is served by new-session anyway.
	defaultPool = 0
	maxPool     = 64
)

// daemon holds what `serve` wired, in start order, so stop can undo it in
// reverse.
type daemon struct {
	paths  home.Paths
	host   fence.Host // this host in the fleet (SKC_HOST / --host-name), its rows' owner host
	pool   int        // --pool: the warm pool's standby panes (0: off)
	log    zerolog.Logger
	notify *sdnotify.Notifier

	store   fence.Fence
	writer  *verdict.Writer
	wireLog io.WriteCloser
	tmux    *tmuxctl.Client
	census  *census.Census
	mgr     *lifecycle.Manager
	srv     *api.Server
	reg     *metrics.Registry

	runCtx    context.Context
	cancelRun context.CancelFunc
	wg        sync.WaitGroup
	fatal     chan error // a component's Run ended on its own
}

// runServe is `serve`: home and permissions → instance lock → fence →
// verdict writer → tmux control client → census synced → recovery → end
// detection → API → ready. SIGTERM/SIGINT stop it gracefully (exit 0; the
// tmux server and its sessions keep running); SIGHUP reopens verdicts.jsonl.
func runServe(cli *CLI, args []string) int {
	// SIGHUP is registered before anything else: its default action would
	// kill a daemon that logrotate signals while it starts. SIGPIPE is caught
	// (not ignored, which the tmux server and the agents would inherit) so a
	// closed stderr cannot kill the daemon.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	var o opts
	logger, forPeople := serveLogger(cli.stderr)
	fail := func(err error) int { return serveRefused(cli, o, logger, err) }
	fs := newFlags("serve", &o, false)
	wireLog := fs.String("wire-log", "", "append every control-mode line to FILE")
	hostName := fs.String("host-name", "", "SKC_HOST")
	fs.StringVar(&o.o.Fence, "fence", "", "SKC_FENCE")
	pool := decimalVar(fs, "pool", defaultPool) // standby panes kept ready for creates (0: off)
	if err := parseServeFlags(fs, args); err != nil {
		return fail(err)
	}
	host, err := cli.host(*hostName)
	if err != nil {
		return fail(err)
	}
	p, err := cli.paths(o)
	if err == nil {
		err = p.PrepareNoting(func(path string, from, to os.FileMode) {
			logger.Warn().Str("path", path).Str("mode", fmt.Sprintf("%04o", from)).Str("now", fmt.Sprintf("%04o", to)).
				Msg("tightened the mode of an existing home path: it holds agents' argv and environment")
		})
	}
	if err != nil {
		return fail(err)
	}
	lock, err := home.Acquire(p.Lock())
	if err != nil {
		return fail(err)
	}
	defer lock.Release()
	d := &daemon{paths: p, host: host, pool: int(*pool), fatal: make(chan error, 4), reg: metrics.NewRegistry(), log: logger}
	d.notify = sdnotify.FromEnv()
	sdnotify.UnsetEnv() // the tmux server and the agents must not inherit it
	if err := d.start(cli.ctx, *wireLog); err != nil {
		d.stop()
		if cli.ctx.Err() != nil {
			d.log.Info().Msg("signal received while starting: stopped")
			return verdict.ExitOK
		}
		return fail(err)
	}
	if forPeople {
		tryIt(cli.stderr, os.Args[0], p, o.o.Home != "" || cli.getenv(home.EnvHome) != "",
			o.o.RuntimeDir != "" || cli.getenv(home.EnvRuntimeDir) != "")
	}
	return d.wait(cli.ctx, hup)
}

func (d *daemon) start(ctx context.Context, wireLog string) error {
	d.runCtx, d.cancelRun = context.WithCancel(context.Background())
	d.log.Info().Str("home", d.paths.Home).Str("runtime_dir", d.paths.RuntimeDir).Msg("starting")
	var err error
	d.log.Info().Str("host", d.host.Name).Str("machine_id", d.host.MachineID).Str("boot_id", d.host.BootID).
		Str("fence", fenceName(d.paths)).Msg("host")
	if err = api.Precheck(d.paths.APISocket()); err != nil {
		return err
	}
	if d.store, err = openDaemonFence(d.runCtx, d.paths, d.host); err != nil {
		return err
	}
	if err := d.takeOverRenamed(); err != nil {
		return err
	}
	if d.writer, err = verdict.NewWriter(d.store, d.paths.Verdicts(), d.log); err != nil {
		return err
	}
	if err := d.startTmux(ctx, wireLog); err != nil {
		return err
	}
	if err := d.startLifecycle(ctx); err != nil {
		return err
	}
	return d.startAPI()
}

// serveRefused reports a refused or failed start: the log line carries the
// error's code and details (details.field, details.path, details.reason — a
// daemon's refusal is read from its log, and its one text line on stderr
// named neither: found outside-in), then the CLI's own line and exit status.
func serveRefused(cli *CLI, o opts, logger zerolog.Logger, err error) int {
	var help helpRequest
	if !errors.As(err, &help) {
		body := api.NewErrorBody(err)
		logger.Error().Str("code", body.Error.Code).Interface("details", body.Error.Details).
			Msg("start refused: " + body.Error.Message)
	}
	return cli.fail(o, err)
}

// takeOverRenamed makes this daemon, on the SQLite fence, the owner of the
// rows an earlier name of this machine left in the home
// (sqlite.Store.TakeOverRenamed): the sessions of that name are in this
// home's tmux server, and this daemon adopts them.
func (d *daemon) takeOverRenamed() error {
	st, ok := d.store.(*sqlite.Store)
	if !ok {
		return nil
	}
	names, err := st.TakeOverRenamed(d.runCtx)
	if err != nil {
		return err
	}
	if len(names) > 0 {
		d.log.Info().Strs("from_hosts", names).Str("host", d.host.Name).
			Msg("took over the fence rows of this machine's earlier host names")
	}
	return nil
}

// startTmux starts (or joins) the supervised server and waits for the
// census's first sync.
func (d *daemon) startTmux(ctx context.Context, wireLog string) error {
	// tmux creates its socket with the umask it sets itself; the contract
	// says 0600 (the directory is 0700 anyway). The client applies it on
	// every server life, also to a server a reconnect started.
	cfg := tmuxctl.Config{Tmux: d.paths.Tmux, Socket: d.paths.TmuxSocket(), ConfigFile: d.paths.TmuxConfig,
		ControlSession: controlSession, Log: &d.log, SocketMode: 0o600}
	if wireLog != "" {
		f, err := openWireLog(wireLog)
		if err != nil {
			return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "wire_log"},
				"cannot open the wire log %s: %w", wireLog, err)
		}
		d.wireLog, cfg.WireLog = f, f
	}
	if err := checkTmuxFiles(d.paths); err != nil {
		return err
	}
	cfg.StartServer = d.scopedStarter()
	d.tmux = tmuxctl.NewClient(cfg)
	d.census = census.New(d.tmux, &d.log)
	d.goRun("tmux", d.tmux.Run)
	d.goRun("census", d.census.Run)
	cctx, cancel := context.WithTimeout(ctx, connectBound)
	defer cancel()
	if err := d.census.WaitSynced(cctx); err != nil {
		if ctx.Err() != nil {
			return verdict.Errorf(verdict.CodeInternal, nil, "stopped before the census synced")
		}
		return verdict.Errorf(verdict.CodeTmuxUnavailable, map[string]any{"socket": cfg.Socket, "tmux": cfg.Tmux},
			"the supervised tmux server (%s on %s) did not answer within %v: %w", cfg.Tmux, cfg.Socket, connectBound, err)
	}
	registerDaemonMetrics(d.reg, d.census, d.tmux)
	return nil
}

// scopedStarter returns the tmuxctl.Config.StartServer hook when we run as a
// systemd service: the client calls it whenever no server answers (the first
// start and every server life a reconnect needs), so each server lands in its
// own transient scope and stopping the unit never kills the sessions
// (package scope). Outside systemd it returns nil and the control client's
// new-session -A starts the server. A scope failure falls back to the plain
// command inside scope.Start; either way the dial follows, so the hook only
// logs.
func (d *daemon) scopedStarter() func(context.Context) error {
	runner, ok := scope.Detect(scope.HostEnv())
	if !ok {
		return nil
	}
	b := scope.ControlBootstrap(d.paths.Tmux, d.paths.TmuxSocket(), d.paths.TmuxConfig, controlSession)
	return func(ctx context.Context) error {
		scoped, err := scope.Start(ctx, runner, b, tmuxctl.ServerEnviron())
		d.log.Info().Bool("scoped", scoped).AnErr("scope_error", err).Msg("started the tmux server")
		return nil
	}
}

func (d *daemon) startLifecycle(ctx context.Context) error {
	exe, err := os.Executable()
	if err != nil {
		return verdict.Errorf(verdict.CodeInternal, nil, "cannot find our own binary for the pane helper: %w", err)
	}
	d.mgr, err = lifecycle.New(lifecycle.Config{Home: d.paths.Home, Tmux: d.tmux, Census: d.census,
		Fence: d.store, Verdicts: d.writer, HelperPath: exe, Log: &d.log, Metrics: d.reg,
		Fault: os.Getenv(envFault), PoolSize: d.pool})
	if err != nil {
		return err
	}
	if err := d.mgr.Recover(ctx); err != nil {
		return err
	}
	d.goRun("lifecycle", d.mgr.Run)
	return nil
}

func (d *daemon) startAPI() error {
	ln, err := api.Listen(d.paths.APISocket())
	if err != nil {
		return err
	}
	d.srv, err = api.New(api.Config{
		Service:  &backend.Service{Manager: d.mgr, Store: d.store, Verdicts: d.writer},
		AllowUID: os.Geteuid(),
		Info: api.Info{Version: versionString(), PID: os.Getpid(), StartedAt: time.Now().UTC(), Home: d.paths.Home, Tmux: tmuxPath(d.paths.Tmux),
			TmuxConfig: d.paths.TmuxConfig},
		Metrics: d.reg,
		Log:     &d.log,
	})
	if err != nil {
		ln.Close()
		return err
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := d.srv.Serve(ln); err != nil {
			d.fatal <- fmt.Errorf("api: %w", err)
		}
	}()
	d.goRun("api socket", d.keepAPISocket)
	return nil
}

// goRun runs a component until the run context ends; returning earlier is
// fatal for the daemon.
func (d *daemon) goRun(name string, run func(context.Context) error) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		err := run(d.runCtx)
		if d.runCtx.Err() == nil {
			d.fatal <- fmt.Errorf("%s stopped: %v", name, err)
		}
	}()
}

// wait serves until a signal or a fatal component error, then stops.
func (d *daemon) wait(ctx context.Context, hup <-chan os.Signal) int {
	d.notify.Ready(readyStatusText)
	d.log.Info().Str("api", d.paths.APISocket()).Str("tmux", d.paths.TmuxSocket()).Msg("ready")
	for {
		select {
		case <-hup:
			if err := d.writer.Reopen(); err != nil {
				d.log.Error().Err(err).Msg("reopening the verdict log failed")
			} else {
				d.log.Info().Msg("verdict log reopened")
			}
		case err := <-d.fatal:
			d.log.Error().Err(err).Msg("a component stopped; shutting down")
			d.stop()
			return verdict.ExitFailed
		case <-ctx.Done():
			d.log.Info().Msg("signal received: stopping (sessions and the tmux server keep running)")
			d.stop()
			return verdict.ExitOK
		}
	}
}

// stop undoes start in reverse: stop accepting, let in-flight creates finish
// or compensate within shutdownBound, then end the control client cleanly
// and close the verdict writer and the fence. Sessions are left running.
func (d *daemon) stop() {
	d.notify.Stopping("stopping")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownBound)
	defer cancel()
	var apiDone chan error
	if d.srv != nil {
		apiDone = make(chan error, 1)
		go func() { apiDone <- d.srv.Shutdown(sctx) }()
	}
	if d.mgr != nil {
		if err := d.mgr.Shutdown(sctx); err != nil {
			d.log.Warn().Err(err).Msg("in-flight creates did not settle within the bound")
		}
	}
	if apiDone != nil {
		if err := <-apiDone; err != nil {
			d.log.Warn().Err(err).Msg("API shutdown")
		}
	}
	if d.mgr != nil {
		d.mgr.CloseFollowers(sctx) // output followers' tmux clients, by stdin EOF
	}
	if d.cancelRun != nil {
		d.cancelRun()
	}
	d.wg.Wait()
	d.closeStores()
	d.log.Info().Msg("stopped")
}

func (d *daemon) closeStores() {
	if d.writer != nil {
		if err := d.writer.Close(); err != nil {
			d.log.Warn().Err(err).Msg("closing the verdict writer")
		}
	}
	if d.store != nil {
		if err := d.store.Close(); err != nil {
			d.log.Warn().Err(err).Msg("closing the fence")
		}
	}
	if d.wireLog != nil {
		d.wireLog.Close()
	}
}

// tmuxPath is the absolute path of the tmux binary bin names ("" when it
// cannot be found).
func tmuxPath(bin string) string {
	path, err := exec.LookPath(bin)
	if err != nil {
		return ""
	}
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return ""
}

// checkTmuxFiles refuses a start that could never reach a tmux server: a
// tmux binary that is not there (a typo in SKC_TMUX would otherwise leave
// serve retrying its connect forever, never ready), and a --tmux-config that
// does not exist (tmux -f starts without it, silently: the server would run
// on settings the operator did not ask for).
func checkTmuxFiles(p home.Paths) error {
	if _, err := exec.LookPath(p.Tmux); err != nil {
		return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "tmux", "path": p.Tmux},
			"the tmux binary %q cannot be run (%v): install tmux or fix SKC_TMUX / --tmux", p.Tmux, err)
	}
	if c := p.TmuxConfig; c != "" {
		if fi, err := os.Stat(c); err != nil || fi.IsDir() {
			return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "tmux_config", "path": c},
				"the tmux config %s cannot be used (%v)", c, cmp.Or(err, errors.New("it is a directory")))
		}
	}
	return nil
}

// openWireLog opens the wire log for appending: it holds session names,
// labels and the output of followed panes, so it is the owner's alone (0600,
// also when it existed with a looser mode), never reached through a symlink,
// and a regular file.
func openWireLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	switch {
	case err != nil:
	case !fi.Mode().IsRegular():
		err = errors.New("not a regular file")
	case fi.Mode().Perm() != 0o600:
		err = f.Chmod(0o600)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// parseServeFlags parses serve's flags and refuses what they hold out of
// range: --pool, and a value written empty (explicitEmpty).
func parseServeFlags(fs *flag.FlagSet, args []string) error {
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if p, _ := strconv.Atoi(fs.Lookup("pool").Value.String()); p < 0 || p > maxPool {
		return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "pool"},
			"serve: --pool %d: want 0 (off) to %d", p, maxPool)
	}
	return explicitEmpty(fs, "host-name", "fence")
}
