package lifecycle

import (
	"context"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// An end whose verdict the fence could not take (PostgreSQL restarting, a
// full disk) is assembled once: its exit, the output tail read before its
// session was removed, whether the stop sent SIGKILL, its proof. The retry
// that files it later (endretry.go) finds the session gone and the agent's
// process reaped, and rebuilt from what is left it said sigkill_sent false,
// with no exit and no tail, after the daemon itself had SIGKILLed the agent
// (found outside-in). So the assembled end is kept until it is filed, and the
// retry files it as it was.

// unfiledKey names one generation of one identity.
type unfiledKey struct {
	digest string
	gen    uint64
}

// unfiledEnd is what fileEnd was given for a generation when MarkEnded failed.
type unfiledEnd struct {
	rec    verdict.Record
	next   fence.RestartNext
	gaveUp *verdict.Record
	keep   bool
}

func unfiledKeyOf(p fence.Published) unfiledKey {
	return unfiledKey{digest: p.Identity.Digest(), gen: p.Generation}
}

// keepUnfiled remembers an end the fence refused to file.
func (m *Manager) keepUnfiled(p fence.Published, e unfiledEnd) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unfiled == nil {
		m.unfiled = map[unfiledKey]unfiledEnd{}
	}
	m.unfiled[unfiledKeyOf(p)] = e
}

// takeUnfiled returns (and forgets) the end kept for p's generation, if any.
func (m *Manager) takeUnfiled(p fence.Published) (unfiledEnd, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.unfiled[unfiledKeyOf(p)]
	delete(m.unfiled, unfiledKeyOf(p))
	return e, ok
}

// fileUnfiled files the end kept for p's generation, as it was assembled;
// ok false when none is kept.
func (m *Manager) fileUnfiled(ctx context.Context, p fence.Published) (verdict.Record, bool, error) {
	e, ok := m.takeUnfiled(p)
	if !ok {
		return verdict.Record{}, false, nil
	}
	rec, err := m.fileEnd(ctx, p, e.rec, e.next, e.gaveUp, e.keep)
	return rec, true, err
}
