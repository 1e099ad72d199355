package lifecycle

import (
	"context"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// emit journals and files one verdict. A verdict that cannot be journaled is logged:
// the decision it records has already been taken.
func (m *Manager) emit(ctx context.Context, r verdict.Record) verdict.Record {
	out, err := m.verdicts.Emit(context.WithoutCancel(ctx), r)
	if err != nil {
		m.log.Error().Err(err).Str("verdict", r.Verdict).Msg("verdict not journaled")
		return r
	}
	return out
}

// refuse writes the refused (or failed, for non-refusal codes) verdict of a create
// that never held a reservation and returns its error. Nothing was created, so there
// is nothing to undo.
func (m *Manager) refuse(ctx context.Context, req CreateRequest, err error, start time.Time) (fence.Reservation, *CreateResult, error) {
	e := verdict.AsError(err)
	m.emit(ctx, m.refusedRecord(req, e, start))
	if verdict.IsRefusal(e.Code) {
		m.met.refused(e.Code)
	} else {
		m.met.failed(e.Code)
	}
	return fence.Reservation{}, nil, e
}

func (m *Manager) refusedRecord(req CreateRequest, e *verdict.Error, start time.Time) verdict.Record {
	v, outcome := verdict.VerdictRefused, verdict.OutcomeFailure
	if !verdict.IsRefusal(e.Code) {
		v = verdict.VerdictFailed
	}
	ev := map[string]any{"message": e.Message}
	for k, val := range e.Details {
		ev[k] = val
	}
	return verdict.Record{
		Action: verdict.ActionCreate, Outcome: outcome, Reason: verdict.Classify(e.Code).Reason,
		Verdict: v, Code: e.Code, Duration: timeSince(start),
		Identity: identityRef(req.Identity), Evidence: ev,
	}
}

func (m *Manager) existingRecord(req CreateRequest, pub fence.Published, reason string, start time.Time) verdict.Record {
	return verdict.Record{
		Action: verdict.ActionCreate, Outcome: verdict.OutcomeSuccess, Reason: reason,
		Verdict: verdict.VerdictExisting, Duration: timeSince(start),
		Identity: identityRef(req.Identity),
		Session:  &verdict.SessionRef{Name: pub.SessionName, ID: pub.TmuxID, Generation: pub.Generation},
		Evidence: map[string]any{"reservation_id": pub.ReservationID},
	}
}
