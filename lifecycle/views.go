package lifecycle

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// View is CONTRACT.md's Session object; its JSON tags are the contract's names.
type View struct {
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
}

// ListResult is `ls --json`.
type ListResult struct {
	Census   CensusInfo `json:"census"`
	Sessions []View     `json:"sessions"`
}

// CensusInfo describes the supervised server as the census sees it.
type CensusInfo struct {
	Synced          bool      `json:"synced"`
	ServerPID       int       `json:"server_pid"`
	ServerStartedAt time.Time `json:"server_started_at"`
	TmuxVersion     string    `json:"tmux_version"`
}

// ShowResult is `show --json`: the session, its reservation row (if any) and the
// identity's verdicts, oldest first.
type ShowResult struct {
	Session     View               `json:"session"`
	Reservation *fence.Reservation `json:"reservation"`
	Verdicts    []verdict.Record   `json:"verdicts"`
}

var errNotSynced = errors.New("census not synced")

// showVerdicts bounds how many of an identity's verdicts Show returns (the most
// recent ones, oldest first): a lookup reads at most this many records through
// the fence's identity index, however long the identity's history.
const showVerdicts = 100

// List returns every session on the supervised server (the control session
// excepted), managed ones joined with their published identity. The identities
// come from the fence's in-memory copy of its table (fence.CachedPublished):
// reading every row from SQLite per request cost more than the join itself.
//
// The census may list a session a moment before its tags are set (it re-lists
// on the leading edge of new-session's notification, and setting an option
// notifies nothing), and a create no longer waits long enough after tagging to
// hide that. Such a session is joined by its tmux id in the census's server life
// with the generation the daemon published there (staleTags), so a List never
// needs a full re-list for it; only a published session missing from the census
// altogether makes it refresh.
func (m *Manager) List(ctx context.Context) (ListResult, error) {
	snap := m.census.Snapshot()
	byTmux, behind, err := m.liveInLife(ctx, snap)
	if err != nil {
		return ListResult{}, verdict.Errorf(verdict.CodeFenceUnavailable, nil, "%w", err)
	}
	if behind && m.census.Refresh(ctx) == nil {
		// A session published a moment ago may not be listed yet: a create
		// followed by ls must show it.
		snap = m.census.Snapshot()
	}
	out := ListResult{Census: CensusInfo{
		Synced: snap.Synced, ServerPID: snap.Info.PID, TmuxVersion: snap.Info.Version,
	}, Sessions: make([]View, 0, len(snap.Sessions))}
	if snap.Info.StartTime != 0 {
		out.Census.ServerStartedAt = time.Unix(snap.Info.StartTime, 0).UTC()
	}
	for i := range snap.Sessions {
		s := &snap.Sessions[i]
		if d := s.Identity(); d != "" {
			p, ok, err := m.fence.CachedPublished(ctx, d)
			if err != nil {
				return ListResult{}, verdict.Errorf(verdict.CodeFenceUnavailable, nil, "%w", err)
			}
			if ok {
				out.Sessions = append(out.Sessions, m.viewOf(s, &p))
				continue
			}
		} else if p, ok := byTmux[s.ID]; ok && staleTags(s) {
			out.Sessions = append(out.Sessions, publishedView(s, p))
			continue
		}
		out.Sessions = append(out.Sessions, m.viewOf(s, nil))
	}
	return out, nil
}

// liveInLife returns the published, not-ended generations of the census's server
// life by tmux id, and whether one of them is missing from snap.
func (m *Manager) liveInLife(ctx context.Context, snap census.Snapshot) (map[string]fence.Published, bool, error) {
	if !snap.Synced {
		return nil, false, nil
	}
	ids := make(map[string]bool, len(snap.Sessions))
	for i := range snap.Sessions {
		ids[snap.Sessions[i].ID] = true
	}
	byTmux := make(map[string]fence.Published)
	behind := false
	err := m.fence.CachedLive(ctx, func(p *fence.Published) {
		if p.ServerPID == snap.Info.PID && p.ServerStart == snap.Info.StartTime {
			byTmux[p.TmuxID] = *p
			behind = behind || !ids[p.TmuxID]
		}
	})
	return byTmux, behind, err
}

// staleTags: the census listed s with none of the @skc-* tags — before the saga
// set them, or the census has not re-read them since.
func staleTags(s *census.Session) bool {
	for k := range s.Tags {
		if strings.HasPrefix(k, "@skc-") {
			return false
		}
	}
	return true
}

// publishedView is the View of session s, which the census lists without tags
// (staleTags), as the published generation p living in it: p was published by
// this daemon for that tmux id in this server life, after the saga set its tags.
func publishedView(s *census.Session, p fence.Published) View {
	return View{Name: s.Name, ID: s.ID, Managed: true,
		StateDir: p.Identity.StateDir, SessionID: p.Identity.SessionID,
		StateFile: p.StateFile, Label: p.Label, Generation: p.Generation, Authoritative: !p.Ended,
		PanePID: s.PanePID, PaneDead: s.PaneDead, Attached: s.Attached, CreatedAt: s.Created.UTC()}
}

// Show returns one session with its reservation row and verdicts.
func (m *Manager) Show(ctx context.Context, ref Ref) (ShowResult, error) {
	pub, sess, err := m.resolve(ctx, ref)
	if err != nil {
		return ShowResult{}, err
	}
	v := m.viewOf(&sess, &pub)
	if staleTags(&sess) {
		v = publishedView(&sess, pub) // resolve matched it by tmux id in this life
	}
	out := ShowResult{Session: v, Verdicts: []verdict.Record{}}
	row, ok, err := m.fence.ReservationFor(ctx, pub.Identity)
	if err != nil {
		return out, verdict.Errorf(verdict.CodeFenceUnavailable, nil, "%w", err)
	}
	if ok {
		out.Reservation = &row
	}
	out.Verdicts, err = m.verdictsOf(ctx, pub.Identity)
	return out, err
}

// verdictsOf returns the identity's most recent verdicts (up to showVerdicts),
// oldest first, from the fence's identity index.
func (m *Manager) verdictsOf(ctx context.Context, id fence.Identity) ([]verdict.Record, error) {
	recs, err := m.fence.VerdictsFor(ctx, id, showVerdicts)
	if err != nil {
		return []verdict.Record{}, verdict.Errorf(verdict.CodeFenceUnavailable, nil, "%w", err)
	}
	return recs, nil
}

// viewOf joins a census session with its published identity (nil when none). It is
// authoritative when the session carries exactly the published generation's tags.
func (m *Manager) viewOf(s *census.Session, pub *fence.Published) View {
	v := View{Name: s.Name, ID: s.ID, Managed: s.Managed, PanePID: s.PanePID,
		PaneDead: s.PaneDead, Attached: s.Attached, CreatedAt: s.Created.UTC()}
	if pub == nil || !s.Managed {
		return v
	}
	v.StateDir, v.SessionID = pub.Identity.StateDir, pub.Identity.SessionID
	v.StateFile, v.Label = pub.StateFile, pub.Label
	v.Generation = generationTag(s)
	v.Authoritative = !pub.Ended && pub.TmuxID == s.ID && pub.Generation == v.Generation
	return v
}

// attemptView is the View of a session this Manager just published: the census
// may not have listed it yet.
func (m *Manager) attemptView(a *attempt, pub fence.Published) View {
	return View{
		Name: a.name, ID: a.tmuxID, Managed: true,
		StateDir: a.req.Identity.StateDir, SessionID: a.req.Identity.SessionID,
		StateFile: pub.StateFile, Generation: a.res.Generation, Authoritative: true,
		Label: pub.Label, PanePID: a.panePID, CreatedAt: a.created.UTC(),
	}
}

func generationTag(s *census.Session) uint64 {
	var g uint64
	for _, c := range []byte(s.Tags[census.TagGeneration]) {
		if c < '0' || c > '9' {
			return 0
		}
		g = g*10 + uint64(c-'0')
	}
	return g
}
