package lifecycle

import (
	"time"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// A kill mark tells end detection that a session's removal is ours (and
// why), so that the census's Removed change for it is not taken for a kill
// by hand. The change reaches end detection through the census's stream, in
// its own goroutine: it may be handled after the remover has confirmed the
// session gone and gone on — a restart request may by then have made the
// identity wait for its next start again, and a mark dropped at the
// confirmation let that late change stop the identity as "kept session
// killed by hand" (tmux_session_missing), leaving the request waiting for a
// start that never came. So a mark of a removal confirmed stays until end
// detection has seen the removal (seenRemoved), or killMarkLinger has passed
// (a change lost to a resync); tmux never reuses a session id in a server's
// life, so a mark that lingers cannot be mistaken for another session's.
type killMark struct {
	killReason
	gone time.Time // when the removal was confirmed; zero while it is under way
	seen bool      // end detection handled the removal while it was under way
}

// killKey names a session in one server life: a new server numbers its
// sessions from $0 again, and a mark that lingers must not claim them.
type killKey struct {
	pid   int
	start int64
	id    string
}

func keyOf(life tmuxctl.ServerLife, id string) killKey {
	return killKey{pid: life.PID, start: life.StartTime, id: id}
}

const (
	killMarkLinger = time.Minute
	killSweepEvery = 10 * time.Second
)

func (m *Manager) markKilling(life tmuxctl.ServerLife, tmuxID string, k killReason) {
	m.mu.Lock()
	m.killing[keyOf(life, tmuxID)] = killMark{killReason: k}
	m.mu.Unlock()
}

func (m *Manager) killingReason(life tmuxctl.ServerLife, tmuxID string) (killReason, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.killing[keyOf(life, tmuxID)]
	return k.killReason, ok
}

// doneKilling ends our removal of a session: confirmed gone, its mark stays
// for end detection to see (seenRemoved) unless it has seen it already; else
// (the kill failed, or was not confirmed) the mark goes now, so that a later
// removal is not taken for ours.
func (m *Manager) doneKilling(life tmuxctl.ServerLife, tmuxID string, gone bool) {
	now := time.Now()
	key := keyOf(life, tmuxID)
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := m.killing[key]; ok && gone && !k.seen {
		k.gone = now
		m.killing[key] = k
	} else {
		delete(m.killing, key)
	}
	if now.Sub(m.killSwept) < killSweepEvery {
		return
	}
	m.killSwept = now
	for key, k := range m.killing {
		if !k.gone.IsZero() && now.Sub(k.gone) > killMarkLinger {
			delete(m.killing, key)
		}
	}
}

// seenRemoved is end detection having handled the census's removal of the
// session: a mark of a removal confirmed has served; one under way serves
// until doneKilling.
func (m *Manager) seenRemoved(life tmuxctl.ServerLife, tmuxID string) {
	key := keyOf(life, tmuxID)
	m.mu.Lock()
	defer m.mu.Unlock()
	switch k, ok := m.killing[key]; {
	case ok && !k.gone.IsZero():
		delete(m.killing, key)
	case ok:
		k.seen = true
		m.killing[key] = k
	}
}
