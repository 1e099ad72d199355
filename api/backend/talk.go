package backend

import (
	"context"

	"github.com/skc-supervisor/skc-supervisor/api"
	"github.com/skc-supervisor/skc-supervisor/lifecycle"
)

var _ api.Talker = (*Service)(nil)

// Screen reads what a session's pane shows.
func (s *Service) Screen(ctx context.Context, ref api.Ref, lines int, ansi bool) (api.ScreenResponse, error) {
	sc, err := s.Manager.Screen(ctx, lifecycleRef(ref), lines, ansi)
	if err != nil {
		return api.ScreenResponse{}, err
	}
	return api.ScreenResponse{Name: sc.Name, Lines: sc.Lines, Cursor: api.Cursor(sc.Cursor), PaneDead: sc.PaneDead}, nil
}

// Input types in to a session's agent.
func (s *Service) Input(ctx context.Context, ref api.Ref, in api.InputRequest) error {
	return s.Manager.Input(ctx, lifecycleRef(ref), lifecycle.Input{Text: in.Text, Enter: in.Enter, Keys: in.Keys})
}

// Wait waits for a session's exit, idleness or text.
func (s *Service) Wait(ctx context.Context, ref api.Ref, req api.WaitRequest) (api.WaitResponse, error) {
	res, err := s.Manager.Wait(ctx, lifecycleRef(ref), lifecycle.WaitRequest(req))
	if err != nil {
		return api.WaitResponse{}, err
	}
	return api.WaitResponse{Status: res.Status, Verdict: res.Verdict}, nil
}

// FollowOutput subscribes to a session's output.
func (s *Service) FollowOutput(ctx context.Context, ref api.Ref) (api.OutputStream, error) {
	sub, err := s.Manager.FollowOutput(ctx, lifecycleRef(ref))
	if err != nil {
		return nil, err
	}
	return outputStream{sub}, nil
}

type outputStream struct{ sub *lifecycle.OutputSub }

func (o outputStream) Next(ctx context.Context) ([]api.OutputChunk, bool) {
	items, ok := o.sub.Next(ctx)
	out := make([]api.OutputChunk, len(items))
	for i, it := range items {
		out[i] = api.OutputChunk{At: it.At, Data: it.Data, Dropped: it.Dropped, Unknown: it.Paused}
	}
	return out, ok
}

func (o outputStream) Close() { o.sub.Close() }
