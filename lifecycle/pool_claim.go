package lifecycle

import (
	"context"
	"errors"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// The saga of a create served by a warm pool's standby (model/saga.pml,
// -DPOOL; docs/architecture.md, "The warm pool"). Everything a claim needs
// to know of its pane — tmux id, pane pid and start time, server life,
// incarnation, cgroup — is known before the claim, so it is recorded first,
// and the rest is two steps:
//
//  1. spawned, with the attempt name, the standby's evidence and its start
//     record: for an identity's first generation in the reservation's own
//     transaction (pool_preclaim.go), for a later one straight from
//     reserved in one transaction after leftoverOf. From here the row says
//     a child exists (Reserve sends a dead owner's row to recovery), and
//     recovery finds it by the attempt name or by the standby's tmux id in
//     its server life — an orphan either way until published, killed and
//     proven gone before the row is reclaimed.
//  2. rename-session and the five @skc-* tags, pipelined on the control
//     connection (one round trip; each names the session by its id, so
//     their order on the wire does not matter), while the hand-off file is
//     written beside them. The standby already carries remain-on-exit (set
//     when it was spawned: it is not identity-specific).
//  3. publish and release in one transaction (fence PublishRelease).
//
// Two fence transactions (reserve with the claim, publish) and one tmux
// round trip, instead of six and two. The standby is woken once published;
// if it reads its hand-off earlier (its own poll), it waits at the same gate
// as any pane helper: its generation published, and the fence naming its
// own pid as the pane.

// takeStandby takes a free standby of the current server life, if any.
func (m *Manager) takeStandby() (standby, bool) {
	life, ok := m.serverLife()
	if !ok {
		return standby{}, false
	}
	return m.pool.take(life)
}

// claimSaga runs the attempt a in the standby sb. A standby found gone at
// the rename (tmux refused every command: nothing was changed) is no loss:
// the attempt sends new-session under its own name and goes on as any
// create, its row already past helper_invoked.
func (m *Manager) claimSaga(ctx context.Context, a *attempt, sb standby) (CreateResult, error) {
	if a.preclaim == nil { // else the reservation recorded it (pool_preclaim.go)
		a.pooled = true
		if err := m.advance(ctx, a, fence.PhaseSpawned, spawnedPatch(a.name, sb)); err != nil {
			// Not the attempt's (or, if the write landed after all, an orphan
			// recovery finds absent): the next refill removes it, fence or not.
			m.pool.discard(sb)
			return CreateResult{}, err
		}
		a.bindStandby(sb) // the recorded session exists: undo kills it by id
	}
	m.fault.hitIn(a.restart != nil, FaultSpawned)
	err := m.renameAndTag(ctx, a, sb.cgroup)
	if errors.Is(err, errStandbyGone) {
		m.pool.dropHandoff(a.claimed)
		m.pool.forgetCgroup(a.sbCgroup)
		a.claimed, a.sbCgroup = "", ""
		if err := m.spawn(ctx, a); err != nil {
			return CreateResult{}, err
		}
		m.fault.hitIn(a.restart != nil, FaultNewSession)
		return m.afterSpawn(ctx, a)
	}
	if err != nil {
		return CreateResult{}, err
	}
	m.pool.served()
	m.fault.hitIn(a.restart != nil, FaultClaimed)
	if err := m.admitCreated(a); err != nil {
		return CreateResult{}, err
	}
	return m.publish(ctx, a)
}

// errStandbyGone: the claimed standby's session was not there to rename.
var errStandbyGone = errors.New("standby gone")

// renameAndTag renames the claimed standby to the attempt's name and sets
// its tags: six commands in one pipeline (one round trip; the rename first
// on the wire, so tmux never shows a standby's name with an identity's tags),
// while the hand-off file is written. It returns errStandbyGone when tmux
// refused all six (the session is gone; ids are never reused in a server
// life, so nothing was changed anywhere).
func (m *Manager) renameAndTag(ctx context.Context, a *attempt, cgroup string) error {
	tags := a.tags()
	cmds := make([][]string, 0, len(tags)+1)
	cmds = append(cmds, []string{"rename-session", "-t", a.tmuxID, a.name})
	for _, t := range tags {
		cmds = append(cmds, []string{"set-option", "-t", a.tmuxID, t[0], t[1]})
	}
	// The hand-off on a goroutine of its own and the round trip on this
	// one: the pipeline is the create's longer path, and a goroutine's
	// start (a sleeping thread woken, ~0.1 ms on an idle machine) must not
	// delay it.
	var herr error
	handed := make(chan struct{})
	go func() {
		defer close(handed)
		herr = m.handOff(ctx, a, cgroup)
	}()
	replies, errs := m.pipelineIn(ctx, a.life, cmds)
	<-handed
	if err := claimError(a, cmds, errs); err != nil {
		return err
	}
	if herr != nil {
		return herr
	}
	a.spawned = replies[0].Number // census.AdmitCreated orders its lists by it
	nums := make([]uint64, len(replies))
	for i, r := range replies {
		nums[i] = r.Number
	}
	a.tagged = census.LastNumber(nums...)
	return nil
}

// claimError classifies the six replies of renameAndTag: nil when all
// succeeded, errStandbyGone when tmux refused all, otherwise the first
// failure — an unanswered command makes the attempt uncertain (undo abandons
// the row to recovery, which decides from live tmux).
func claimError(a *attempt, cmds [][]string, errs []error) error {
	refused := 0
	var first error
	firstAt := 0
	for i, err := range errs {
		var ce *tmuxctl.CommandError
		switch {
		case err == nil:
			continue
		case errors.As(err, &ce):
			refused++
		case timedOut(err):
			a.uncertain = true
		}
		if first == nil {
			first, firstAt = err, i
		}
	}
	switch {
	case first == nil:
		return nil
	case refused == len(errs):
		return errStandbyGone
	case a.uncertain:
		return verdict.Errorf(verdict.CodeTmuxUnavailable, map[string]any{"command": cmds[firstAt][0]},
			"tmux did not answer %s for the claimed standby: %w", cmds[firstAt][0], first)
	}
	var ce *tmuxctl.CommandError
	if errors.As(first, &ce) {
		return verdict.Errorf(verdict.CodeTagFailed, map[string]any{"tmux": ce.Lines}, "%s: %w", cmds[firstAt][0], first)
	}
	// The connection failed (the server died, say): tmux was not there to
	// refuse anything.
	return verdict.Errorf(verdict.CodeTmuxUnavailable, map[string]any{"command": cmds[firstAt][0]},
		"%s: %w", cmds[firstAt][0], first)
}

// handOff gives a claimed standby its reservation, after the fence recorded
// the standby as the attempt's pane (so the standby finds itself there).
// First it records the standby's start on the standby's behalf, as a pane
// helper records its own before its gate: its pid, incarnation and the
// cgroup it is in (cgroup, where the daemon placed it at its spawn; "" when
// none). The daemon knows all three since the spawn and has the fence open
// and warm; a woken standby writing them itself (a transaction on a
// connection of its own, in the middle of a burst's creates) was ~1.3 ms of
// CPU per claim in a burst's profile. The standby is left with its gate: the
// generation published, with its own pid as the pane.
//
// It does not wake the standby: publish does, so the standby's look at the
// publication does not compete with the create's; a standby that finds the
// file by its own poll first waits at its gate.
func (m *Manager) handOff(ctx context.Context, a *attempt, cgroup string) error {
	if a.preclaim != nil { // its start was recorded with the reservation
		return m.writeHandoff(a, a.preclaim.startCgroup)
	}
	inc, cgroup, err := standbyStart(a.panePID, a.paneStart, a.sbIncarnation, cgroup)
	if err != nil {
		return verdict.Errorf(verdict.CodeSpawnFailed, nil, "claimed standby: %w", err)
	}
	if err := m.fence.RecordHelperStart(ctx, a.res.ID, a.panePID, inc, cgroup); err != nil {
		return err
	}
	return m.writeHandoff(a, cgroup)
}

// writeHandoff writes the claimed standby's hand-off file: its reservation,
// generation, pane pid and the cgroup its start record names.
func (m *Manager) writeHandoff(a *attempt, cgroup string) error {
	h := handoff{resID: a.res.ID, generation: a.res.Generation, cgroup: cgroup, panePID: a.panePID}
	if err := m.pool.writeHandoff(a.claimed, h); err != nil {
		return verdict.Errorf(verdict.CodeSpawnFailed, nil, "hand-off to standby: %w", err)
	}
	m.fault.hitIn(a.restart != nil, FaultHandedOff)
	return nil
}

// spawnOrRespawn is the spawn step of a create or restart not served by a
// standby: respawn-pane in a kept session, else new-session.
func (m *Manager) spawnOrRespawn(ctx context.Context, a *attempt, kept *keptSession) error {
	if kept != nil {
		if err := m.respawn(ctx, a, kept); err != nil {
			return err
		}
	} else if err := m.spawn(ctx, a); err != nil {
		return err
	}
	m.fault.hitIn(a.restart != nil, FaultNewSession)
	return nil
}
