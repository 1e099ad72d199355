package fence

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// Identity is the key of an agent session: a canonical absolute state
// directory and a session id. Two spellings of one directory (a symlinked
// alias) are the same identity once canonicalised (see CanonicalIdentity).
type Identity struct {
	StateDir  string `json:"state_dir"`
	SessionID string `json:"session_id"`
}

// Digest returns the lowercase hex sha256 of state_dir + "\x00" + session_id:
// the safe token tmux tags carry instead of raw paths (DESIGN §4). Call it on
// a canonical identity, or two aliases digest differently.
func (id Identity) Digest() string {
	h := sha256.Sum256([]byte(id.StateDir + "\x00" + id.SessionID))
	return hex.EncodeToString(h[:])
}

// Phase is the create saga's progress, recorded in the fence before the next
// step starts (DESIGN §6). Its values are stored in the database: never renumber.
type Phase int

// The phases, in order. A phase only moves forward.
const (
	// PhaseReserved: the row is claimed; owner pid and incarnation recorded.
	PhaseReserved Phase = 1
	// PhaseHelperInvoked: recorded before new-session is sent, with the attempt's name.
	PhaseHelperInvoked Phase = 2
	// PhaseSpawned: new-session answered; tmux id, pane pid and server life recorded.
	PhaseSpawned Phase = 3
	// PhaseTagged: the @skc-* tags are set on the session.
	PhaseTagged Phase = 4
	// PhasePublished: the identity's generation is published (then the row is released).
	PhasePublished Phase = 5
)

var phaseNames = map[Phase]string{
	PhaseReserved:      "reserved",
	PhaseHelperInvoked: "helper_invoked",
	PhaseSpawned:       "spawned",
	PhaseTagged:        "tagged",
	PhasePublished:     "published",
}

// String returns the phase's wire name (e.g. "helper_invoked").
func (p Phase) String() string {
	if n, ok := phaseNames[p]; ok {
		return n
	}
	return fmt.Sprintf("phase(%d)", int(p))
}

// Valid reports whether p is one of the five phases.
func (p Phase) Valid() bool { _, ok := phaseNames[p]; return ok }

// ParsePhase returns the phase named name.
func ParsePhase(name string) (Phase, bool) {
	for p, n := range phaseNames {
		if n == name {
			return p, true
		}
	}
	return 0, false
}

// MarshalJSON encodes the phase as its name: the number is a storage detail.
func (p Phase) MarshalJSON() ([]byte, error) {
	if !p.Valid() {
		return nil, fmt.Errorf("fence: invalid phase %d", int(p))
	}
	return json.Marshal(p.String())
}

// UnmarshalJSON decodes a phase name.
func (p *Phase) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, ok := ParsePhase(s)
	if !ok {
		return fmt.Errorf("fence: unknown phase %q", s)
	}
	*p = v
	return nil
}

// Spec is what a create asks for, kept in the reservation row (raw paths, argv
// and labels live in the fence, never in tmux tags).
type Spec struct {
	StateFile string   `json:"state_file"`
	Argv      []string `json:"argv"`
	Env       []string `json:"env,omitempty"` // KEY=VALUE
	Cwd       string   `json:"cwd,omitempty"`
	Label     string   `json:"label"`
	// StopTimeoutMS is the grace between the hangup (or SIGTERM) and SIGKILL
	// when the generation stops; 0 means DefaultStopTimeout.
	StopTimeoutMS int64 `json:"stop_timeout_ms,omitempty"`
	// The restart policy (contract "Restart policy"), kept with the
	// identity: Restart is never (or ""), on-failure or always; ResumeArgv
	// is the command of every start after the first (argv when empty);
	// RestartDelayMS the first delay; more than RestartBurst starts within
	// RestartIntervalS give up. The caller (api) fills in the defaults.
	Restart          string   `json:"restart,omitempty"`
	ResumeArgv       []string `json:"resume_argv,omitempty"`
	RestartDelayMS   int64    `json:"restart_delay_ms,omitempty"`
	RestartBurst     int      `json:"restart_burst,omitempty"`
	RestartIntervalS int64    `json:"restart_interval_s,omitempty"`
}

// Restart policies (Spec.Restart).
const (
	RestartNever     = "never"
	RestartOnFailure = "on-failure"
	RestartAlways    = "always"
)

// Restart states of an ended generation (Published.Restart.State).
const (
	// RestartExited: its agent ended and the next generation is due at
	// Restart.Due (waiting out the delay).
	RestartExited = "exited"
	// RestartStopped: it ended for good (kill, a session killed by hand, a
	// policy that does not restart this end).
	RestartStopped = "stopped"
	// RestartGaveUp: the start limit was reached; a create starts it again.
	RestartGaveUp = "gave_up"
)

// Restarts reports whether the spec has a policy other than never.
func (s Spec) Restarts() bool { return s.Restart == RestartOnFailure || s.Restart == RestartAlways }

// DefaultStopTimeout and MaxStopTimeout bound Spec.StopTimeoutMS (contract:
// default 10 s, at most 5 min).
const (
	DefaultStopTimeout = 10 * time.Second
	MaxStopTimeout     = 5 * time.Minute
)

// StopTimeout is the spec's grace period, the default when unset.
func (s Spec) StopTimeout() time.Duration {
	if s.StopTimeoutMS <= 0 {
		return DefaultStopTimeout
	}
	return time.Duration(s.StopTimeoutMS) * time.Millisecond
}

// Reservation is one identity's reservation row (DESIGN §5).
type Reservation struct {
	ID               string    `json:"reservation_id"`
	Identity         Identity  `json:"-"`
	Spec             Spec      `json:"-"`
	OwnerPID         int       `json:"owner_pid"`
	OwnerIncarnation string    `json:"owner_incarnation"`
	Phase            Phase     `json:"phase"`
	Generation       uint64    `json:"generation"`
	AttemptName      string    `json:"attempt_name"`
	TmuxID           string    `json:"tmux_id"`
	PanePID          int       `json:"pane_pid"`
	ServerPID        int       `json:"server_pid"`
	ServerStart      int64     `json:"server_start"`
	HelperPID        int       `json:"helper_pid"`
	PaneStart        uint64    `json:"pane_start"` // the pane process's start time (clock ticks), 0 if unknown
	Cgroup           string    `json:"cgroup"`     // the generation's cgroup, "" when none was made
	Abandoned        bool      `json:"abandoned"`
	ClaimedAt        time.Time `json:"claimed_at"`
	UpdatedAt        time.Time `json:"updated_at"`
	LeaseUntil       time.Time `json:"lease_until"` // diagnostic only: never authorizes takeover
	// Host, HostMachineID and HostBootID are the owner's host (schema 6;
	// empty on rows written before, which are this host's): see OwnerLive.
	Host          string `json:"host"`
	HostMachineID string `json:"host_machine_id"`
	HostBootID    string `json:"host_boot_id"`
	// StartReason is set (in memory, by the restarter) on a reservation that
	// starts a generation after the first: Publish then counts a restart
	// rather than resetting the identity's count.
	StartReason string `json:"-"`
}

// OwnerHost is the host the row's owner runs on, as the row records it.
func (r Reservation) OwnerHost() Host {
	return Host{Name: r.Host, MachineID: r.HostMachineID, BootID: r.HostBootID}
}

// reservationJSON flattens the identity and the state file into the row object
// of docs/contract.md's `fence --json` ({"state_dir", "session_id", "reservation_id", …}).
type reservationJSON struct {
	StateDir  string `json:"state_dir"`
	SessionID string `json:"session_id"`
	StateFile string `json:"state_file"`
	Label     string `json:"label"`
	reservationAlias
}

type reservationAlias Reservation

// MarshalJSON encodes the row in the `fence --json` shape.
func (r Reservation) MarshalJSON() ([]byte, error) {
	return json.Marshal(reservationJSON{
		StateDir: r.Identity.StateDir, SessionID: r.Identity.SessionID,
		StateFile: r.Spec.StateFile, Label: r.Spec.Label,
		reservationAlias: reservationAlias(r),
	})
}

// UnmarshalJSON decodes the `fence --json` row shape (argv and env are not part of it).
func (r *Reservation) UnmarshalJSON(b []byte) error {
	var j reservationJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Reservation(j.reservationAlias)
	r.Identity = Identity{StateDir: j.StateDir, SessionID: j.SessionID}
	r.Spec.StateFile, r.Spec.Label = j.StateFile, j.Label
	return nil
}

// Published is an identity's published generation (DESIGN §5): the record
// that stands between a new create and a second live session.
type Published struct {
	Identity      Identity  `json:"-"`
	Generation    uint64    `json:"generation"`
	ReservationID string    `json:"reservation_id"`
	SessionName   string    `json:"session_name"`
	TmuxID        string    `json:"tmux_id"`
	ServerPID     int       `json:"server_pid"`
	ServerStart   int64     `json:"server_start"`
	StateFile     string    `json:"state_file"`
	Label         string    `json:"label"`
	PublishedAt   time.Time `json:"published_at"`
	Ended         bool      `json:"ended"`
	EndedAt       time.Time `json:"ended_at"`
	// What holds the generation's processes (recorded at spawn; zero for
	// generations published before schema 4).
	PanePID       int    `json:"pane_pid"`
	PaneStart     uint64 `json:"pane_start"`
	BootID        string `json:"boot_id"`
	Cgroup        string `json:"cgroup"`
	StopTimeoutMS int64  `json:"stop_timeout_ms"`
	// Host and HostMachineID are the host the generation runs on, its
	// publisher's (schema 6; empty for generations published before).
	Host          string `json:"host"`
	HostMachineID string `json:"host_machine_id"`
	// Stopping is set once the generation's end was seen (or a kill began)
	// and until its processes are proven gone and it is marked ended.
	Stopping *Stop `json:"stopping,omitempty"`
	// Spec is the spec this generation was started with (schema 5; zero for
	// generations published before): its restart policy decides what
	// follows its end.
	Spec Spec `json:"-"`
	// Restart is the identity's restart bookkeeping (schema 5).
	Restart RestartInfo `json:"restart"`
	// Superseded is, on Publish's answer only, the generation this one
	// replaced (nil when there was none): a kept session it leaves behind
	// is the caller's to remove.
	Superseded *Published `json:"-"`
}

// RestartInfo is an identity's restart bookkeeping, kept in its identities
// row: what follows the end of its generation, how many starts it had.
type RestartInfo struct {
	State    string      `json:"state,omitempty"`  // "" (running or never restarted), or Restart…
	Due      time.Time   `json:"-"`                // State exited: when the next start is due
	Reason   string      `json:"reason,omitempty"` // the next start's verdict reason
	Restarts int         `json:"restarts"`         // starts after the first since the last create
	Failures int         `json:"failures"`         // consecutive failed runs (the delay doubles with each)
	Starts   []time.Time `json:"starts,omitempty"` // recent start times, newest last (the start limit)
}

// RestartNext is what MarkEndedNext records about the generation's end in
// the same transaction as its ended verdict.
type RestartNext struct {
	State    string        // "" (never policy: nothing), RestartExited, RestartStopped, RestartGaveUp
	Delay    time.Duration // RestartExited: the next start is due this long after the write's own time
	Reason   string        // RestartExited: the next start's verdict reason
	Failures int           // consecutive failed runs including this one
}

// Stop is a generation's stop in progress, durable so a restarted daemon
// continues it: SIGKILL is due at Deadline.
type Stop struct {
	Since    time.Time `json:"since"`
	Deadline time.Time `json:"deadline"`
	Reason   string    `json:"reason"`
	Killed   bool      `json:"killed"` // SIGKILL was sent
}

type publishedAlias Published

type publishedJSON struct {
	StateDir  string `json:"state_dir"`
	SessionID string `json:"session_id"`
	// EndedAt shadows the alias's: null while the generation has not ended,
	// rather than Go's zero time (0001-01-01), which reads like a date.
	EndedAt *time.Time `json:"ended_at"`
	publishedAlias
}

// MarshalJSON encodes the identity object of `fence --json`.
func (p Published) MarshalJSON() ([]byte, error) {
	j := publishedJSON{StateDir: p.Identity.StateDir, SessionID: p.Identity.SessionID, publishedAlias: publishedAlias(p)}
	if !p.EndedAt.IsZero() {
		j.EndedAt = &p.EndedAt
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes the identity object of `fence --json`.
func (p *Published) UnmarshalJSON(b []byte) error {
	var j publishedJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*p = Published(j.publishedAlias)
	p.Identity = Identity{StateDir: j.StateDir, SessionID: j.SessionID}
	if j.EndedAt != nil {
		p.EndedAt = *j.EndedAt
	}
	return nil
}

// Patch is the evidence an Advance records with its phase. Zero fields leave
// the stored value unchanged.
type Patch struct {
	AttemptName string // helper_invoked: the attempt's unique session name (contains the reservation id)
	TmuxID      string // spawned: "$N"
	PanePID     int
	ServerPID   int
	ServerStart int64
	PaneStart   uint64 // spawned: the pane process's start time
	Cgroup      string // spawned: the generation's cgroup, if one is made
	// Kept: AttemptName is the session kept from the identity's previous
	// generation (a restart respawns its pane), whose name is the identity's
	// first attempt's, not this reservation's. Recovery still finds the
	// attempt by it: the kept session is the one the restart touched.
	Kept bool
}

// ReserveOutcome says what Reserve found.
type ReserveOutcome int

const (
	// Reserved: the row is ours (fresh, or a dead owner's row that never
	// invoked the helper, reclaimed in place).
	Reserved ReserveOutcome = iota + 1
	// MaybeExisting: no row, but a published generation that is not marked
	// ended. The caller consults the live census: a live session answers
	// existing; a gone one is MarkEnded(generation) and Reserve is called again.
	MaybeExisting
	// NeedsRecovery: the row's owner is proven dead (or it is our own abandoned
	// attempt) and it reached helper_invoked: a child may exist, so the caller
	// runs RecoverAbandoned(ReserveResult.Abandoned).
	NeedsRecovery
	// PublishedElsewhere: no row, but a generation that another host of the
	// fleet published and has not marked ended (Published, with its Host).
	// Only that host can tell whether its session lives: the caller answers
	// existing with it and never creates here (contract "Beyond one host").
	PublishedElsewhere
)

// String names the outcome.
func (o ReserveOutcome) String() string {
	switch o {
	case Reserved:
		return "reserved"
	case MaybeExisting:
		return "maybe_existing"
	case NeedsRecovery:
		return "needs_recovery"
	case PublishedElsewhere:
		return "published_elsewhere"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// ReserveResult is Reserve's answer; which field is set depends on Outcome.
type ReserveResult struct {
	Outcome     ReserveOutcome
	Reservation Reservation // Reserved
	Published   Published   // MaybeExisting, PublishedElsewhere
	Abandoned   Reservation // NeedsRecovery
	// Displaced is the dead owner's row that a Reserved outcome replaced in
	// place (phase reserved: no child could exist); nil when there was none.
	// The caller writes its reclaimed verdict: no reclaim goes unrecorded.
	Displaced *Reservation
}

// Authority mirrors census.Authority: what a live inspection found for an
// abandoned attempt. The zero value is AuthorityUnknown: fail closed.
type Authority int

// The inspection answers (DESIGN §4).
const (
	// AuthorityUnknown: not synced, tmux unreachable or contradictory evidence.
	AuthorityUnknown Authority = iota
	// Authoritative: a live session with the identity's tags and published generation.
	Authoritative
	// Orphan: a live session of the attempt that is not the published generation.
	Orphan
	// Absent: a synced census shows no session of the attempt.
	Absent
)

// String returns the snake_case name.
func (a Authority) String() string {
	switch a {
	case Authoritative:
		return "authoritative"
	case Orphan:
		return "orphan"
	case Absent:
		return "absent"
	}
	return "unknown"
}

// Live is an owner's tri-state liveness. The zero value is LiveUnknown: only a
// proven-dead owner is ever displaced.
type Live int

// The liveness answers.
const (
	// LiveUnknown: liveness cannot be established (fail closed: blocks).
	LiveUnknown Live = iota
	// Alive: the owner process of that incarnation is running.
	Alive
	// Dead: proven dead (gone, zombie, reused pid, or another boot).
	Dead
)

// String returns the snake_case name.
func (l Live) String() string {
	switch l {
	case Alive:
		return "alive"
	case Dead:
		return "dead"
	}
	return "unknown"
}

// Postmortem is what the pane helper records of its generation: its start
// (RecordHelperStart: its pid, incarnation and cgroup, which the stop's hold
// reads) and, when it could not exec the agent, that end (RecordPostmortem),
// so the failure is known even while the daemon is down. An agent that was
// exec'd has no end here: the pane's process is the agent, and tmux keeps its
// exit in the dead pane (lifecycle end detection).
type Postmortem struct {
	ReservationID     string   `json:"reservation_id"`
	Identity          Identity `json:"identity"`
	Generation        uint64   `json:"generation"`
	HelperPID         int      `json:"helper_pid"`
	HelperIncarnation string   `json:"helper_incarnation"`
	// AgentPID is read only: a resident helper of a binary from before the
	// exec ran the agent as its child and recorded its end with its pid; 0
	// for the end of an exec that failed.
	AgentPID   int       `json:"agent_pid"`
	ExitStatus *int      `json:"exit_status"` // nil: unknown or killed by a signal
	Signal     string    `json:"signal"`      // e.g. "SIGKILL", "" when none
	StartedAt  time.Time `json:"started_at"`
	EndedAt    time.Time `json:"ended_at"` // zero while the helper or its agent runs
	Cgroup     string    `json:"cgroup"`   // the cgroup the helper entered before its agent, "" if none
}

type restartAlias RestartInfo

// MarshalJSON encodes the bookkeeping of `fence --json`, with "due": null
// while no start is due (not Go's zero time, which reads like a date).
func (r RestartInfo) MarshalJSON() ([]byte, error) {
	j := struct {
		Due *time.Time `json:"due"`
		restartAlias
	}{restartAlias: restartAlias(r)}
	if !r.Due.IsZero() {
		j.Due = &r.Due
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes what MarshalJSON writes.
func (r *RestartInfo) UnmarshalJSON(b []byte) error {
	var j struct {
		Due *time.Time `json:"due"`
		restartAlias
	}
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = RestartInfo(j.restartAlias)
	if j.Due != nil {
		r.Due = *j.Due
	}
	return nil
}
