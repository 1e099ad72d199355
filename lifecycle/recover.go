package lifecycle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/proctree"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// errRecovered tells admit that a recovery preserved the identity's published
// child and finished its release: Reserve again to answer existing.
var errRecovered = errors.New("recovered: reserve again")

// recoverRow resolves a dead owner's row for a create (DESIGN §6): authority first,
// an orphan killed and confirmed gone before the row is reclaimed with this create's
// spec. It writes the one recovery verdict and returns the new reservation (ours,
// in flight) when the row was reclaimed.
//
// until is how long a stopping generation of the row may be waited for (the
// create's wait).
func (m *Manager) recoverRow(ctx context.Context, ab fence.Reservation, spec fence.Spec, until time.Time) (*fence.Reservation, error) {
	ab.Spec = spec
	res, err := m.fence.RecoverAbandoned(ctx, ab, inspector{m, until})
	if err != nil && (res.Abandoned.ID == "" || verdict.CodeOf(err) == verdict.CodeFenceLost || stillStopping(err)) {
		// Nothing was decided by us (the row changed under us — someone
		// else recovered it first — or the owner is alive after all, or
		// its generation's stop is under way): no recovery verdict; the
		// create's refusal says why, and the next Reserve sees the new state.
		return nil, err
	}
	m.emit(ctx, recoveryRecord(res, err))
	m.met.recovered(res.Branch.String())
	switch {
	case err == nil && res.Reservation != nil:
		return res.Reservation, nil
	case res.Branch == fence.BranchPreserved && res.Published != nil &&
		res.Published.ReservationID == res.Abandoned.ID:
		return nil, errRecovered
	case err == nil:
		return nil, errors.New("fence: recovery returned no reservation")
	}
	return nil, err
}

// reclaimedInPlace writes the reclaimed verdict of a dead owner's row that
// Reserve replaced in place (it had not reached helper_invoked, so no child
// could exist and nothing was inspected): the displaced reservation id and its
// owner, and the new reservation's id.
func (m *Manager) reclaimedInPlace(ctx context.Context, rr fence.ReserveResult) {
	if rr.Displaced == nil {
		return
	}
	r := rr.Reservation
	m.emit(ctx, recoveryRecord(fence.RecoverResult{Branch: fence.BranchReclaimed, Abandoned: *rr.Displaced,
		Reservation: &r}, nil))
	m.met.recovered(fence.BranchReclaimed.String())
}

func recoveryRecord(res fence.RecoverResult, err error) verdict.Record {
	ab := res.Abandoned
	rec := verdict.Record{
		Action: verdict.ActionRecover, Outcome: verdict.OutcomeSuccess,
		Verdict:     res.Branch.String(),
		Identity:    identityRef(ab.Identity),
		Reservation: &verdict.ReservationRef{ID: ab.ID, Phase: ab.Phase.String()},
		Evidence: map[string]any{
			"owner_pid": ab.OwnerPID, "inspected": res.Inspected, "authority": res.Authority.String(),
		},
	}
	if ab.AttemptName != "" {
		rec.Session = &verdict.SessionRef{Name: ab.AttemptName, ID: ab.TmuxID, Generation: ab.Generation}
	}
	switch res.Branch {
	case fence.BranchReclaimed:
		rec.Reason = verdict.ReasonChildAbsent
		if !res.Inspected {
			rec.Reason = verdict.ReasonNoChild
		}
	case fence.BranchOrphanCleaned:
		rec.Reason = verdict.ReasonOrphanCleanup
	case fence.BranchPreserved:
		rec.Reason = verdict.ReasonChildAuthoritative
		if onlyReleaseMissing(res) {
			releaseFinishedEvidence(rec.Evidence, *res.Published)
			return rec // the identity_existing_owner "error" is the answer, not a fault
		}
	default:
		rec.Outcome, rec.Reason = verdict.OutcomeUnknown, verdict.ReasonInspectionUnknown
		rec.Code = verdict.CodeOf(err)
	}
	if res.Reservation != nil {
		rec.Evidence["new_reservation_id"] = res.Reservation.ID
	}
	if err != nil {
		rec.Evidence["error"] = err.Error()
	}
	return rec
}

// onlyReleaseMissing: the preserved child is the abandoned row's own published
// generation, so its creator died after publishing (fault points publish and
// published) and recovery only finished the release.
func onlyReleaseMissing(res fence.RecoverResult) bool {
	p := res.Published
	return res.Branch == fence.BranchPreserved && p != nil && !p.Ended &&
		p.ReservationID == res.Abandoned.ID && p.Generation == res.Abandoned.Generation
}

// releaseFinishedEvidence says in the verdict what happened, so that a reader of a
// "preserved" record does not go looking for a failure: the generation was already
// published (the session is live and authoritative) and the only step the dead
// creator had left was releasing its reservation, which recovery did.
func releaseFinishedEvidence(ev map[string]any, p fence.Published) {
	ev["already_published"] = true
	ev["published_generation"] = p.Generation
	ev["published_at"] = p.PublishedAt.UTC().Format(time.RFC3339Nano)
	ev["missing_step"] = "release"
	ev["action_taken"] = "reservation released; published session kept"
}

// Recover runs at daemon start, once the census has synced: it resolves every
// reservation row left by a dead owner (releasing what it reclaims: no create is
// waiting for it), adopts the published identities whose sessions are live and
// authoritative, and writes the end verdicts of those that ended while no daemon
// watched (process_postmortem when tmux kept the dead pane's exit, or the helper
// recorded a failed exec; owner_lost otherwise).
func (m *Manager) Recover(ctx context.Context) error {
	if err := m.census.WaitSynced(ctx); err != nil {
		return err
	}
	rows, err := m.fence.Reservations(ctx)
	if err != nil {
		return err
	}
	// One row or identity that cannot be resolved now must not keep the daemon
	// from starting: its verdict (unresolved) or the log says why, and the next
	// create of that identity tries again.
	for _, row := range rows {
		if err := m.recoverAtStart(ctx, row); err != nil {
			m.log.Warn().Err(err).Str("reservation", row.ID).Msg("reservation not resolved at start")
		}
	}
	pubs, err := m.fence.Identities(ctx)
	if err != nil {
		return err
	}
	m.adoptAll(ctx, pubs)
	m.sweepCgroups(nil)
	m.scheduleWaiting(ctx)
	return nil
}

// sweepCgroups removes the empty cgroups a crash left behind (a daemon killed
// between an end and its cgroup's removal, a failed attempt whose helper
// outlived the compensation), but those in keep. rmdir succeeds only on an
// empty cgroup, so a generation's cgroup that holds anything stays; an empty
// one holds nothing to prove (proctree: a removed cgroup is an empty one).
func (m *Manager) sweepCgroups(keep map[string]bool) {
	if m.cgroupBase == "" {
		return
	}
	ents, err := os.ReadDir(m.cgroupBase)
	if err != nil {
		return
	}
	for _, e := range ents {
		dir := filepath.Join(m.cgroupBase, e.Name())
		if e.IsDir() && strings.HasPrefix(e.Name(), "gen-") && !keep[dir] {
			_ = proctree.RemoveCgroup(dir)
		}
	}
}

// sweepIdleCgroups is sweepCgroups at shutdown, when the creates are over:
// it keeps the cgroup of every generation that is not over (running, or
// kept for its restart), empty or not — a helper published a moment ago
// may not have entered its own yet.
func (m *Manager) sweepIdleCgroups() {
	if m.cgroupBase == "" {
		return
	}
	keep := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.fence.CachedLive(ctx, func(p *fence.Published) { keep[p.Cgroup] = true }); err != nil {
		return // what lives is unknown: the next start sweeps
	}
	for _, p := range m.waitingGenerations(ctx) {
		keep[p.Cgroup] = true
	}
	m.sweepCgroups(keep)
}

func (m *Manager) recoverAtStart(ctx context.Context, row fence.Reservation) error {
	if fence.Liveness(row.OwnerPID, row.OwnerIncarnation) == fence.Alive {
		return nil // a live owner's create is its own business
	}
	return m.decideRow(ctx, row)
}

// decideRow decides row — a dead owner's, or our own abandoned one — from
// live tmux (fence.RecoverAbandoned with our inspector) and writes its
// verdict.
func (m *Manager) decideRow(ctx context.Context, row fence.Reservation) error {
	res, err := m.fence.RecoverAbandoned(ctx, row, inspector{m: m})
	if stillStopping(err) && res.Published != nil {
		// The row's generation is stopping, not stuck: decide the row when
		// the stop ends (an unresolved verdict now would be a false alarm).
		m.recoverAfterStop(row, *res.Published)
		return nil
	}
	if err != nil && (res.Abandoned.ID == "" || verdict.CodeOf(err) == verdict.CodeFenceLost) {
		if verdict.CodeOf(err) == verdict.CodeIdentityReservedLive || verdict.CodeOf(err) == verdict.CodeFenceLost {
			return nil
		}
		return err
	}
	m.emit(ctx, recoveryRecord(res, err))
	m.met.recovered(res.Branch.String())
	if res.Reservation != nil {
		fctx, cancel := fenceCtx(ctx)
		defer cancel()
		return m.fence.Release(fctx, res.Reservation.ID)
	}
	return nil
}

// stillStopping reports a refusal because a generation's stop is under way
// (identity_reserved_live with details.stopping): a wait that ran out, not a
// failure to prove anything.
func stillStopping(err error) bool {
	e := verdict.AsError(err)
	return err != nil && e != nil && e.Code == verdict.CodeIdentityReservedLive && e.Details["stopping"] == true
}

// recoverAfterStop resolves a dead creator's row once the stop of its own
// published generation (a session gone while its agent still ran) has ended,
// in the background like the stop itself: start never waits out a grace. A
// stop that cannot prove the processes gone writes its own unresolved verdict
// and leaves the row for an operator or a later create; a create that decides
// the row first makes this one find it changed (fence_lost) and write nothing.
func (m *Manager) recoverAfterStop(row fence.Reservation, pub fence.Published) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopCtx.Err() != nil {
		return // shutting down: the next start recovers the row
	}
	m.stopWG.Add(1)
	go func() {
		defer m.stopWG.Done()
		run := m.stopGeneration(pub, endCause{reason: m.goneReason(pub)})
		select {
		case <-run.done:
		case <-m.stopCtx.Done():
			return
		}
		if run.err != nil {
			return
		}
		if err := m.recoverAtStart(m.stopCtx, row); err != nil {
			m.log.Warn().Err(err).Str("reservation", row.ID).Msg("reservation not resolved after its stop")
		}
	}()
}

// adoptAll looks at every published, not-ended generation at start, all of
// them judged on one fresh read of tmux (census.InspectMany): one Inspect
// each listed the whole server each time, and a start with 1,200 sessions
// took two minutes. A stop recorded by the previous daemon is continued
// with its original deadline (adoptOrEnd for the rest).
func (m *Manager) adoptAll(ctx context.Context, pubs []fence.Published) {
	var look []fence.Published
	var evs []census.Evidence
	for _, p := range pubs {
		switch {
		case p.Ended:
		case p.Stopping != nil:
			c := causeOf(p.Stopping.Reason)
			c.restart = true
			m.stopGeneration(p, c)
		default:
			look, evs = append(look, p), append(evs, m.publishedEvidence(p))
		}
	}
	for i, j := range m.census.InspectMany(ctx, evs) {
		if err := m.adoptOrEnd(ctx, look[i], j); err != nil {
			m.log.Warn().Err(err).Str("session", look[i].SessionName).Msg("published identity not resolved at start")
		}
	}
}

// adoptOrEnd acts on what live tmux says (j) of one published, not-ended
// generation at start: a generation whose session is gone or whose pane is
// dead starts stopping (its processes may still run: the old daemon is not
// there to have seen them go); a live one is adopted. Stops run in the
// background: start does not wait out grace periods.
func (m *Manager) adoptOrEnd(ctx context.Context, p fence.Published, j census.Judgement) error {
	auth, sess, err := j.Authority, j.Session, j.Err
	if err != nil && auth != census.Unknown {
		return err
	}
	if auth == census.Authoritative && sess != nil && sess.PaneDead && !m.notAgentsDeath(ctx, *sess, p) {
		m.stopGeneration(p, endCause{reason: verdict.ReasonAgentExited, restart: true})
		return nil
	}
	switch auth {
	case census.Authoritative:
		if sess != nil {
			// Its helper may be waiting for a publication this daemon's
			// predecessor made and died before waking it for.
			m.wakeHelper(p.PanePID, sess.ID)
		}
		m.watchExit(p) // the watch of the daemon before ended with it
		m.emit(ctx, verdict.Record{
			Action: verdict.ActionAdopt, Outcome: verdict.OutcomeSuccess,
			Reason: verdict.ReasonDaemonRestart, Verdict: verdict.VerdictAdopted,
			Identity: identityRef(p.Identity),
			Session:  &verdict.SessionRef{Name: p.SessionName, ID: p.TmuxID, Generation: p.Generation},
			Evidence: map[string]any{"reservation_id": p.ReservationID},
		})
		return nil
	case census.Absent:
		m.stopGeneration(p, endCause{reason: m.goneReason(p), restart: true})
		return nil
	}
	m.log.Warn().Err(err).Str("identity", p.Identity.Digest()).Str("authority", auth.String()).
		Msg("published session neither live nor gone; left for end detection")
	return nil
}
