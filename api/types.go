// Package api is the edge of the daemon: the HTTP/JSON API on api.sock (peer
// credentials, origin refusal, body limits, strict decoding, one error shape),
// the input validation of docs/contract.md's limits, and the typed Go client the
// CLI uses.
//
// The handlers talk to a Service, not to lifecycle directly, so that the HTTP
// layer and the client are tested with fakes; api/backend adapts the real
// lifecycle.Manager, the fence (fence.Fence) and verdict.Writer to it.
package api

import (
	"context"
	"encoding/json"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// CreateRequest is the body of POST /v1/sessions, exactly as it crosses the
// wire. Validate turns it into a CreateSpec.
type CreateRequest struct {
	StateDir  string            `json:"state_dir"`
	SessionID string            `json:"session_id"`
	StateFile string            `json:"state_file,omitempty"`
	Argv      []string          `json:"argv"`
	Cwd       string            `json:"cwd,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Label     string            `json:"label,omitempty"`
	WaitMS    *int64            `json:"wait_ms,omitempty"`
	// StopTimeoutMS: the grace between the hangup (or SIGTERM) and SIGKILL
	// when the generation stops; default 10000, at most 300000.
	StopTimeoutMS *int64 `json:"stop_timeout_ms,omitempty"`
	// The restart policy (contract "Restart policy"): restart is never
	// (default), on-failure or always; resume_argv the command of every start
	// after the first (argv when absent); restart_delay_ms the first delay
	// (default 1000, at most 60000); more than restart_burst (5) starts
	// within restart_interval_s (300) give up.
	Restart          string   `json:"restart,omitempty"`
	ResumeArgv       []string `json:"resume_argv,omitempty"`
	RestartDelayMS   *int64   `json:"restart_delay_ms,omitempty"`
	RestartBurst     *int64   `json:"restart_burst,omitempty"`
	RestartIntervalS *int64   `json:"restart_interval_s,omitempty"`
}

// CreateSpec is a validated, canonicalised create request: what the Service
// receives. Env is sorted KEY=VALUE.
type CreateSpec struct {
	StateDir, SessionID, StateFile string
	Argv                           []string
	Env                            []string
	Cwd, Label                     string
	Wait                           time.Duration
	StopTimeout                    time.Duration
	Restart                        RestartSpec
}

// Ref names a session either by tmux session name or by identity; exactly one
// of Name and (StateDir, SessionID) is set.
type Ref struct {
	Name      string
	StateDir  string
	SessionID string
}

// IsIdentity reports whether r names an identity rather than a session name.
func (r Ref) IsIdentity() bool { return r.Name == "" }

// Session is docs/contract.md's Session object.
type Session struct {
	Name          string    `json:"name"`
	ID            string    `json:"id"`
	Managed       bool      `json:"managed"`
	StateDir      string    `json:"state_dir"`
	SessionID     string    `json:"session_id"`
	StateFile     string    `json:"state_file"`
	Generation    uint64    `json:"generation"`
	Authoritative bool      `json:"authoritative"`
	Label         string    `json:"label"`
	PanePID       int       `json:"pane_pid"`
	PaneDead      bool      `json:"pane_dead"`
	Attached      int       `json:"attached"`
	CreatedAt     time.Time `json:"created_at"`
	State         string    `json:"state,omitempty"`           // "running" or "stopping" (managed sessions)
	StopTimeoutMS int64     `json:"stop_timeout_ms,omitempty"` // the generation's grace before SIGKILL
	// Restart is the identity's policy, Restarts its starts after the first,
	// NextStartAt when the next start is due while it waits (state exited).
	Restart     string     `json:"restart,omitempty"`
	Restarts    int        `json:"restarts"`
	NextStartAt *time.Time `json:"next_start_at,omitempty"`
	// ActivityAt is when the pane last produced output (whole seconds), nil
	// (JSON null) when it has produced none.
	ActivityAt *time.Time `json:"activity_at"`
	// Host is the fleet host that runs the session (SKC_HOST). For a
	// session of another host (shown from the fence's record), AttachHint is
	// the command that attaches to it, to run on that host.
	Host       string `json:"host"`
	AttachHint string `json:"attach_hint,omitempty"`
}

// Create statuses (docs/contract.md).
const (
	StatusPublished = "published"
	StatusExisting  = "existing"
	StatusKilled    = "killed"
)

// CreateResponse answers POST /v1/sessions and `create --json`.
type CreateResponse struct {
	Status  string  `json:"status"` // published | existing
	Session Session `json:"session"`
}

// CensusInfo is the "census" object of `ls --json`.
type CensusInfo struct {
	Synced          bool      `json:"synced"`
	ServerPID       int       `json:"server_pid"`
	ServerStartedAt time.Time `json:"server_started_at"`
	TmuxVersion     string    `json:"tmux_version"`
}

// ListResponse answers GET /v1/sessions and `ls --json`.
type ListResponse struct {
	Census   CensusInfo `json:"census"`
	Sessions []Session  `json:"sessions"`
}

// ShowResponse answers GET /v1/sessions/{name} and `show --json`. Session is
// null when an identity was asked for whose session is gone (its history is
// still answered). Reservation is the fence's own JSON (null when there is none).
type ShowResponse struct {
	Session     *Session         `json:"session"`
	Reservation json.RawMessage  `json:"reservation"`
	Verdicts    []verdict.Record `json:"verdicts"`
	// FenceUnavailable: the fence could not be read and this daemon had not
	// read this identity before (a fleet's database away); the session is
	// the census's, its reservation and verdicts are not known.
	FenceUnavailable bool `json:"fence_unavailable,omitempty"`
}

// KillResponse answers DELETE /v1/sessions/{name} and `kill --json`.
type KillResponse struct {
	Status  string         `json:"status"` // killed
	Verdict verdict.Record `json:"verdict"`
}

// FenceResponse answers GET /v1/fence and `fence --json`; the entries are the
// fence's own JSON objects (snake_case), carried through unchanged.
type FenceResponse struct {
	Reservations []json.RawMessage `json:"reservations"`
	Identities   []json.RawMessage `json:"identities"`
}

// ReleaseRequest is the body of POST /v1/fence/release (`fence release`).
type ReleaseRequest struct {
	ReservationID string `json:"reservation_id"`
}

// ReleaseResponse answers POST /v1/fence/release: the released verdict.
type ReleaseResponse struct {
	Status  string         `json:"status"` // released
	Verdict verdict.Record `json:"verdict"`
}

// ForgetRequest is the body of POST /v1/fence/forget (`fence forget`).
type ForgetRequest struct {
	Host string `json:"host"`
}

// ForgetResponse answers POST /v1/fence/forget: what was cleared of the host
// (the fence's reservation rows and published generations, as `fence --json`
// shows them) and the one released verdict.
type ForgetResponse struct {
	Status       string            `json:"status"` // forgotten
	Host         string            `json:"host"`
	Reservations []json.RawMessage `json:"reservations"`
	Identities   []json.RawMessage `json:"identities"`
	Verdict      verdict.Record    `json:"verdict"`
}

// Info answers GET /v1/info.
type Info struct {
	Version   string    `json:"version"`
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"started_at"`
	Home      string    `json:"home"`
	// Tmux is the tmux binary the daemon runs its server with (an absolute
	// path): attach runs the same one, since a client of another tmux
	// version cannot talk to that server.
	Tmux string `json:"tmux,omitempty"`
	// TmuxConfig is the config file the daemon's server was started with
	// (SKC_TMUX_CONFIG, --tmux-config), "" for tmux's default: doctor checks
	// the one the server reads, not its own environment's.
	TmuxConfig string `json:"tmux_config,omitempty"`
}

// EncodedReads is optional for a Service: one that implements it answers
// GET /v1/sessions and GET /v1/sessions/{name} (and GET /v1/identity) already
// encoded, so the handler copies bytes instead of encoding a 300 KB list per
// request. Each method appends exactly the JSON document json.Marshal makes of
// List's or Show's response (no trailing newline) to dst and returns it; on
// error it returns a *verdict.Error, as Service's methods do.
type EncodedReads interface {
	AppendListJSON(ctx context.Context, dst []byte) ([]byte, error)
	AppendShowJSON(ctx context.Context, dst []byte, ref Ref) ([]byte, error)
}

// Service is what the handlers need from the daemon. Errors are
// *verdict.Error; their code decides the HTTP status through verdict.Classify.
type Service interface {
	Create(ctx context.Context, spec CreateSpec) (CreateResponse, error)
	List(ctx context.Context) (ListResponse, error)
	// ListFleet is `ls --fleet`: List and every other host's running
	// sessions, from the fence.
	ListFleet(ctx context.Context) (ListResponse, error)
	Show(ctx context.Context, ref Ref) (ShowResponse, error)
	Kill(ctx context.Context, ref Ref) (KillResponse, error)
	// Restart ends the running generation (the proven stop) and starts the
	// next one now; it answers once that one is published.
	Restart(ctx context.Context, ref Ref) (RestartResponse, error)
	Fence(ctx context.Context) (FenceResponse, error)
	// Release clears a reservation row or a stopping generation that cannot
	// be proven dead or gone (`fence release --reservation ID`).
	Release(ctx context.Context, resID string) (ReleaseResponse, error)
	// Forget clears every row and running generation of a host that is gone
	// for good (`fence forget --host NAME`).
	Forget(ctx context.Context, host string) (ForgetResponse, error)
	// VerdictsSince returns up to limit records with sequence > after, oldest
	// first.
	VerdictsSince(ctx context.Context, after int64, limit int) ([]verdict.Record, error)
	// FleetVerdictsSince is VerdictsSince over every host's verdicts, in the
	// fleet-wide sequence (`verdicts --fleet`).
	FleetVerdictsSince(ctx context.Context, after int64, limit int) ([]verdict.Record, error)
	// SubscribeVerdicts delivers records emitted from now on (it may also
	// deliver older ones; the handler drops duplicates by sequence). cancel
	// releases the subscription.
	SubscribeVerdicts(after int64) (records <-chan verdict.Record, cancel func())
}
