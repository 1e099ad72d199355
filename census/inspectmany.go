package census

import (
	"context"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// Judgement is InspectMany's answer for one piece of evidence: what Inspect
// would have answered for it.
type Judgement struct {
	Authority Authority
	Session   *Session
	Err       error
}

// InspectMany is Inspect for many pieces of evidence at once, judged on one
// fresh read of live tmux: one list of the server, then the exact tags of
// every session any of them could point at. A daemon's start inspects every
// published generation; one Inspect each listed the whole server each time,
// and at 1,200 sessions the start took two minutes, most of it tmux's
// (systemd's start timeout is 90 s). The answers are as fresh as Inspect's:
// the read is taken after the call.
func (c *Census) InspectMany(ctx context.Context, evs []Evidence) []Judgement {
	out := make([]Judgement, len(evs))
	c.mu.RLock()
	synced, info := c.synced, c.info
	c.mu.RUnlock()
	var todo []int // the evidence to look for in tmux
	for i, ev := range evs {
		switch err := checkEvidence(ev); {
		case err != nil:
			out[i] = judgement(unknown(UnknownBadEvidence, err.Error(), nil))
		case !synced:
			out[i] = judgement(unknown(UnknownUnsynced, "the census is not synced", nil))
		case ev.Life != (tmuxctl.ServerLife{}) && ev.Life != info.ServerLife:
			out[i] = judgement(unknown(UnknownLifeMismatch, "the evidence was recorded in another server life", nil))
		default:
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return out
	}
	idx := indexEvidence(evs, todo)
	found, err := c.freshCandidates(ctx, info.ServerLife, idx)
	for _, i := range todo {
		if err != nil {
			out[i] = judgement(unknown(UnknownTmux, "fresh read of tmux failed", err))
			continue
		}
		out[i] = judgement(judge(evs[i], found[i]))
	}
	return out
}

func judgement(a Authority, s *Session, err error) Judgement {
	return Judgement{Authority: a, Session: s, Err: err}
}

// evidenceIndex finds the evidence a session (or a listed row) may carry:
// by the recorded id (with its life), the attempt name, the identity digest.
type evidenceIndex struct {
	evs                  []Evidence
	byID, byName, byHash map[string][]int
}

func indexEvidence(evs []Evidence, todo []int) *evidenceIndex {
	x := &evidenceIndex{evs: evs, byID: map[string][]int{}, byName: map[string][]int{}, byHash: map[string][]int{}}
	for _, i := range todo {
		ev := evs[i]
		if ev.TmuxID != "" && ev.Life != (tmuxctl.ServerLife{}) {
			x.byID[ev.TmuxID] = append(x.byID[ev.TmuxID], i)
		}
		if ev.AttemptName != "" {
			x.byName[ev.AttemptName] = append(x.byName[ev.AttemptName], i)
		}
		if ev.IdentityDigest != "" {
			x.byHash[ev.IdentityDigest] = append(x.byHash[ev.IdentityDigest], i)
		}
	}
	return x
}

// of calls fn once for each piece of evidence that id, name or digest
// match.
func (x *evidenceIndex) of(id, name, digest string, fn func(i int)) {
	seen := map[int]bool{}
	for _, l := range [][]int{x.byID[id], x.byName[name], x.byHash[digest]} {
		for _, i := range l {
			if !seen[i] {
				seen[i] = true
				fn(i)
			}
		}
	}
}

// freshCandidates lists live sessions and reads exactly the tags of every
// session that could carry any of the evidence: the ones with a recorded
// id, a name or a listed identity it names, and any whose listed tags
// cannot be trusted (shadowed, malformed, or not as the census knows them).
// found[i] are the sessions that carry evidence i.
func (c *Census) freshCandidates(ctx context.Context, life tmuxctl.ServerLife, x *evidenceIndex) (map[int][]Session, error) {
	rows, g, _, err := c.readList(ctx, life, true)
	if err != nil {
		return nil, err
	}
	var todo []int
	for i, r := range rows {
		match := false
		x.of(r.s.ID, r.s.Name, r.list[1], func(int) { match = true })
		if match || needExact(r, r.prev, g) {
			todo = append(todo, i)
		}
	}
	out := make([]*entry, len(rows))
	if err := c.readExact(ctx, life, rows, todo, out); err != nil {
		return nil, err
	}
	found := map[int][]Session{}
	stale := false
	c.mu.RLock()
	for _, k := range todo {
		e := out[k]
		if p := c.sessions[rows[k].s.ID]; e == nil || p == nil || !sameSession(p.s, e.s) {
			stale = true
		}
		if e == nil || e.control {
			continue
		}
		x.of(e.s.ID, e.s.Name, e.s.Tags[TagIdentity], func(i int) {
			if matchesSession(x.evs[i], e.s) {
				found[i] = append(found[i], e.s.clone())
			}
		})
	}
	c.mu.RUnlock()
	if stale { // the cache is behind live tmux: ask Run for a re-list
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	return found, nil
}
