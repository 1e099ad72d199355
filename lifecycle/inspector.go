package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/proctree"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// inspector is the fence.Inspector recovery runs with: live authority from the
// census (which re-reads tmux before answering) and orphan removal through the
// control connection, confirmed by a fresh live read.
//
// until bounds how long ProcessesGone waits for a stopping generation's proof:
// a create's own wait; zero for recovery at start, which must not wait out
// grace periods (the stop goes on in the background and a later create finds
// the generation ended).
type inspector struct {
	m     *Manager
	until time.Time
}

var _ fence.Inspector = inspector{}

// Inspect asks the census what exists for an abandoned attempt: its session by id
// (in the life it was spawned in) or by its unique attempt name, judged against the
// identity's published generation.
func (in inspector) Inspect(ctx context.Context, ab fence.Reservation, pub *fence.Published) (fence.Authority, error) {
	ev := in.evidence(ab, pub)
	auth, _, err := in.m.census.Inspect(ctx, ev)
	if err != nil {
		return fence.AuthorityUnknown, err
	}
	return toFenceAuthority(auth), nil
}

func (in inspector) evidence(ab fence.Reservation, pub *fence.Published) census.Evidence {
	ev := census.Evidence{
		IdentityDigest: ab.Identity.Digest(),
		AttemptName:    ab.AttemptName,
		TmuxID:         ab.TmuxID,
		Life:           in.m.evidenceLife(ab.ServerPID, ab.ServerStart),
	}
	if pub != nil && !pub.Ended {
		ev.Generation = pub.Generation
	}
	return ev
}

// KillConfirm kills the abandoned attempt's live session by id and confirms it gone.
// The session is located afresh (Inspect re-reads tmux), so a session recorded only
// by name (the owner died before `spawned`) is found too; the kill carries the life
// it was found in, and a life that changed during the inspection fails closed.
func (in inspector) KillConfirm(ctx context.Context, ab fence.Reservation) error {
	m := in.m
	before, ok1 := m.census.Info()
	auth, s, err := m.census.Inspect(ctx, in.evidence(ab, nil))
	if err != nil {
		return err
	}
	after, ok2 := m.census.Info()
	if !ok1 || !ok2 || before.ServerLife != after.ServerLife {
		return errors.New("tmux server life changed during inspection")
	}
	switch {
	case auth == census.Absent:
		return nil
	case auth != census.Orphan || s == nil:
		return verdict.Errorf(verdict.CodeIdentityOrphanUnresolved, nil, "attempt session is %v, not an orphan", auth)
	}
	life := after.ServerLife
	if m.keptAttempt(ctx, ab, s, life) {
		// A restart that died after respawning the kept session's pane:
		// the session is the identity's, not the attempt's. Only the
		// attempt's helper (gated: it never ran an agent) is removed; the
		// dead pane stays for the restart that follows.
		return m.clearKeptPane(ctx, life, s)
	}
	m.markKilling(life, s.ID, killReason{reason: verdict.ReasonOrphanCleanup})
	err = m.killConfirm(ctx, life, s.ID)
	m.doneKilling(life, s.ID, err == nil)
	return err
}

func toFenceAuthority(a census.Authority) fence.Authority {
	switch a {
	case census.Authoritative:
		return fence.Authoritative
	case census.Orphan:
		return fence.Orphan
	case census.Absent:
		return fence.Absent
	}
	return fence.AuthorityUnknown
}

// unpublishedProofWait bounds the proof for an attempt that never published:
// only its pane helper can exist (it starts the agent after publication only),
// and the hangup of its vanished session ends it at once.
const unpublishedProofWait = 5 * time.Second

// ProcessesGone proves the processes of an abandoned attempt's generation
// gone. Its own published generation (the creator died between publishing and
// releasing) is stopped like any generation whose session vanished, joined
// within in.until; an unpublished attempt's helper is proven gone from the
// row's hold, and SIGKILLed if it lingers.
func (in inspector) ProcessesGone(ctx context.Context, ab fence.Reservation, pub *fence.Published) error {
	m := in.m
	if pub != nil && !pub.Ended && pub.ReservationID == ab.ID {
		run := m.stopGeneration(*pub, endCause{reason: m.goneReason(*pub)})
		t := time.NewTimer(max(time.Until(in.until), 0))
		defer t.Stop()
		select {
		case <-run.done:
			return run.err
		case <-t.C:
		case <-ctx.Done():
		}
		select {
		case <-run.done:
			return run.err
		default:
		}
		return stoppingError(*pub, verdict.CodeIdentityReservedLive,
			"generation %d of the abandoned attempt is stopping: its processes are not proven gone yet")
	}
	h := proctree.Hold{PanePID: ab.PanePID, PaneStart: ab.PaneStart, Cgroup: ab.Cgroup}
	if h.Cgroup == "" {
		h.Cgroup = proctree.GenerationCgroup(m.cgroupBase, ab.ID) // entered before `spawned` was recorded?
	}
	res := proctree.WaitGone(ctx, h, time.Now().Add(unpublishedProofWait))
	if res.State != proctree.Gone {
		_, _ = proctree.Signal(h, unix.SIGKILL)
		res = proctree.WaitGone(ctx, h, time.Now().Add(killProofWait))
	}
	if res.State != proctree.Gone {
		return fmt.Errorf("processes of attempt %s not proven gone: %s", ab.AttemptName, res.Why)
	}
	_ = proctree.RemoveCgroup(h.Cgroup)
	return nil
}
