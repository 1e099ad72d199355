// Package backend adapts the daemon's real components — lifecycle.Manager,
// the fence (fence.Fence) and verdict.Writer — to api.Service. It is a translation layer
// only: api validated the input, lifecycle decides.
package backend

import (
	"context"
	"encoding/json"
	"time"

	"github.com/skc-supervisor/skc-supervisor/api"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/lifecycle"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Service implements api.Service over the real components.
type Service struct {
	Manager  *lifecycle.Manager
	Store    fence.Fence
	Verdicts *verdict.Writer
}

var (
	_ api.Service      = (*Service)(nil)
	_ api.EncodedReads = (*Service)(nil)
)

// Create runs the create saga for a validated spec.
func (s *Service) Create(ctx context.Context, spec api.CreateSpec) (api.CreateResponse, error) {
	res, err := s.Manager.Create(ctx, lifecycle.CreateRequest{
		Identity: fence.Identity{StateDir: spec.StateDir, SessionID: spec.SessionID},
		Spec: fence.Spec{StateFile: spec.StateFile, Argv: spec.Argv, Env: spec.Env,
			Cwd: spec.Cwd, Label: spec.Label, StopTimeoutMS: spec.StopTimeout.Milliseconds(),
			Restart: spec.Restart.Policy, ResumeArgv: spec.Restart.ResumeArgv,
			RestartDelayMS: spec.Restart.Delay.Milliseconds(), RestartBurst: spec.Restart.Burst,
			RestartIntervalS: int64(spec.Restart.Interval / time.Second)},
		Wait: spec.Wait,
	})
	if err != nil {
		return api.CreateResponse{}, err
	}
	return api.CreateResponse{Status: res.Status, Session: session(res.Session)}, nil
}

// List lists the supervised server's sessions.
func (s *Service) List(ctx context.Context) (api.ListResponse, error) {
	return listResponse(s.Manager.List(ctx))
}

// ListFleet is `ls --fleet` (lifecycle.Manager.ListFleet).
func (s *Service) ListFleet(ctx context.Context) (api.ListResponse, error) {
	return listResponse(s.Manager.ListFleet(ctx))
}

func listResponse(res lifecycle.ListResult, err error) (api.ListResponse, error) {
	if err != nil {
		return api.ListResponse{}, err
	}
	out := api.ListResponse{Census: api.CensusInfo(res.Census), Sessions: make([]api.Session, 0, len(res.Sessions))}
	for _, v := range res.Sessions {
		out.Sessions = append(out.Sessions, session(v))
	}
	return out, nil
}

// AppendListJSON appends the list, encoded (lifecycle.Manager.AppendListJSON).
func (s *Service) AppendListJSON(ctx context.Context, dst []byte) ([]byte, error) {
	return s.Manager.AppendListJSON(ctx, dst)
}

// AppendShowJSON appends one session's description, encoded
// (lifecycle.Manager.AppendShowJSON).
func (s *Service) AppendShowJSON(ctx context.Context, dst []byte, ref api.Ref) ([]byte, error) {
	return s.Manager.AppendShowJSON(ctx, dst, lifecycleRef(ref))
}

// Show describes one session.
func (s *Service) Show(ctx context.Context, ref api.Ref) (api.ShowResponse, error) {
	res, err := s.Manager.Show(ctx, lifecycleRef(ref))
	if err != nil {
		return api.ShowResponse{}, err
	}
	out := api.ShowResponse{Verdicts: res.Verdicts, FenceUnavailable: res.FenceUnavailable}
	if res.Session != nil {
		s := session(*res.Session)
		out.Session = &s
	}
	if res.Reservation != nil {
		if out.Reservation, err = json.Marshal(res.Reservation); err != nil {
			return api.ShowResponse{}, verdict.Errorf(verdict.CodeInternal, nil, "encode reservation: %w", err)
		}
	}
	return out, nil
}

// Kill ends one session.
func (s *Service) Kill(ctx context.Context, ref api.Ref) (api.KillResponse, error) {
	res, err := s.Manager.Kill(ctx, lifecycleRef(ref))
	if err != nil {
		return api.KillResponse{}, err
	}
	return api.KillResponse{Status: res.Status, Verdict: res.Verdict}, nil
}

// Restart ends one session's running agent and starts the next generation.
func (s *Service) Restart(ctx context.Context, ref api.Ref) (api.RestartResponse, error) {
	v, err := s.Manager.Restart(ctx, lifecycleRef(ref))
	if err != nil {
		return api.RestartResponse{}, err
	}
	return api.RestartResponse{Status: api.StatusRestarted, Session: session(v)}, nil
}

// Fence lists the fence's reservations and published identities, each in the
// fence's own JSON.
// Release is `fence release --reservation ID`.
func (s *Service) Release(ctx context.Context, resID string) (api.ReleaseResponse, error) {
	rec, err := s.Manager.Release(ctx, resID)
	if err != nil {
		return api.ReleaseResponse{}, err
	}
	return api.ReleaseResponse{Status: "released", Verdict: rec}, nil
}

func (s *Service) Fence(ctx context.Context) (api.FenceResponse, error) {
	rs, err := s.Store.Reservations(ctx)
	if err != nil {
		return api.FenceResponse{}, err
	}
	ids, err := s.Store.Identities(ctx)
	if err != nil {
		return api.FenceResponse{}, err
	}
	out := api.FenceResponse{Reservations: make([]json.RawMessage, 0, len(rs)), Identities: make([]json.RawMessage, 0, len(ids))}
	for _, r := range rs {
		b, err := json.Marshal(r)
		if err != nil {
			return api.FenceResponse{}, verdict.Errorf(verdict.CodeInternal, nil, "encode reservation: %w", err)
		}
		out.Reservations = append(out.Reservations, b)
	}
	for _, p := range ids {
		b, err := json.Marshal(p)
		if err != nil {
			return api.FenceResponse{}, verdict.Errorf(verdict.CodeInternal, nil, "encode identity: %w", err)
		}
		out.Identities = append(out.Identities, b)
	}
	return out, nil
}

// Forget is `fence forget --host NAME`.
func (s *Service) Forget(ctx context.Context, host string) (api.ForgetResponse, error) {
	fg, rec, err := s.Manager.ForgetHost(ctx, host)
	if err != nil {
		return api.ForgetResponse{}, err
	}
	out := api.ForgetResponse{Status: "forgotten", Host: fg.Host, Verdict: rec,
		Reservations: make([]json.RawMessage, 0, len(fg.Reservations)), Identities: make([]json.RawMessage, 0, len(fg.Published))}
	for _, r := range fg.Reservations {
		b, err := json.Marshal(r)
		if err != nil {
			return api.ForgetResponse{}, verdict.Errorf(verdict.CodeInternal, nil, "encode reservation: %w", err)
		}
		out.Reservations = append(out.Reservations, b)
	}
	for _, p := range fg.Published {
		b, err := json.Marshal(p)
		if err != nil {
			return api.ForgetResponse{}, verdict.Errorf(verdict.CodeInternal, nil, "encode identity: %w", err)
		}
		out.Identities = append(out.Identities, b)
	}
	return out, nil
}

// FleetVerdictsSince reads the fleet's journal (the fence's; on SQLite,
// this host's).
func (s *Service) FleetVerdictsSince(ctx context.Context, after int64, limit int) ([]verdict.Record, error) {
	return s.Store.FleetVerdictsSince(ctx, after, limit)
}

// VerdictsSince reads the journal.
func (s *Service) VerdictsSince(ctx context.Context, after int64, limit int) ([]verdict.Record, error) {
	return s.Store.VerdictsSince(ctx, after, limit)
}

// SubscribeVerdicts follows the verdict writer.
func (s *Service) SubscribeVerdicts(after int64) (<-chan verdict.Record, func()) {
	return s.Verdicts.Subscribe(after)
}

func lifecycleRef(ref api.Ref) lifecycle.Ref {
	if ref.Name != "" {
		return lifecycle.Ref{Name: ref.Name}
	}
	return lifecycle.Ref{Identity: &fence.Identity{StateDir: ref.StateDir, SessionID: ref.SessionID}}
}

func session(v lifecycle.View) api.Session { return api.Session(v) }
