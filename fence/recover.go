package fence

import (
	"context"
	"errors"
	"fmt"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Inspector is the recovery census (census.Census through a small adapter in
// lifecycle): the fence never imports tmux code.
type Inspector interface {
	// Inspect looks at live tmux (never the cache alone) for the abandoned
	// attempt ab, given the identity's published record (nil when none).
	Inspect(ctx context.Context, ab Reservation, pub *Published) (Authority, error)
	// KillConfirm kills the orphan attempt and returns nil only once it is
	// confirmed gone.
	KillConfirm(ctx context.Context, ab Reservation) error
	// ProcessesGone returns nil only once the processes of the attempt's
	// generation are proven gone (DESIGN §5: "absent" means the session is
	// gone and so are its row's generation's processes; a creator that
	// published and died before releasing may leave a running agent behind a
	// vanished session). pub is the identity's published record (nil: none).
	ProcessesGone(ctx context.Context, ab Reservation, pub *Published) error
}

// RecoverBranch is which of DESIGN §6's recovery branches was taken; its
// String is the verdict (skc.verdict) to write.
type RecoverBranch int

// The branches. The zero value is BranchUnresolved: fail closed.
const (
	// BranchUnresolved: nothing could be decided; the row is kept.
	BranchUnresolved RecoverBranch = iota
	// BranchPreserved: the attempt's session is authoritative and was kept.
	BranchPreserved
	// BranchOrphanCleaned: the orphan was killed, confirmed gone, and the row reclaimed.
	BranchOrphanCleaned
	// BranchReclaimed: no child could exist, or none was found; the row was reclaimed.
	BranchReclaimed
)

// String returns the verdict word: unresolved, preserved, orphan_cleaned, reclaimed.
func (b RecoverBranch) String() string {
	switch b {
	case BranchPreserved:
		return verdict.VerdictPreserved
	case BranchOrphanCleaned:
		return verdict.VerdictOrphanCleaned
	case BranchReclaimed:
		return verdict.VerdictReclaimed
	}
	return verdict.VerdictUnresolved
}

// RecoverResult is what RecoverAbandoned did.
type RecoverResult struct {
	Branch RecoverBranch
	// Inspected reports whether a live inspection ran (false when the row had
	// not reached helper_invoked, so no child could exist).
	Inspected bool
	Authority Authority   // the inspection's answer
	Abandoned Reservation // the abandoned row as re-read before acting
	Published *Published  // the identity's published record given to Inspect
	// Reservation is our new row (in flight) for orphan_cleaned and reclaimed.
	Reservation *Reservation
}

// Recover resolves a dead owner's row (or our own abandoned one) for the
// engine f, whose handle's owner is o, as DESIGN §6 and model/saga.pml order
// it; engines implement RecoverAbandoned with it:
//
//   - phase reserved: no child can exist → reclaim (reclaimed);
//   - a live inspection: authoritative → the child is preserved, and the error
//     is identity_existing_owner (the create answers existing); orphan →
//     KillConfirm first, then reclaim (orphan_cleaned); absent → reclaim
//     (reclaimed); unknown or an inspection error → identity_orphan_unresolved,
//     the row is kept;
//   - every reclaim is pinned to ab.ID: if someone else recovered the row
//     first, fence_lost (fail closed).
//
// The new row is written with ab.Spec (its state file must match the row's): a
// creator recovering in order to create puts its own Spec there; startup
// recovery passes the row as read and Releases the new reservation. When the
// preserved child is the row's own published generation, the dead creator's
// last step (release) is finished for it. The result is filled in for the
// preserved and unresolved branches too, alongside their error.
//
// Nothing here holds a transaction: the row is re-read, the inspection runs
// against live tmux, and each write (Reclaim, Release) is its own transition
// pinned to the row's id.
func Recover(ctx context.Context, f Fence, o *Owner, ab Reservation, insp Inspector) (RecoverResult, error) {
	if err := CheckReservationID(ab.ID); err != nil {
		return RecoverResult{}, err
	}
	id, spec, err := CanonicalRequest(ab.Identity, ab.Spec)
	if err != nil {
		return RecoverResult{}, err
	}
	pid, inc, err := o.Self()
	if err != nil {
		return RecoverResult{}, err
	}
	row, ok, err := f.ReservationFor(ctx, id)
	if err != nil {
		return RecoverResult{}, err
	}
	if !ok || row.ID != ab.ID {
		return RecoverResult{}, Lost(ab.ID, "is no longer the identity's row")
	}
	if err := o.Displaceable(row, pid, inc); err != nil {
		return RecoverResult{}, err
	}
	res := RecoverResult{Abandoned: row}
	if row.Phase < PhaseHelperInvoked {
		return reclaimFor(ctx, f, res, BranchReclaimed, spec)
	}
	if insp == nil {
		return res, unresolved(row, AuthorityUnknown, fmt.Errorf("no inspector"))
	}
	if pub, ok, err := f.PublishedFor(ctx, id); err != nil {
		return RecoverResult{}, err
	} else if ok {
		res.Published = &pub
	}
	return inspect(ctx, f, res, insp, spec)
}

// inspect runs the live inspection of res.Abandoned and acts on its answer.
func inspect(ctx context.Context, f Fence, res RecoverResult, insp Inspector, spec Spec) (RecoverResult, error) {
	row := res.Abandoned
	auth, ierr := insp.Inspect(ctx, row, res.Published)
	if ierr != nil {
		auth = AuthorityUnknown
	}
	res.Inspected, res.Authority = true, auth
	switch auth {
	case Authoritative:
		return preserve(ctx, f, res)
	case Orphan:
		if err := insp.KillConfirm(ctx, row); err != nil {
			return res, unresolved(row, auth, err)
		}
		if err := insp.ProcessesGone(ctx, row, res.Published); err != nil {
			return res, stillStopping(row, auth, err)
		}
		return reclaimFor(ctx, f, res, BranchOrphanCleaned, spec)
	case Absent:
		if err := insp.ProcessesGone(ctx, row, res.Published); err != nil {
			return res, stillStopping(row, auth, err)
		}
		return reclaimFor(ctx, f, res, BranchReclaimed, spec)
	default:
		return res, unresolved(row, auth, ierr)
	}
}

func reclaimFor(ctx context.Context, f Fence, res RecoverResult, b RecoverBranch, spec Spec) (RecoverResult, error) {
	r, err := f.Reclaim(ctx, res.Abandoned.Identity, res.Abandoned.ID, spec)
	if err != nil {
		res.Branch = BranchUnresolved
		return res, err
	}
	res.Branch, res.Reservation = b, &r
	return res, nil
}

// preserve keeps the authoritative child. If it is the row's own published
// generation the creator died between publishing and releasing, so the
// release is finished (pinned to the row's id): a later Reserve then answers
// MaybeExisting from the published record without another inspection.
func preserve(ctx context.Context, f Fence, res RecoverResult) (RecoverResult, error) {
	res.Branch = BranchPreserved
	ab := res.Abandoned
	if p := res.Published; p != nil && !p.Ended && p.ReservationID == ab.ID && p.Generation == ab.Generation {
		if err := f.Release(ctx, ab.ID); err != nil {
			return res, err
		}
	}
	return res, verdict.Errorf(verdict.CodeIdentityExistingOwner,
		map[string]any{"reservation_id": ab.ID, "session_name": ab.AttemptName, "generation": ab.Generation},
		"the abandoned attempt's session %s is authoritative and was preserved", ab.AttemptName)
}

// stillStopping is the refusal when the attempt's processes are not proven
// gone: the inspector's own refusal when it says why (details.stopping),
// else unresolved.
func stillStopping(row Reservation, auth Authority, err error) error {
	var e *verdict.Error
	if errors.As(err, &e) && e.Details["stopping"] == true {
		return err
	}
	return unresolved(row, auth, err)
}

func unresolved(row Reservation, auth Authority, cause error) error {
	details := map[string]any{"reservation_id": row.ID, "phase": row.Phase.String(), "authority": auth.String()}
	if cause != nil {
		return verdict.Errorf(verdict.CodeIdentityOrphanUnresolved, details,
			"cannot establish whether attempt %s still has a session: %w", row.AttemptName, cause)
	}
	return verdict.Errorf(verdict.CodeIdentityOrphanUnresolved, details,
		"cannot establish whether attempt %s still has a session (inspection: %s)", row.AttemptName, auth)
}
