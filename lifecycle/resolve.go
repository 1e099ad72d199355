package lifecycle

import (
	"context"
	"strings"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Ref names a session: by a name (its tmux id, current name, or the name it was
// published under: see Resolve), or by identity. Exactly one is set.
type Ref struct {
	Name     string
	Identity *fence.Identity
}

// Target is what a Ref names (Resolve): a session on the supervised server, the
// identity whose generation lives in it, or both — or, for an identity whose
// session is gone, the identity alone (its history stays readable).
type Target struct {
	// Session is the live session; nil when the Ref named an identity that has
	// no live session.
	Session *census.Session
	// Identity is the identity Session belongs to, or the one the Ref named;
	// nil for a session that is not supervised (managed: false, or tags of a
	// generation this daemon never published).
	Identity *fence.Identity
	// Published is the identity's published record: the generation living in
	// Session when Live, otherwise its last record (possibly ended); nil when the
	// identity was never published.
	Published *fence.Published
	// Live: Published is the not-ended generation of this server life, and
	// Session is its session. Only a Live target can be killed (or, later,
	// restarted, written to, …).
	Live bool
	// Remote: Published is a not-ended generation that another host of the
	// fleet runs (Session nil). It can be shown (remoteView) but not acted
	// on here: remote_session.
	Remote bool
}

// Resolve finds what ref names. It is the ONE place where a session reference of
// the CLI or the API (`show`, `kill`, `attach`, GET/DELETE /v1/sessions/{name} and
// every per-session endpoint) becomes a session; no caller matches names itself.
//
// A name is, in this order: a tmux id (`$14`, exact); the session's current name
// (exact, never tmux's prefix matching — so a session renamed by hand is reached
// by the name `ls` shows); the name this daemon gave it when it published it
// (so scripts that kept the name still reach a renamed session). An identity is
// looked up in the fence. The census is refreshed once when a name is not found,
// since a session created or renamed a moment ago may not be listed yet.
//
// Errors: not_found when nothing matches (an identity with no record, no
// reservation and no verdicts is nothing), tmux_unavailable while the census is
// not synced, fence_unavailable.
func (m *Manager) Resolve(ctx context.Context, ref Ref) (Target, error) {
	if !m.census.Synced() {
		return Target{}, unavailable(errNotSynced)
	}
	if ref.Identity != nil {
		return m.resolveIdentity(ctx, *ref.Identity)
	}
	for i := 0; i < 2; i++ {
		t, ok, err := m.resolveName(ctx, ref.Name)
		if err != nil || ok {
			return t, err
		}
		if i == 0 {
			if err := m.census.Refresh(ctx); err != nil {
				return Target{}, unavailable(err)
			}
		}
	}
	return m.resolveRemote(ctx, ref.Name)
}

// notSupervised is not_found for a live session ref names that is not a
// running generation of this daemon's (made by hand, or an identity's tags
// copied onto it): every verb that acts on a generation says it so.
func notSupervised(s census.Session) error {
	return verdict.Errorf(verdict.CodeNotFound, map[string]any{"name": s.Name, "id": s.ID, "managed": false},
		"session %q (%s) is not a running generation supervised by this daemon; end it with tmux itself if you mean to",
		s.Name, s.ID)
}

func notFoundName(name string) error {
	return verdict.Errorf(verdict.CodeNotFound, map[string]any{"name": name}, "no session named %q (nor with that id)", name)
}

// resolveName is one look for a name (see Resolve): false when nothing matches.
func (m *Manager) resolveName(ctx context.Context, name string) (Target, bool, error) {
	var s census.Session
	found := false
	if strings.HasPrefix(name, "$") {
		s, found = m.census.ByID(name)
	}
	if !found {
		s, found = m.census.ByName(name)
	}
	if !found {
		p, ok, err := m.fence.CachedPublishedByName(ctx, name)
		if err != nil {
			return Target{}, false, fenceError(err)
		}
		if ok && m.inThisLife(&p) {
			s, found = m.census.ByID(p.TmuxID)
		}
		if !found && ok && !p.Ended && p.Stopping != nil {
			// Its session is gone but its processes are not yet proven
			// gone: the stopping generation is what the name still names.
			return Target{Identity: &p.Identity, Published: &p}, true, nil
		}
		if !found && !ok {
			// Or an ended generation whose restart is pending, its session
			// gone with its server.
			for _, w := range m.waitingGenerations(ctx) {
				if w.SessionName == name {
					return Target{Identity: &w.Identity, Published: &w}, true, nil
				}
			}
		}
		if !found && !ok {
			if p, one := m.goneNamed(ctx, name); one {
				return Target{Identity: &p.Identity, Published: &p}, true, nil
			}
		}
	}
	if !found || isStandby(&s) {
		return Target{}, false, nil
	}
	t, err := m.targetOf(ctx, s)
	return t, true, err
}

// goneNamed is the one generation `ls` lists from its record with the tmux
// id name — stopping with its session gone, or waiting for its next start
// with its kept session gone — when name is an id no live session has (a
// live session always wins its id) and exactly one such generation has it
// (ids are a server life's: two lives may have left one each, and then the
// id names neither).
func (m *Manager) goneNamed(ctx context.Context, name string) (fence.Published, bool) {
	if !strings.HasPrefix(name, "$") {
		return fence.Published{}, false
	}
	if _, live := m.census.ByID(name); live {
		return fence.Published{}, false
	}
	id := name
	var hits []fence.Published
	_ = m.fence.CachedLiveEach(ctx, func(p *fence.Published) {
		if p.Stopping != nil && p.TmuxID == id {
			hits = append(hits, *p)
		}
	})
	for _, w := range m.waitingGenerations(ctx) {
		if w.TmuxID == id {
			hits = append(hits, w)
		}
	}
	if len(hits) != 1 {
		return fence.Published{}, false
	}
	return hits[0], true
}

// targetOf joins a listed session with the identity it carries: the generation
// published in it (Live), or the identity's record when its tags name one
// (not Live: a generation that ended, or tags edited by hand). A session listed
// before its tags were set is joined by the name and tmux id it was published
// under, as List does (staleTags).
func (m *Manager) targetOf(ctx context.Context, s census.Session) (Target, error) {
	t := Target{Session: &s}
	var p fence.Published
	var ok bool
	var err error
	if d := s.Identity(); d != "" {
		p, ok, err = m.fence.CachedPublished(ctx, d)
	} else if r := s.Tags[census.TagReservation]; r != "" {
		// Its identity tag removed by hand: the reservation tag still names
		// the generation published in this very session.
		p, ok, err = m.fence.PublishedByReservation(ctx, r)
		ok = ok && p.TmuxID == s.ID
	} else if staleTags(&s) {
		p, ok, err = m.fence.CachedPublishedByName(ctx, s.Name)
		ok = ok && p.TmuxID == s.ID
	}
	if err != nil {
		return Target{}, fenceError(err)
	}
	if !ok {
		return t, nil
	}
	t.Identity, t.Published = &p.Identity, &p
	t.Live = !p.Ended && p.TmuxID == s.ID && m.inThisLife(&p)
	return t, nil
}

// resolveIdentity finds an identity's live session, or else its history.
func (m *Manager) resolveIdentity(ctx context.Context, id fence.Identity) (Target, error) {
	if c, err := fence.CanonicalIdentity(id); err == nil {
		id = c
	}
	p, ok, err := m.fence.PublishedFor(ctx, id)
	if err != nil && verdict.CodeOf(err) == verdict.CodeFenceUnavailable {
		// The database is away: this host's identities are answered from
		// what the fence last read of them (its cache), as names are.
		p, ok, err = m.cachedPublished(ctx, id, err)
	}
	if err != nil {
		return Target{}, fenceError(err)
	}
	t := Target{Identity: &id}
	if !ok {
		return t, m.requireHistory(ctx, id)
	}
	t.Identity, t.Published = &p.Identity, &p
	if !p.Ended && m.remote(&p) && !m.inThisLife(&p) {
		t.Remote = true
		return t, nil
	}
	if !m.inThisLife(&p) {
		return t, nil
	}
	if p.Ended {
		// Between two generations its session may be kept for the next
		// start (a dead pane): the identity names it as its name does.
		if s, found := m.census.ByID(p.TmuxID); found && s.Identity() == p.Identity.Digest() {
			t.Session = &s
		}
		return t, nil
	}
	for i := 0; i < 2; i++ {
		// A session listed before its tags were set (staleTags), or whose
		// identity tag was removed by hand, is ours too: the fence records
		// this tmux id in this server life, and ids are never reused within
		// a life. One whose tag names another identity is not.
		if s, found := m.census.ByID(p.TmuxID); found && (s.Identity() == p.Identity.Digest() || s.Identity() == "") {
			t.Session, t.Live = &s, true
			return t, nil
		}
		if i == 0 {
			if err := m.census.Refresh(ctx); err != nil {
				return Target{}, unavailable(err)
			}
		}
	}
	return t, nil
}

// cachedPublished is this host's published record of id from the fence's
// cache, when the fence could not be read (cause); cause itself when the cache
// holds nothing of id either (another host's identity, or none), so an
// unreadable fence is never taken for an unknown identity.
func (m *Manager) cachedPublished(ctx context.Context, id fence.Identity, cause error) (fence.Published, bool, error) {
	p, ok, err := m.fence.CachedPublished(ctx, id.Digest())
	if err != nil || !ok {
		return fence.Published{}, false, cause
	}
	return p, true, nil
}

// requireHistory is not_found unless the fence holds something of id: its
// reservation row or a verdict (a create refused before it was ever published,
// e.g. spawn_failed, leaves only a verdict).
func (m *Manager) requireHistory(ctx context.Context, id fence.Identity) error {
	reads, err := m.fence.CachedIdentityReads(ctx, id, showVerdicts)
	if err != nil {
		return fenceError(err)
	}
	if reads.Reservation == nil && string(reads.VerdictsJSON) == "[]" {
		return verdict.Errorf(verdict.CodeNotFound, map[string]any{"state_dir": id.StateDir, "session_id": id.SessionID},
			"no session, reservation or verdict of identity %s %s", id.StateDir, id.SessionID)
	}
	return nil
}

// inThisLife: p was published on the server the census watches now.
func (m *Manager) inThisLife(p *fence.Published) bool {
	info, _ := m.census.Info()
	return info.PID == p.ServerPID && info.StartTime == p.ServerStart
}

// resolve is Resolve for verbs that act on a running generation (kill): the
// published, not-ended generation ref names and its live session, or
// remote_session for another host's, or not_found —
// with a message that says why when ref names something that cannot be acted on.
func (m *Manager) resolve(ctx context.Context, ref Ref) (fence.Published, census.Session, error) {
	t, err := m.Resolve(ctx, ref)
	if err != nil {
		return fence.Published{}, census.Session{}, err
	}
	if t.Remote {
		return fence.Published{}, census.Session{}, remoteSession(*t.Published)
	}
	if t.Live {
		return *t.Published, *t.Session, nil
	}
	if t.Session != nil {
		return fence.Published{}, census.Session{}, notSupervised(*t.Session)
	}
	return fence.Published{}, census.Session{}, verdict.Errorf(verdict.CodeNotFound,
		map[string]any{"state_dir": t.Identity.StateDir, "session_id": t.Identity.SessionID},
		"identity %s %s has no running session (show it by identity for its verdicts)",
		t.Identity.StateDir, t.Identity.SessionID)
}
