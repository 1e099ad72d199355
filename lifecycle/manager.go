// Package lifecycle runs the create saga, kills, startup recovery, session-end
// detection and the pane helper (DESIGN.md §6). The order of the saga's steps is the
// order of model/saga.pml, which spin checked exhaustively for racing,
// crashing creators (make model): change one only together with the other.
//
// Decisions worth knowing:
//   - The pane command is `<HelperPath> helper --home H --reservation R --generation G`:
//     several argv words, so tmux execs it with no shell, and nothing user-controlled
//     passes through tmux (argv, env, cwd and label stay in the fence).
//   - The helper reads its spec from the fence's specs table (fence.HelperSpec),
//     which outlives the row's release until the generation ends, so the saga does
//     not wait for the helper: a helper that cannot start shows as the session's
//     end (owner_lost with what tmux kept of the pane's process), not as a failed
//     create. Once its gate opens the helper execs the agent (agent.go): no
//     process of ours stays in a session, and tmux keeps the agent's exit.
//   - The helper learns of publication by polling the fence (every 20 ms for 3 s,
//     then every 200 ms) rather than a tmux wait-for channel: the fence is the only
//     evidence it may trust anyway, and a daemon that dies after publishing cannot
//     leave it waiting.
//   - A session end is matched to its published generation by tmux id and server
//     life, never by the removed session's tags (the census may not have seen them
//     for an agent that exits at once). Every managed window has remain-on-exit
//     on, so an agent's own exit is a dead pane (reason agent_exited), never an
//     existing session and never a vanished one.
//   - A generation ends only when its processes are proven gone (stop.go, with
//     proctree): a session that vanished was only hung up, so its generation is
//     stopping — grace period, SIGKILL, proof — and its identity taken until
//     then. The stop is durable in the fence; a restarted daemon continues it.
//   - Ended verdicts are compare-and-set on the generation (fence.MarkEnded), so end
//     detection, creates, recovery and kills racing on one end write one verdict.
//   - A restart (restart.go, restart_start.go) is the next generation through the
//     same saga, decided at the end in the ended verdict's transaction
//     (fence.MarkEndedNext, with the next start's due time) and started by the
//     identity's restarter after the proof, in the kept session (respawn-pane -k
//     on its dead pane) or, after a server's death, in a new one.
package lifecycle

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/metrics"
	"github.com/skc-supervisor/skc-supervisor/proctree"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Config wires a Manager to the daemon's other components.
type Config struct {
	Home       string          // SKC_HOME (fence.sqlite lives there; passed to the pane helper)
	Tmux       *tmuxctl.Client // the supervised server's control connection
	Census     *census.Census
	Fence      fence.Fence
	Verdicts   *verdict.Writer
	HelperPath string // absolute path of this binary (os.Executable)
	Log        *zerolog.Logger
	Metrics    *metrics.Registry // may be nil
	Fault      string            // SKC_FAULT, "" in production
	// NoCgroup: hold generations by the pane's session only, even where a
	// cgroup v2 per generation could be made (tests of that fallback).
	NoCgroup bool
	// PoolSize is how many standby panes the warm pool keeps spawned for
	// creates to claim (pool.go); 0 turns the pool off, and then nothing of
	// it runs.
	PoolSize int
}

// tmuxAPI is the part of *tmuxctl.Client the Manager uses: small, so the saga's
// failure paths can be driven by a wrapper in tests.
type tmuxAPI interface {
	Command(ctx context.Context, args ...string) (tmuxctl.Reply, error)
	CommandIn(ctx context.Context, life tmuxctl.ServerLife, args ...string) (tmuxctl.Reply, error)
	PipelineIn(ctx context.Context, life tmuxctl.ServerLife, cmds [][]string) ([]tmuxctl.Reply, []error)
	Info() (tmuxctl.ServerInfo, bool)
}

// Timeouts of the Manager's own work. Compensation runs on a context detached from
// the caller's with its own deadline, so a caller who hangs up cannot abort a
// rollback half way.
const (
	compensateTimeout = 15 * time.Second
	// fenceUndoTimeout bounds each release or abandon write, on a context of
	// its own (fenceCtx), never what is left of the compensation's.
	fenceUndoTimeout = 5 * time.Second
	helperReadyWait  = 10 * time.Second // a standby's warm-up reads; a helper says it waits for its fence after it
	killConfirmWait  = 10 * time.Second
	pollInterval     = 50 * time.Millisecond

	// maxInflightCreates bounds the creates in flight at once (admitted, not yet
	// answered). Beyond it a create is refused busy (503, exit 75) at once,
	// before it touches the fence or tmux. Every saga sends O(sessions) commands
	// to a single-threaded tmux, and a command that misses its deadline still
	// runs there later: queueing more creates than tmux can answer only grows
	// the backlog (the scale run collapsed at ~3,300 sessions that way).
	maxInflightCreates = 32

	// tmuxCommandTimeout bounds each tmux command of the saga and of
	// compensation, under their overall deadlines: tmuxctl applies its own
	// per-command default only to a context without a deadline, so without
	// this a stuck tmux held a create for the whole sagaTimeout.
	tmuxCommandTimeout = 10 * time.Second
)

// Manager owns the create saga and session ends for one supervised tmux server.
type Manager struct {
	cfg      Config
	tmux     tmuxAPI
	census   *census.Census
	fence    fence.Fence
	host     fence.Host // this daemon's host in the fleet (the fence's): View.Host, remote checks
	verdicts *verdict.Writer
	log      zerolog.Logger
	fault    fault
	met      *lcMetrics

	mu           sync.Mutex
	closing      bool
	inflight     map[string]*attempt       // by reservation id: creates between Reserve and their verdict
	killing      map[killKey]killMark      // by tmux id: sessions we are removing ourselves (killmarks.go)
	killSwept    time.Time                 // when killing was last swept of marks outlived
	stops        map[string]*stopRun       // by stopKey: generations stopping (stop.go)
	unprovenSaid map[string]error          // by stopKey: an unresolved verdict was written (once per generation), and its refusal
	restarters   map[string]chan struct{}  // by identity digest: the restarter running (restart.go), its wake
	startFails   map[string]startFailure   // by identity digest: its restarter's last start that did not publish
	unfiled      map[unfiledKey]unfiledEnd // ends assembled whose MarkEnded the fence refused (unfiled.go)
	retry        endRetry                  // ends missed while the fence or tmux was unavailable (endretry.go)
	killAsked    map[string]int            // by stopKey: kills waiting for a stop that is not theirs (kill.go)
	creates      sync.WaitGroup
	slots        chan struct{} // admission: one token per create in flight (maxInflightCreates)

	stopCtx    context.Context // the stops' life: ends at Shutdown
	stopCancel context.CancelFunc
	stopWG     sync.WaitGroup
	cgroupBase string    // where each generation gets its cgroup; "" when none can be made
	pool       *pool     // the warm pool; nil when off
	exits      exitState // pane processes watched for their exit (m.mu; exitwatch.go)
	// detecting: end detection (Run) is running; only then does an exit
	// watch start a stop itself (endAtExit).
	detecting atomic.Bool

	talk talkState // inputs, output followers (talk*.go)

	syncWaits   atomic.Int64  // creates that found the census unsynced and waited for it
	cmdTimeout  time.Duration // tmuxCommandTimeout; shorter in tests
	compTimeout time.Duration // compensateTimeout; shorter in tests
}

// killReason records why we are removing a session, so the end detection loop
// attributes its disappearance to us (exit kind cleanup) instead of to the agent.
type killReason struct {
	reason string // verdict.ReasonKilledByRequest or verdict.ReasonOrphanCleanup
	byKill bool   // a Kill call writes the ended verdict itself
}

// ErrBusy refuses a create while maxInflightCreates creates are in flight.
var ErrBusy = verdict.Errorf(verdict.CodeBusy, map[string]any{"max_inflight_creates": maxInflightCreates},
	"too many creates in flight; retry later")

// ErrShuttingDown refuses creates that arrive after Shutdown began.
var ErrShuttingDown = verdict.Errorf(verdict.CodeBusy, nil, "supervisor is shutting down")

// New checks cfg and returns a Manager. It parses SKC_FAULT once, here, so the
// saga's fault points cost one string comparison when it is unset.
func New(cfg Config) (*Manager, error) {
	if cfg.Tmux == nil || cfg.Census == nil || cfg.Fence == nil || cfg.Verdicts == nil {
		return nil, errors.New("lifecycle: Config needs Tmux, Census, Fence and Verdicts")
	}
	if cfg.HelperPath == "" || cfg.Home == "" {
		return nil, errors.New("lifecycle: Config needs HelperPath and Home")
	}
	f, err := parseFault(cfg.Fault)
	if err != nil {
		return nil, err
	}
	log := zerolog.Nop()
	if cfg.Log != nil {
		log = cfg.Log.With().Str("component", "lifecycle").Logger()
	}
	m := &Manager{
		cfg: cfg, tmux: cfg.Tmux, census: cfg.Census, fence: cfg.Fence, host: cfg.Fence.Host(),
		verdicts: cfg.Verdicts, log: log, fault: f, met: newMetrics(cfg.Metrics),
		inflight: make(map[string]*attempt), killing: make(map[killKey]killMark),
		stops: make(map[string]*stopRun), unprovenSaid: make(map[string]error), killAsked: make(map[string]int),
		restarters: make(map[string]chan struct{}), startFails: make(map[string]startFailure),
		slots:      make(chan struct{}, maxInflightCreates),
		cmdTimeout: tmuxCommandTimeout, compTimeout: compensateTimeout,
	}
	m.stopCtx, m.stopCancel = context.WithCancel(context.Background())
	if cfg.PoolSize < 0 {
		return nil, errors.New("lifecycle: PoolSize must not be negative")
	}
	m.pool = newPool(m, cfg.PoolSize)
	if !cfg.NoCgroup {
		base, err := proctree.DetectCgroupBase(cfg.Home)
		if err != nil {
			log.Info().Err(err).Msg("no cgroup per generation; generations are held by their pane's session")
		} else {
			// Named for whoever removes a home for good (scripts/demo.sh): the
			// base outlives the daemon, as the sessions it holds do.
			log.Info().Str("cgroup_base", base).Msg("a cgroup per generation")
		}
		m.cgroupBase = base
	}
	m.registerTalkMetrics(cfg.Metrics)
	return m, nil
}

// begin admits one create unless Shutdown has begun (ErrShuttingDown) or
// maxInflightCreates are in flight (ErrBusy). An admitted create calls end.
func (m *Manager) begin() error {
	select {
	case m.slots <- struct{}{}:
	default:
		return ErrBusy
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		<-m.slots
		return ErrShuttingDown
	}
	m.creates.Add(1)
	return nil
}

func (m *Manager) end() {
	m.creates.Done()
	<-m.slots
}

func (m *Manager) track(a *attempt) {
	m.mu.Lock()
	m.inflight[a.resID] = a
	m.mu.Unlock()
}

func (m *Manager) untrack(a *attempt) {
	m.mu.Lock()
	delete(m.inflight, a.resID)
	m.mu.Unlock()
}

// Shutdown refuses new creates, waits for in-flight ones until ctx is done, then
// abandons whatever is still in flight: the rows stay as evidence for the next
// start's recovery, which decides from live tmux.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.closing = true
	m.mu.Unlock()
	// Stops in flight end with the daemon: their progress is in the fence,
	// and the next start continues them (Recover).
	defer func() {
		// Cancelled under m.mu, where every stopWG.Add checks stopCtx
		// first: an Add then either comes before the cancel (and before
		// the Wait) or sees it and adds nothing — never an Add beside a
		// Wait at zero (an abandon during shutdown starts a retry).
		m.mu.Lock()
		m.stopCancel()
		m.mu.Unlock()
		m.stopWG.Wait()
		m.closeExitWatch()
		// Empty generation cgroups (an undone attempt whose helper took
		// longer than its reap's wait to go: found outside-in after a clean
		// stop) go now, not at the next start; those of live generations
		// stay, held or not yet entered by a helper that is on its way.
		m.sweepIdleCgroups()
		proctree.RemoveBase(m.cgroupBase)
	}()
	pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	m.pool.close(pctx)
	pcancel()
	done := make(chan struct{})
	go func() { m.creates.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	m.mu.Lock()
	ids := make([]*attempt, 0, len(m.inflight))
	for _, a := range m.inflight {
		ids = append(ids, a)
	}
	m.mu.Unlock()
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), compensateTimeout)
	defer cancel()
	var errs []error
	for _, a := range ids {
		// Only the immutable resID and stop: the rest of the attempt belongs to
		// its create's goroutine, which may still be advancing or compensating.
		a.stop()
		if err := m.fence.Abandon(actx, a.resID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, ctx.Err())...)
}

// commandIn runs one tmux command in life with its own deadline (cmdTimeout), never
// beyond ctx's.
func (m *Manager) commandIn(ctx context.Context, life tmuxctl.ServerLife, args ...string) (tmuxctl.Reply, error) {
	cctx, cancel := context.WithTimeout(ctx, m.cmdTimeout)
	defer cancel()
	return m.tmux.CommandIn(cctx, life, args...)
}

// pipelineIn sends cmds in order in one round trip (tmuxctl.Client.PipelineIn),
// all within one command timeout.
func (m *Manager) pipelineIn(ctx context.Context, life tmuxctl.ServerLife, cmds [][]string) ([]tmuxctl.Reply, []error) {
	cctx, cancel := context.WithTimeout(ctx, m.cmdTimeout)
	defer cancel()
	return m.tmux.PipelineIn(cctx, life, cmds)
}

// timedOut reports a tmux command that got no answer before its deadline: tmux
// is stuck (or gone), and whether the command took effect is unknown.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded)
}

// serverLife returns the life of the server the control connection reaches now.
func (m *Manager) serverLife() (tmuxctl.ServerLife, bool) {
	info, ok := m.tmux.Info()
	if !ok {
		return tmuxctl.ServerLife{}, false
	}
	return info.ServerLife, true
}

// unavailable is the refusal for a census that cannot answer: fail closed (503)
// rather than guess.
// fenceError is the answer to a fence read that failed: fence_unavailable,
// except a request the fence's own input rules refused (invalid_request, say
// a state_dir through a symlink that does not resolve): the database is fine,
// and the caller's fix is its input.
func fenceError(err error) *verdict.Error {
	if verdict.CodeOf(err) == verdict.CodeInvalidRequest {
		return verdict.AsError(err)
	}
	return verdict.Errorf(verdict.CodeFenceUnavailable, nil, "%w", err)
}

func unavailable(err error) *verdict.Error {
	return verdict.Errorf(verdict.CodeTmuxUnavailable, nil, "tmux census not available: %w", err)
}

func identityRef(id fence.Identity) *verdict.IdentityRef {
	return &verdict.IdentityRef{StateDir: id.StateDir, SessionID: id.SessionID}
}
