// Package census is the live in-memory index of the supervised tmux server:
// every session (except the hidden control session) with its tmux id, name,
// creation time, attached-client count, `@skc-*` tags and pane state.
//
// It answers "what exists?" from memory in O(1), without forking or blocking
// on tmux, and answers "is this child authoritative?" (Inspect) only after a
// fresh read of live tmux. It is fed by one tmuxctl.Client: a full sync at
// every connect, coalesced re-lists on notifications and on a server-side
// `refresh-client -B` subscription (the only way to see option changes made by
// hand, pane output, and pane deaths under remain-on-exit — those also at once
// through a pane-died hook, panehook.go), reads by id of the sessions either
// shows changed, of a session whose pane process its caller saw exit
// (PaneExited) and of one its caller is removing (Removing; exited.go), and a
// slow periodic reconcile.
//
// The census is keyed by server life: a new tmux server is a new census.
// From a disconnect until the next full sync it is unsynced, and every
// authority answer is Unknown (fail closed).
package census

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// The tags the supervisor puts on a session, as session user options. Their
// values are safe tokens (hex digests, decimal numbers), so every tmux output
// line stays one record.
const (
	TagIdentity    = "@skc-identity"    // identity digest, 64 hex
	TagGeneration  = "@skc-generation"  // decimal generation
	TagReservation = "@skc-reservation" // reservation id, 32 hex
	TagState       = "@skc-state"       // digest of the state file, 64 hex
	TagControl     = "@skc-control"     // "1" on the hidden control session
	// TagSince is when the session became its identity's, in Unix
	// nanoseconds: a warm pool's standby was made long before anyone asked
	// for it, and its session_created says so, and a restart in the same
	// session keeps the date.
	TagSince = "@skc-since"
)

// Session is one tmux session as the census last saw it.
type Session struct {
	ID       string // "$N", unique within a server life
	Name     string // as tmux reports it (already sanitised by tmux)
	Created  time.Time
	Attached int               // attached clients
	Tags     map[string]string // "@skc-identity" → value; only tags set on the session itself

	PaneID         string // the active pane of the current window, "%N"
	PanePID        int
	PaneDead       bool
	PaneDeadStatus *int   // exit code once tmux has reaped the process (see below)
	PaneDeadSignal string // signal name or number, "" when none

	Managed bool // the session carries a non-empty @skc-identity

	// Activity is when the session's current window last had output from
	// its pane (tmux's window_activity, whole seconds), zero when it has
	// had none since the session was created. tmux starts the value at the
	// window's creation, so output within the session's first second is
	// told apart from none by wroteFlag (the pane's cursor or history).
	// Kept live by the census subscription (within about a second), not by
	// a read per session.
	Activity time.Time

	// About PaneDeadStatus: tmux sets pane_dead one tick before the status,
	// and tmux 3.3a linked with utempter can miss the SIGCHLD of a pane that
	// exits while it runs the utempter helper; the status then stays empty
	// (the pane process a zombie) until another child of the server exits,
	// which the census brings about (reapPoke). A dead pane with a nil status
	// is a normal state, for a second or so.
}

// Identity returns the session's @skc-identity tag ("" when unmanaged).
func (s Session) Identity() string { return s.Tags[TagIdentity] }

// clone returns a deep copy, so that callers can never alias census state.
func (s Session) clone() Session {
	s.Tags = maps.Clone(s.Tags)
	if s.PaneDeadStatus != nil {
		v := *s.PaneDeadStatus
		s.PaneDeadStatus = &v
	}
	return s
}

// Snapshot is a consistent copy of the census.
type Snapshot struct {
	Synced   bool
	Info     tmuxctl.ServerInfo
	Seq      uint64    // the Seq of the last change included
	Sessions []Session // sorted by tmux id number
}

// Census is the live index. Its zero value is not usable; call New.
type Census struct {
	cl  tmuxClient
	log zerolog.Logger
	cfg config
	// now is the clock of Run's coalescing; tests move it to play a daemon
	// that was stopped for a while (SIGSTOP, a debugger, a loaded host).
	now func() time.Time

	mu        sync.RWMutex
	info      tmuxctl.ServerInfo
	online    bool
	synced    bool
	epoch     uint64 // bumped on every Connected/Disconnected; a sync applies only in its epoch
	lifeEnded bool   // a server life ended since the last sync: the next one emits Resync (c.mu)
	sessions  map[string]*entry
	byName    map[string]string              // name → id
	byIdent   map[string]map[string]struct{} // identity digest → ids
	gone      goneNames                      // last names of sessions removed (gone.go)
	seq       uint64
	subs      map[*Subscription]struct{}
	syncedCh  chan struct{} // closed while synced; replaced when the census goes unsynced

	syncMu syncLock // serialises lists and admissions
	// listed is the life and tmux command number of the last list applied
	// (c.mu): an admission of a session created before it, which that list
	// did not show, is of a session gone already (admit.go).
	listedLife tmuxctl.ServerLife
	listedNum  uint64
	kick       chan struct{} // cap 1: "a re-list is wanted"

	subSegs map[string]struct{} // segments of the last subscription value (Run only)
	subSeen map[string]string   // id → its last segment, for ids in that value or in the census (Run only)

	managed, unmanaged int // sessions in the indexes, by kind (Stats)

	poking    atomic.Bool // a reap poke is in flight (panehook.go)
	pokeAgain atomic.Bool // … and another is asked for

	lookMu   sync.Mutex
	looks    map[string]struct{}  // sessions to read by id, told by PaneExited (exited.go)
	lookKick chan struct{}        // cap 1: "looks is not empty"
	removing map[string]time.Time // sessions their caller is killing (Removing), until when (lookMu)
	absorb   int                  // end notifications still expected from those kills (lookMu)
	absorbTo time.Time            // … until then
	bg       sync.WaitGroup       // goroutines Run started that outlive one event (pokes)

	relists    atomic.Int64 // full re-lists
	idLists    atomic.Int64 // id-only lists (relistIDs)
	confirms   atomic.Int64
	resyncs    atomic.Int64 // Resync marks queued to slow subscribers
	subLines   atomic.Int64 // census subscription lines received
	polls      atomic.Int64 // polls applied in the subscription's place (poll.go)
	lastSync   atomic.Int64 // nanoseconds the last successful full sync took
	lastSyncAt atomic.Int64 // when it ended (Unix nanoseconds)
}

// entry is a session plus what the sync needs to skip work next time.
type entry struct {
	s       Session
	line    string  // the raw list line it was built from
	exact   tagVals // the session's own tag values, read with show-options
	control bool    // the hidden control session: kept for shadow checks, never exposed
	// admitted is tmux's command number of the new-session that created an
	// entry put in by AdmitCreated, until a list shows it (0 otherwise): a
	// list tmux ran before that number cannot know the session, so its
	// absence there does not remove it (admit.go).
	admitted uint64
	// tagged is tmux's command number of the last tag command of the
	// creator that admitted the entry (AdmitCreated, 0 otherwise): a read
	// tmux ran before it may show the tags half set, so its tags and name
	// do not replace the creator's (keepCreatorsTags).
	tagged uint64
	// readAt is tmux's command number of the read that built the entry:
	// its show-options, or the list it came from (0: not known).
	readAt uint64
}

// tmuxClient is what the census uses of *tmuxctl.Client; tests feed a fake.
type tmuxClient interface {
	Events() <-chan tmuxctl.Event
	CommandIn(ctx context.Context, life tmuxctl.ServerLife, args ...string) (tmuxctl.Reply, error)
}

// config holds the timings; tests shorten them.
type config struct {
	quiet      time.Duration // a burst is over after this long without a trigger
	maxDelay   time.Duration // … or this long after its first trigger
	reconcile  time.Duration // periodic full re-list
	retry      time.Duration // after a failed sync (doubling per consecutive failure)
	retryMax   time.Duration // … up to this
	confirmPar int           // concurrent exact tag reads
	// exitOnly: no subscription and no pane-died hook (Options.DeathsByExitOnly).
	exitOnly bool
	// pollAbove, pollBelow: above this many sessions the census polls
	// instead of subscribing, below that it subscribes again (poll.go).
	pollAbove, pollBelow int
}

func defaultConfig() config {
	return config{
		quiet:      25 * time.Millisecond,
		maxDelay:   250 * time.Millisecond,
		reconcile:  30 * time.Second,
		retry:      250 * time.Millisecond,
		retryMax:   5 * time.Second,
		confirmPar: 32,
		pollAbove:  pollAbove,
		pollBelow:  pollBelow,
	}
}

// New returns a census fed by client. log may be nil. Call Run to start it.
func New(client *tmuxctl.Client, log *zerolog.Logger) *Census {
	return newCensus(client, log, defaultConfig())
}

// Options change a census from its defaults (the zero value changes nothing).
type Options struct {
	// Reconcile is the period of the full re-list (default 30 s; longer at
	// scale, reconcileDue).
	Reconcile time.Duration
	// DeathsByExitOnly turns off the census's own sight of pane deaths — the
	// refresh-client -B subscription (and with it activity times and hand-set
	// tags between lists) and the pane-died hook — so that a pane's death is
	// seen only when PaneExited tells it (or a list shows it). For tests
	// that must show that path alone ends a generation.
	DeathsByExitOnly bool
}

// NewWithOptions is New with opts applied.
func NewWithOptions(client *tmuxctl.Client, log *zerolog.Logger, opts Options) *Census {
	cfg := defaultConfig()
	if opts.Reconcile > 0 {
		cfg.reconcile = opts.Reconcile
	}
	cfg.exitOnly = opts.DeathsByExitOnly
	return newCensus(client, log, cfg)
}

func newCensus(cl tmuxClient, log *zerolog.Logger, cfg config) *Census {
	c := &Census{
		cl:       cl,
		log:      zerolog.Nop(),
		cfg:      cfg,
		now:      time.Now,
		sessions: map[string]*entry{},
		byName:   map[string]string{},
		byIdent:  map[string]map[string]struct{}{},
		subs:     map[*Subscription]struct{}{},
		syncedCh: make(chan struct{}),
		kick:     make(chan struct{}, 1),
		looks:    map[string]struct{}{},
		removing: map[string]time.Time{},
		lookKick: make(chan struct{}, 1),
		syncMu:   newSyncLock(),
	}
	if log != nil {
		c.log = log.With().Str("component", "census").Logger()
	}
	return c
}

// Synced reports whether the census reflects the current server life: a full
// sync completed since the last connect and the connection has not dropped.
func (c *Census) Synced() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.synced
}

// WaitSynced blocks until the census is synced or ctx is done.
func (c *Census) WaitSynced(ctx context.Context) error {
	for {
		c.mu.RLock()
		ch, ok := c.syncedCh, c.synced
		c.mu.RUnlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Info returns the server the census is keyed by; false before the first connect.
func (c *Census) Info() (tmuxctl.ServerInfo, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.info, c.info.PID != 0
}

// Relists returns how many full re-lists the census has run (for tests and
// metrics: coalescing keeps it far below the number of notifications).
func (c *Census) Relists() int64 { return c.relists.Load() }

// Confirms returns how many exact per-session tag reads (show-options) ran.
func (c *Census) Confirms() int64 { return c.confirms.Load() }

// ByID returns the session with tmux id id ("$N").
func (c *Census) ByID(id string) (Session, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.sessions[id]
	if !ok || e.control {
		return Session{}, false
	}
	return e.s.clone(), true
}

// ByName returns the session named exactly name.
func (c *Census) ByName(name string) (Session, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	id, ok := c.byName[name]
	if !ok {
		return Session{}, false
	}
	return c.sessions[id].s.clone(), true
}

// ByIdentity returns the sessions carrying identity digest digest (normally
// zero or one; more is a contradiction the caller must treat as such).
func (c *Census) ByIdentity(digest string) []Session {
	c.mu.RLock()
	defer c.mu.RUnlock()
	ids := c.byIdent[digest]
	if len(ids) == 0 {
		return nil
	}
	out := make([]Session, 0, len(ids))
	for id := range ids {
		out = append(out, c.sessions[id].s.clone())
	}
	sortSessions(out)
	return out
}

// Snapshot returns a copy of every session (the control session excluded).
func (c *Census) Snapshot() Snapshot {
	c.mu.RLock()
	defer c.mu.RUnlock()
	snap := Snapshot{Synced: c.synced, Info: c.info, Seq: c.seq,
		Sessions: make([]Session, 0, len(c.sessions))}
	for _, e := range c.sessions {
		if !e.control {
			snap.Sessions = append(snap.Sessions, e.s.clone())
		}
	}
	sortSessions(snap.Sessions)
	return snap
}
