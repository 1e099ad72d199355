package lifecycle

import (
	"context"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/proctree"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Release is the operator's escape, `fence release --reservation ID`: it
// clears a reservation row whose owner cannot be proven dead (liveness
// unknown), or a generation whose processes could not be proven gone, so the
// identity can be created again. It refuses (identity_reserved_live) while the
// row's owner is proven alive or the generation's processes are, or its
// session still runs; what is left of a stopping generation's session is
// removed (confirmed) before the identity is freed; it always writes a
// verdict (released) with what it found. The checks read /proc and tmux before the fence's write, which then
// only confirms that the row and generation are still the ones checked.
func (m *Manager) Release(ctx context.Context, resID string) (verdict.Record, error) {
	row, haveRow, err := m.fence.Reservation(ctx, resID)
	if err != nil {
		return verdict.Record{}, fenceError(err)
	}
	pub, havePub, err := m.fence.PublishedByReservation(ctx, resID)
	if err != nil {
		return verdict.Record{}, fenceError(err)
	}
	ev := map[string]any{"reservation_id": resID}
	if haveRow {
		if err := m.releasableRow(row, ev); err != nil {
			return verdict.Record{}, err
		}
	}
	if havePub && !pub.Ended {
		if err := m.releasableGeneration(ctx, pub, ev); err != nil {
			return verdict.Record{}, err
		}
		if err := m.removeReleasedSession(ctx, pub, ev); err != nil {
			return verdict.Record{}, err
		}
	}
	allowed := func(r fence.Released) error {
		if (r.Reservation != nil) != haveRow || (r.Published != nil) != (havePub && !pub.Ended) ||
			(r.Published != nil && r.Published.Generation != pub.Generation) {
			return verdict.Errorf(verdict.CodeFenceLost, map[string]any{"reservation_id": resID},
				"reservation %s changed while it was checked; look again", resID)
		}
		return nil
	}
	describe := func(r fence.Released) verdict.Record {
		rec := verdict.Record{Action: verdict.ActionRelease, Outcome: verdict.OutcomeSuccess,
			Verdict: verdict.VerdictReleased, Reason: verdict.ReasonOperatorRelease, Evidence: ev}
		if r.Reservation != nil {
			rec.Identity = identityRef(r.Reservation.Identity)
			rec.Reservation = &verdict.ReservationRef{ID: resID, Phase: r.Reservation.Phase.String()}
		}
		if p := r.Published; p != nil {
			rec.Identity = identityRef(p.Identity)
			rec.Session = &verdict.SessionRef{Name: p.SessionName, ID: p.TmuxID, Generation: p.Generation}
		}
		return rec
	}
	_, filed, err := m.fence.ReleaseStuck(ctx, resID, allowed, describe)
	if err != nil {
		return verdict.Record{}, err
	}
	m.verdicts.Filed(filed)
	return filed, nil
}

// releasableRow refuses a row whose owner is proven alive (a create in flight,
// ours or another process's).
func (m *Manager) releasableRow(row fence.Reservation, ev map[string]any) error {
	m.mu.Lock()
	_, ours := m.inflight[row.ID]
	m.mu.Unlock()
	// From this host: another host's owner is unknown here, never "dead"
	// (its pid means nothing on this machine).
	l := fence.OwnerLive(row, m.host, fence.Liveness)
	ev["owner_pid"], ev["owner_liveness"], ev["phase"] = row.OwnerPID, l.String(), row.Phase.String()
	if ours || l == fence.Alive {
		return verdict.Errorf(verdict.CodeIdentityReservedLive,
			map[string]any{"reservation_id": row.ID, "owner_pid": row.OwnerPID},
			"reservation %s is held by live process %d; nothing to release", row.ID, row.OwnerPID)
	}
	return nil
}

// releasableGeneration refuses a generation whose processes are proven alive,
// or whose session is running (not stopping).
func (m *Manager) releasableGeneration(ctx context.Context, p fence.Published, ev map[string]any) error {
	res := proctree.Probe(m.holdOf(ctx, p))
	ev["generation"], ev["processes"], ev["why"] = p.Generation, res.State.String(), res.Why
	details := map[string]any{"reservation_id": p.ReservationID, "generation": p.Generation, "pids": res.PIDs}
	if res.State == proctree.Alive && p.Stopping != nil && p.Stopping.Killed {
		// kill is no way out here: they have outlived its SIGKILL.
		return verdict.Errorf(verdict.CodeIdentityReservedLive, details,
			"generation %d still has live processes %v, which outlived SIGKILL (stuck in the kernel?); "+
				"the identity frees itself once they are gone", p.Generation, res.PIDs)
	}
	if res.State == proctree.Alive {
		return verdict.Errorf(verdict.CodeIdentityReservedLive, details,
			"generation %d still has live processes %v; `kill` it instead", p.Generation, res.PIDs)
	}
	if s, ok := m.sessionOf(p); ok && p.Stopping == nil && !s.PaneDead {
		return verdict.Errorf(verdict.CodeIdentityReservedLive, details,
			"generation %d is running in session %s; `kill` it instead", p.Generation, s.Name)
	}
	return nil
}

// removeReleasedSession removes what is left of a released generation's session
// (a dead pane, or a pane whose processes could not be proven gone), confirmed,
// before the identity is freed: freed beside it, the next create would stand a
// second session of the identity next to it (the model's n <= 1, as in
// finishEnd). The evidence says which session went.
func (m *Manager) removeReleasedSession(ctx context.Context, p fence.Published, ev map[string]any) error {
	if _, present := m.sessionOf(p); !present {
		return nil
	}
	kr := killReason{reason: verdict.ReasonOperatorRelease, byKill: true} // Release writes the verdict
	if err := m.removeEndedSession(ctx, p, kr); err != nil {
		return verdict.Errorf(verdict.CodeTmuxUnavailable,
			map[string]any{"reservation_id": p.ReservationID, "tmux_id": p.TmuxID}, "%w", err)
	}
	ev["session_removed"] = p.TmuxID
	return nil
}

// ForgetHost is the operator's escape for a host that is gone for good,
// `fence forget --host NAME`: every reservation row the host owns is removed
// and its running generations are marked ended, in one fence write with one
// released verdict (reason host_forgotten; its evidence names the rows and
// generations), so its identities can be created on other hosts. No other
// host's owners or processes can be proven alive or dead from here: the
// operator's word that the host is gone decides. This host is refused
// (invalid_request: its owners can be probed, `fence release` resolves one
// row after that proof); a host with nothing to forget is not_found.
func (m *Manager) ForgetHost(ctx context.Context, host string) (fence.Forgotten, verdict.Record, error) {
	describe := func(fg fence.Forgotten) verdict.Record {
		rows := make([]any, 0, len(fg.Reservations))
		for _, r := range fg.Reservations {
			rows = append(rows, r.ID)
		}
		gens := make([]any, 0, len(fg.Published))
		for _, p := range fg.Published {
			gens = append(gens, p.SessionName)
		}
		rec := verdict.Record{Action: verdict.ActionRelease, Outcome: verdict.OutcomeSuccess,
			Verdict: verdict.VerdictReleased, Reason: verdict.ReasonHostForgotten,
			Evidence: map[string]any{"host": fg.Host, "reservations": rows, "generations": gens}}
		if len(fg.Published) == 1 && len(fg.Reservations) == 0 {
			p := fg.Published[0]
			rec.Identity = identityRef(p.Identity)
			rec.Session = &verdict.SessionRef{Name: p.SessionName, ID: p.TmuxID, Generation: p.Generation}
		}
		return rec
	}
	fg, filed, err := m.fence.ForgetHost(ctx, host, describe)
	if err != nil {
		return fence.Forgotten{}, verdict.Record{}, err
	}
	m.verdicts.Filed(filed)
	return fg, filed, nil
}
