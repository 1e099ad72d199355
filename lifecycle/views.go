package lifecycle

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// View is docs/contract.md's Session object; its JSON tags are the contract's names.
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
	// State of a managed session's generation: "running", or "stopping" from
	// the moment its end is seen (a dead pane, a kill) until its processes
	// are proven gone. "" for sessions that are not ours.
	State         string `json:"state,omitempty"`
	StopTimeoutMS int64  `json:"stop_timeout_ms,omitempty"` // the generation's grace before SIGKILL
	// Restart is the identity's policy (never, on-failure, always; "" for
	// sessions that are not ours), Restarts its starts after the first since
	// its last create, NextStartAt when the next start is due while it waits
	// out a delay (state exited), null otherwise.
	Restart     string     `json:"restart,omitempty"`
	Restarts    int        `json:"restarts"`
	NextStartAt *time.Time `json:"next_start_at,omitempty"`
	// ActivityAt is when the pane last produced output (the census's
	// Activity, whole seconds), nil when it has produced none.
	ActivityAt *time.Time `json:"activity_at"`
	// Host is the fleet host that runs the session (SKC_HOST): this
	// daemon's for a session of its tmux server. A session of another host
	// is shown from the fence's record (remoteView); AttachHint is then the
	// command to run on that host to attach to it.
	Host       string `json:"host"`
	AttachHint string `json:"attach_hint,omitempty"`
}

// Session states (View.State).
const (
	StateRunning  = "running"
	StateStopping = "stopping"
	// StateStarting: the next generation's start is due and under way.
	StateStarting = "starting"
	// StateExited: the generation ended and the next start is due at
	// NextStartAt (its session kept, the pane dead, until then).
	StateExited = "exited"
	// StateStopped: the generation ended for good (shown while its session
	// is still being removed).
	StateStopped = "stopped"
	// StateGaveUp: the start limit was reached; a create starts it again.
	StateGaveUp = "gave_up"
)

// stateOf is the State of a session of published generation p.
func stateOf(p fence.Published, paneDead bool) string {
	switch {
	case p.Ended && p.Restart.State == fence.RestartExited && p.Restart.Due.After(time.Now()):
		return StateExited
	case p.Ended && p.Restart.State == fence.RestartExited:
		return StateStarting // due: the restarter is starting the next generation
	case p.Ended && p.Restart.State == fence.RestartGaveUp:
		return StateGaveUp
	case p.Ended:
		return StateStopped
	case p.Stopping != nil || paneDead:
		return StateStopping
	}
	return StateRunning
}

// restartFields fills in the View's restart policy, count and next start.
func restartFields(v *View, p fence.Published) {
	v.Restart, v.Restarts = p.Spec.Restart, p.Restart.Restarts
	if v.Restart == "" {
		v.Restart = fence.RestartNever
	}
	if p.Ended && p.Restart.State == fence.RestartExited {
		due := p.Restart.Due.UTC()
		v.NextStartAt = &due
	}
}

// activityAt is a session's ActivityAt: nil when the pane has not written
// since the session became the identity's (since, its created_at). A
// claimed standby's window dates its activity from the standby's spawn:
// not the agent's. Output within the session's creation second is told
// only by the pane's cursor and history (census wroteFlag), which tmux's
// dead-pane notice moves too and a respawn keeps (the notice stays in the
// history): for a dead pane, or a generation started after the first in
// its session (doubt), an activity at the creation second is that notice,
// not output. Activity is whole seconds, so the comparisons are too.
func activityAt(s *census.Session, since time.Time, doubt bool) *time.Time {
	if s.Activity.IsZero() || s.Activity.Before(since.Truncate(time.Second)) {
		return nil
	}
	if doubt && s.Activity.Equal(s.Created.Truncate(time.Second)) {
		return nil
	}
	t := s.Activity.UTC()
	return &t
}

// restartedInSession: p is a restart's generation in the session an earlier
// generation had (since, the session's @skc-since, is that generation's,
// more than a second before p's publication), whose first second's history
// is not p's own. A restart in a new session (after its server died, or its
// kept session could not be reused) is dated by its own tagging, just before
// its publication: its first-second output is its own.
func restartedInSession(since time.Time, p fence.Published) bool {
	return p.Restart.Restarts > 0 && p.PublishedAt.Sub(since) > time.Second
}

// sameView compares views by value (ActivityAt by the time it points to).
func sameView(a, b *View) bool {
	x, y := *a, *b
	x.ActivityAt, y.ActivityAt = nil, nil
	if x != y || (a.ActivityAt == nil) != (b.ActivityAt == nil) {
		return false
	}
	return a.ActivityAt == nil || a.ActivityAt.Equal(*b.ActivityAt)
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

// ShowResult is `show --json`: the session (null when the identity asked for
// has no live session), its reservation row (if any) and the identity's
// verdicts, oldest first (none for a session that is not supervised).
type ShowResult struct {
	Session     *View              `json:"session"`
	Reservation *fence.Reservation `json:"reservation"`
	Verdicts    []verdict.Record   `json:"verdicts"`
	// FenceUnavailable: the fence could not be read and holds no earlier read
	// of this identity to answer from (a fleet's database away): the session
	// is the census's, its reservation and verdicts are not known (null, []).
	FenceUnavailable bool `json:"fence_unavailable,omitempty"`
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
	var out ListResult
	info, err := m.listViews(ctx, &listScratch{}, nil, func(v *View) { out.Sessions = append(out.Sessions, *v) })
	if err != nil {
		return ListResult{}, err
	}
	out.Census = info
	if out.Sessions == nil {
		out.Sessions = []View{}
	}
	return out, nil
}

// listScratch is what a list reuses from one call to the next (AppendListJSON
// keeps one): the snapshot's buffer, and its tmux ids (true: listed without
// tags, see staleTags).
type listScratch struct {
	snap     []census.Session
	ids      map[string]bool
	stopping []fence.Published // stopping generations whose session the list does not show
}

// listHead is what a list learns before its sessions: the census's description,
// and the snapshot's version and whether the census was found behind the fence.
type listHead struct {
	info   CensusInfo
	seq    uint64
	synced bool
	server tmuxctl.ServerInfo
	behind bool
}

// listViews calls begin (when not nil) with the census's description, then fn
// with the View of every session of the census's snapshot, in tmux id order,
// then with the stoppingView of every stopping generation whose session the
// snapshot does not list (killed by hand, the server's death: the generation
// holds its identity until its processes are proven gone, so `ls` shows it as
// `show` does), by session name, and returns the description. Both parts come
// from the census's snapshot and the fence's in-memory identities, the two
// versions AppendListJSON keys its whole answer by. View pointers are valid
// during the call only.
func (m *Manager) listViews(ctx context.Context, sc *listScratch, begin func(listHead), fn func(v *View)) (CensusInfo, error) {
	snap := m.census.SnapshotShared(sc.snap)
	byTmux, behind, err := m.liveInLife(ctx, snap, sc)
	wasBehind := behind
	if err == nil && behind && m.census.Refresh(ctx) == nil {
		// A session published a moment ago may not be listed yet: a create
		// followed by ls must show it.
		snap = m.census.SnapshotShared(snap.Sessions)
		byTmux, _, err = m.liveInLife(ctx, snap, sc)
	}
	sc.snap = snap.Sessions
	if err != nil {
		return CensusInfo{}, verdict.Errorf(verdict.CodeFenceUnavailable, nil, "%w", err)
	}
	info := CensusInfo{Synced: snap.Synced, ServerPID: snap.Info.PID, TmuxVersion: snap.Info.Version}
	if snap.Info.StartTime != 0 {
		info.ServerStartedAt = time.Unix(snap.Info.StartTime, 0).UTC()
	}
	if begin != nil {
		begin(listHead{info: info, seq: snap.Seq, synced: snap.Synced, server: snap.Info, behind: wasBehind})
	}
	v := new(View) // one for the whole list: fn must not keep it
	for i := range snap.Sessions {
		if isStandby(&snap.Sessions[i]) {
			continue // the warm pool's, not a session of anyone's
		}
		var err error
		var hidden bool
		if *v, hidden, err = m.listView(ctx, &snap.Sessions[i], byTmux); err != nil {
			return CensusInfo{}, verdict.Errorf(verdict.CodeFenceUnavailable, nil, "%w", err)
		}
		if !hidden {
			fn(v)
		}
	}
	for i := range sc.stopping {
		*v = stoppingView(sc.stopping[i])
		v.Host = m.host.Name
		fn(v)
	}
	return info, nil
}

// listView is one session's View in a list: joined with its identity's
// published record by its tag, or by its tmux id when its tags are stale.
// hidden: the session is a create's of this daemon, tagged and not published
// yet — not its identity's session until the fence says so, and, listed,
// a managed session with no identity and no state.
func (m *Manager) listView(ctx context.Context, s *census.Session, byTmux map[string]fence.Published) (v View, hidden bool, err error) {
	if d := s.Identity(); d != "" {
		p, ok, err := m.fence.CachedPublished(ctx, d)
		if err != nil || ok {
			return m.viewOf(s, &p), false, err
		}
		if m.inFlightSession(d, s.Name) {
			return View{}, true, nil
		}
	} else if p, ok := byTmux[s.ID]; ok {
		v := strippedView(s, p)
		v.Host = m.host.Name
		return v, false, nil
	}
	return m.viewOf(s, nil), false, nil
}

// inFlightSession reports whether name is the attempt name of a create of
// identity digest that is in flight here (between its reservation and its
// verdict): attempt names end with the reservation id (attemptName).
func (m *Manager) inFlightSession(digest, name string) bool {
	prefix := attemptName(digest, "")
	if !strings.HasPrefix(name, prefix) {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.inflight[name[len(prefix):]]
	return ok
}

// liveInLife reports whether a published, not-ended generation of the census's
// server life is missing from snap, and returns those of them that live in a
// session of snap listed without tags (staleTags), by tmux id. It collects in
// sc.stopping, by session name, the stopping generations whose session snap
// does not list (in its server life), synced or not: after the server's death
// the census may be unsynced, and those are the generations still stopping.
func (m *Manager) liveInLife(ctx context.Context, snap census.Snapshot, sc *listScratch) (map[string]fence.Published, bool, error) {
	if sc.ids == nil {
		sc.ids = make(map[string]bool, len(snap.Sessions))
	}
	clear(sc.ids)
	for i := range snap.Sessions {
		s := &snap.Sessions[i]
		sc.ids[s.ID] = s.Identity() == "" // listed before its tags, or its identity tag removed by hand
	}
	var byTmux map[string]fence.Published
	behind := false
	sc.stopping = sc.stopping[:0]
	err := m.fence.CachedLiveEach(ctx, func(p *fence.Published) {
		inLife := p.ServerPID == snap.Info.PID && p.ServerStart == snap.Info.StartTime
		stale, listed := sc.ids[p.TmuxID]
		listed = listed && inLife
		if p.Stopping != nil && !listed {
			sc.stopping = append(sc.stopping, *p)
		}
		if !snap.Synced || !inLife {
			return
		}
		// A stopping generation missing from snap is listed from its record
		// (its session is gone, or going): no reason to re-list tmux.
		behind = behind || (!listed && p.Stopping == nil)
		if stale {
			if byTmux == nil {
				byTmux = map[string]fence.Published{}
			}
			byTmux[p.TmuxID] = *p
		}
	})
	sc.stopping, byTmux = m.waitingUnlisted(ctx, snap, sc.ids, sc.stopping, byTmux)
	slices.SortFunc(sc.stopping, func(a, b fence.Published) int { return strings.Compare(a.SessionName, b.SessionName) })
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
		PanePID: s.PanePID, PaneDead: s.PaneDead, Attached: s.Attached, CreatedAt: createdAt(s, p),
		State: stateOf(p, s.PaneDead), StopTimeoutMS: p.StopTimeoutMS,
		ActivityAt: activityAt(s, createdAt(s, p), s.PaneDead || restartedInSession(createdAt(s, p), p)),
		Restart:    restartPolicy(p), Restarts: p.Restart.Restarts}
}

// strippedView is the View of session s, listed without an @skc-identity
// tag, as the published generation p that lives in it (p's tmux id in the
// census's server life: ids are never reused within one). Listed with no
// @skc-* tag at all, it is publishedView (the census has not read the tags
// the saga set yet); with others but not the identity's, that tag was removed
// by hand: the $id and the record still name the generation (the contract),
// but the session does not carry it exactly, so it is not authoritative — as
// a create of the identity, refused identity_orphan_unresolved, says.
func strippedView(s *census.Session, p fence.Published) View {
	v := publishedView(s, p)
	if !staleTags(s) {
		v.Authoritative = false
	}
	if waiting(&p) {
		restartFields(&v, p) // a kept session waiting for the next start
	}
	return v
}

// keptStripped: t's session is the session kept for the next start of its
// ended generation (its tmux id in the census's server life), listed
// without its identity tag.
func (m *Manager) keptStripped(t Target) bool {
	return t.Published != nil && waiting(t.Published) && t.Published.TmuxID == t.Session.ID && m.inCensusLife(*t.Published)
}

// inCensusLife: p was published in the server life the census lists, by
// this host.
func (m *Manager) inCensusLife(p fence.Published) bool {
	life, ok := m.serverLife()
	return ok && !m.remote(&p) && p.ServerPID == life.PID && p.ServerStart == life.StartTime
}

func restartPolicy(p fence.Published) string {
	if p.Spec.Restart == "" {
		return fence.RestartNever
	}
	return p.Spec.Restart
}

// stoppingView is the View of a stopping generation whose session is gone —
// or of an ended one waiting out its restart delay after its session went
// with its server (state exited or starting, with its next start).
func stoppingView(p fence.Published) View {
	v := View{Name: p.SessionName, ID: p.TmuxID, Managed: true,
		StateDir: p.Identity.StateDir, SessionID: p.Identity.SessionID,
		StateFile: p.StateFile, Label: p.Label, Generation: p.Generation, Authoritative: !p.Ended,
		PanePID: p.PanePID, PaneDead: true, CreatedAt: p.PublishedAt.UTC(),
		State: StateStopping, StopTimeoutMS: p.StopTimeoutMS}
	if p.Ended {
		v.State = stateOf(p, true)
	}
	restartFields(&v, p)
	return v
}

// waiting: p ended and its next start is due or under way (restart policy).
func waiting(p *fence.Published) bool {
	return p.Ended && p.Restart.State == fence.RestartExited
}

// waitingGenerations are the ended generations of the identities whose
// restart is pending (a restarter runs for each: few).
func (m *Manager) waitingGenerations(ctx context.Context) []fence.Published {
	m.mu.Lock()
	digests := make([]string, 0, len(m.restarters))
	for d := range m.restarters {
		digests = append(digests, d)
	}
	m.mu.Unlock()
	var out []fence.Published
	for _, d := range digests {
		if p, ok, err := m.fence.CachedPublished(ctx, d); err == nil && ok && waiting(&p) {
			out = append(out, p)
		}
	}
	return out
}

// waitingUnlisted appends to out the waiting generations (waitingGenerations)
// whose session no list of this server life shows — it went with its
// server: they still hold their identity, and `ls` shows them until the next
// generation starts. A waiting generation whose kept session is listed
// without its identity tag (removed by hand) goes to byTmux instead, to be
// shown as that generation's (strippedView), as a running one is.
func (m *Manager) waitingUnlisted(ctx context.Context, snap census.Snapshot, ids map[string]bool, out []fence.Published,
	byTmux map[string]fence.Published) ([]fence.Published, map[string]fence.Published) {
	for _, p := range m.waitingGenerations(ctx) {
		stripped, listed := ids[p.TmuxID]
		switch {
		case !listed || p.ServerPID != snap.Info.PID || p.ServerStart != snap.Info.StartTime:
			out = append(out, p)
		case stripped:
			if byTmux == nil {
				byTmux = map[string]fence.Published{}
			}
			byTmux[p.TmuxID] = p
		}
	}
	return out, byTmux
}

// Show returns one session with its reservation row and verdicts. The fence's
// part comes through its read cache (fence.CachedIdentityReads), which is as
// fresh as a direct read: see AppendShowJSON. Session is nil when ref names an
// identity whose session is gone: its history is still answered. A session
// that is not supervised has no reservation and no verdicts.
func (m *Manager) Show(ctx context.Context, ref Ref) (ShowResult, error) {
	v, reads, unread, err := m.showParts(ctx, ref)
	if err != nil {
		return ShowResult{Verdicts: []verdict.Record{}}, err
	}
	out := ShowResult{Session: v, Reservation: reads.Reservation, FenceUnavailable: unread}
	if out.Verdicts, err = reads.Verdicts(); err != nil {
		return ShowResult{Verdicts: []verdict.Record{}}, verdict.Errorf(verdict.CodeFenceUnavailable, nil, "%w", err)
	}
	return out, nil
}

// showParts resolves ref (Resolve) and reads what Show answers: the session's
// View (nil when there is none) and the fence's reads of its identity (empty
// for a session without one).
//
// A generation that is stopping after its session went (killed by hand, the
// server's death) has no session to list, but is shown — state "stopping",
// from its published record — until its processes are proven gone: it is
// what holds the identity.
//
// unread: the fence is unavailable and had never been read for this
// identity; a session of this host is still shown, from the census (the
// contract: `show` of this host's sessions answers while the database is
// away), with no reservation and no verdicts.
func (m *Manager) showParts(ctx context.Context, ref Ref) (v *View, reads fence.IdentityReads, unread bool, err error) {
	t, err := m.Resolve(ctx, ref)
	if err != nil {
		return nil, fence.IdentityReads{}, false, err
	}
	switch {
	case t.Session != nil && t.Session.Identity() == "" && (t.Live || m.keptStripped(t)):
		v = new(View)
		*v = strippedView(t.Session, *t.Published) // published in it: tags not listed yet, or removed by hand
	case t.Session != nil:
		v = new(View)
		*v = m.viewOf(t.Session, t.Published) // as `ls` shows it
	case t.Remote:
		v = new(View)
		*v = remoteView(*t.Published)
	case t.Published != nil && (t.Published.Stopping != nil && !t.Published.Ended || waiting(t.Published)):
		v = new(View)
		*v = stoppingView(*t.Published)
	}
	switch {
	case v == nil || t.Remote:
	case t.Session == nil && t.Published != nil && m.remote(t.Published):
		// Another host's generation between two starts (its session kept on
		// that host): that host's, with how to reach it, never this one's.
		v.Host, v.AttachHint = t.Published.Host, attachHint(*t.Published)
	default:
		v.Host = m.host.Name
	}
	none := fence.IdentityReads{ReservationJSON: []byte("null"), VerdictsJSON: []byte("[]")}
	if t.Identity == nil {
		return v, none, false, nil
	}
	reads, err = m.fence.CachedIdentityReads(ctx, *t.Identity, showVerdicts)
	if err != nil {
		if v != nil && !t.Remote && t.Session != nil && verdict.CodeOf(err) == verdict.CodeFenceUnavailable {
			return v, none, true, nil
		}
		return nil, fence.IdentityReads{}, false, verdict.Errorf(verdict.CodeFenceUnavailable, nil, "%w", err)
	}
	return v, reads, false, nil
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
	since := sinceOf(s)
	v := View{Name: s.Name, ID: s.ID, Managed: s.Managed, PanePID: s.PanePID,
		PaneDead: s.PaneDead, Attached: s.Attached, CreatedAt: since, ActivityAt: activityAt(s, since, s.PaneDead),
		Host: m.host.Name}
	if !s.Managed {
		return v
	}
	if pub == nil {
		// Tagged, with no record here (a forgotten host's leftover, an
		// orphan before recovery): its tags still say which generation.
		v.Generation = generationTag(s)
		return v
	}
	v.StateDir, v.SessionID = pub.Identity.StateDir, pub.Identity.SessionID
	v.StateFile, v.Label = pub.StateFile, pub.Label
	v.Generation = generationTag(s)
	v.Authoritative = !pub.Ended && pub.TmuxID == s.ID && pub.Generation == v.Generation
	switch {
	case v.Authoritative:
		dead := s.PaneDead
		if pub.PanePID > 0 && s.PanePID != pub.PanePID {
			// The census lists the active pane, a person's (agentpane.go):
			// the session's pane is the agent's, and its exit starts the
			// stop at once (the state says stopping then).
			v.PanePID, v.PaneDead, dead = pub.PanePID, false, false
		}
		v.State, v.StopTimeoutMS = stateOf(*pub, dead), pub.StopTimeoutMS
		v.CreatedAt = createdAt(s, *pub)
		v.ActivityAt = activityAt(s, v.CreatedAt, dead || restartedInSession(v.CreatedAt, *pub))
		restartFields(&v, *pub)
	case !pub.Ended && pub.TmuxID == s.ID && pub.Generation > v.Generation && m.inCensusLife(*pub):
		// The next generation was published in this session a moment ago
		// and the census has not re-read its tags yet — nor its respawned
		// pane, still dead in its picture: the fence's record says both.
		v = publishedView(s, *pub)
		v.PanePID, v.PaneDead, v.State = pub.PanePID, false, stateOf(*pub, false)
		v.Host = m.host.Name
	case pub.Ended && pub.TmuxID == s.ID && pub.Generation == v.Generation:
		// Between two generations: the session kept for the next start.
		v.State = stateOf(*pub, s.PaneDead)
		restartFields(&v, *pub)
	case pub.Ended && pub.TmuxID == s.ID && v.Generation > pub.Generation && pub.Restart.State == fence.RestartExited:
		// The next generation is being started in the kept session: tagged,
		// not published yet.
		v.State = StateStarting
		restartFields(&v, *pub)
	}
	return v
}

// attemptView is the View of a session this Manager just published: the census
// may not have listed it yet.
func (m *Manager) attemptView(a *attempt, pub fence.Published) View {
	s := m.createdSession(a)
	return View{
		Name: a.name, ID: a.tmuxID, Managed: true,
		StateDir: a.req.Identity.StateDir, SessionID: a.req.Identity.SessionID,
		StateFile: pub.StateFile, Generation: a.res.Generation, Authoritative: true,
		Label: pub.Label, PanePID: a.panePID, CreatedAt: createdAt(&s, pub),
		State: StateRunning, StopTimeoutMS: pub.StopTimeoutMS,
		Restart: restartPolicy(pub), Restarts: pub.Restart.Restarts, Host: m.host.Name,
	}
}

// createdAt is a published generation's created_at: when its session became
// the identity's, its @skc-since (sinceOf). A session tagged before there
// was @skc-since (or listed before its tags) falls back to tmux's
// session_created — but a warm pool's standby was made before anyone asked
// for it, so a session first used by this generation (no restart since the
// create) is then dated by the publication when that is later.
func createdAt(s *census.Session, p fence.Published) time.Time {
	if _, ok := s.Tags[TagSince]; !ok && p.Restart.Restarts == 0 && p.PublishedAt.After(s.Created) {
		return p.PublishedAt.UTC()
	}
	return sinceOf(s)
}

// sinceOf is when session s became its identity's: its @skc-since, else
// tmux's session_created (a session of no identity, or tagged before
// @skc-since existed). A tag that is no number, or one before the
// session's creation second, is a hand edit and not believed.
func sinceOf(s *census.Session) time.Time {
	if n, err := strconv.ParseInt(s.Tags[TagSince], 10, 64); err == nil {
		if t := time.Unix(0, n); !t.Before(s.Created.Truncate(time.Second)) {
			return t.UTC()
		}
	}
	return s.Created.UTC()
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
