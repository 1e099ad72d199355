package lifecycle

import (
	"context"
	"os"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/proctree"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// A create claims its standby with its reservation (issue 18, goal 2).
//
// Everything a claim records of its standby — tmux id, pane pid and start
// time, server life, incarnation, cgroup — is known before the create
// reserves, so a create that finds a standby free takes it first and hands
// the fence a Claim with its Reserve (fence.ReserveClaim): the reservation,
// its spawned step and the standby's start record are one transaction, not
// three. Nothing happens in tmux between them, so no crash point is lost:
// a crash between the reserve and the spawned step left a row at phase
// reserved, which no child can be told from (model/saga.pml, -DPOOL). On an
// idle machine it is one fence transaction (~0.2 ms) and the start record's
// CPU beside the rename less per pooled create.
//
// The claim is made only for an identity's first generation: a later one
// may find the session its ended generation left (leftoverOf), which it must
// reuse rather than stand a second session beside (-DBUILT_SESSIONS), and
// only the reservation tells the generation. The fence asks Claim.Spawned
// inside its transaction; a later generation is declined there, the standby
// goes back to the free list, and the create runs the saga as before (it may
// take a standby after leftoverOf, with its own spawned step).

// preclaim is a standby taken before the reservation and the fence claim
// that records it.
type preclaim struct {
	sb    standby
	claim fence.Claim
	// startCgroup is the cgroup the start record names: the standby's,
	// once /proc says it is there ("" otherwise).
	startCgroup string
}

// takePreclaim takes a free standby for req and builds its claim; nil when
// the pool has none, or req's command cannot start (the create is refused
// after its reservation, as without a pool, and the standby stays free).
func (m *Manager) takePreclaim(req CreateRequest) *preclaim {
	if m.pool == nil || checkCommand(req.Spec, os.Getenv("PATH"), false) != nil {
		return nil
	}
	sb, ok := m.takeStandby()
	if !ok {
		return nil
	}
	inc, err := standbyIncarnation(sb.panePID, sb.paneStart, sb.incarnation)
	if err != nil {
		m.pool.giveBack(sb)
		return nil
	}
	pc := &preclaim{sb: sb, startCgroup: sb.confirmed} // seen inside at its spawn
	pc.claim = fence.Claim{HelperPID: sb.panePID, Incarnation: inc, Cgroup: sb.confirmed,
		Spawned: func(r fence.Reservation) (fence.Patch, bool) {
			if r.Generation != 1 {
				return fence.Patch{}, false
			}
			return spawnedPatch(attemptName(r.Identity.Digest(), r.ID), sb), true
		}}
	return pc
}

// spawnedPatch is the evidence of phase spawned for a claim of sb under the
// attempt name name. The standby's own cgroup becomes the generation's: it
// was placed there at its spawn, so nothing moves on the create's path.
func spawnedPatch(name string, sb standby) fence.Patch {
	return fence.Patch{AttemptName: name, TmuxID: sb.tmuxID, PanePID: sb.panePID, ServerPID: sb.life.PID,
		ServerStart: sb.life.StartTime, PaneStart: sb.paneStart, Cgroup: sb.cgroup}
}

// standbyStart is what a claim records as the standby pid's start: its
// incarnation (inc, read at its spawn; read now when that failed) and the
// cgroup it was placed in — "" unless /proc confirms it is there: the end's
// proof trusts that cgroup to hold the generation, and a standby not where
// it was placed (never seen; a process of ours moved it?) is held by its
// pane's session instead. A create's first generation takes the cgroup
// confirmed at the spawn (standby.confirmed) instead of looking again.
func standbyStart(pid int, paneStart uint64, inc, cgroup string) (string, string, error) {
	inc, err := standbyIncarnation(pid, paneStart, inc)
	if err != nil {
		return "", "", err
	}
	if cgroup != "" && !proctree.InCgroup(pid, cgroup) {
		cgroup = ""
	}
	return inc, cgroup, nil
}

// standbyIncarnation is the standby pid's incarnation: inc, read at its
// spawn, or read now when that failed.
func standbyIncarnation(pid int, paneStart uint64, inc string) (string, error) {
	if inc != "" {
		return inc, nil
	}
	return fence.IncarnationOf(pid, paneStart)
}

// reserve is the fence's Reserve, or ReserveClaim with pc's claim.
func (m *Manager) reserve(ctx context.Context, req CreateRequest, pc *preclaim) (fence.ReserveResult, error) {
	defer m.met.fenceOp(fenceOpReserve, time.Now())
	if pc == nil {
		return m.fence.Reserve(ctx, req.Identity, req.Spec)
	}
	return m.fence.ReserveClaim(ctx, req.Identity, req.Spec, pc.claim)
}

// settlePreclaim decides pc's standby once admit answered: bound to the
// attempt when the reservation recorded it (true), else back on the free
// list — or, after an error whose write may have landed, handed to the next
// refill to be removed: it must never be handed out twice.
func (m *Manager) settlePreclaim(pc *preclaim, res fence.Reservation, err error) bool {
	switch {
	case pc == nil:
		return false
	case err == nil && res.Phase == fence.PhaseSpawned:
		return true
	case err == nil || verdict.IsRefusal(verdict.CodeOf(err)):
		m.pool.giveBack(pc.sb)
	default:
		m.pool.discard(pc.sb)
	}
	return false
}

// bindStandby makes the claimed standby sb the attempt's pane: from here
// undo kills it by id, and the pool refills once the create answered.
func (a *attempt) bindStandby(sb standby) {
	sb.closePidfd() // claimed: never on the free list again
	a.pooled = true
	a.claimed, a.sent, a.sbCgroup, a.sbIncarnation = sb.token, true, sb.cgroup, sb.incarnation
	a.life, a.tmuxID, a.panePID, a.paneID, a.created, a.paneStart =
		sb.life, sb.tmuxID, sb.panePID, sb.paneID, sb.created, sb.paneStart
}
