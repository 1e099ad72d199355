package fence

import (
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// The decisions of the transitions after Reserve (Advance, Publish, the end
// and stop of a generation, the operator's release), shared by every engine:
// an engine reads rows inside its transaction, asks these, and writes what
// they decided; the compare-and-sets themselves stay one SQL statement each
// (their conditions are documented on fence.Fence), so that no decision is
// taken on a row read earlier than the write.

// CheckReservation refuses a reservation handed to a transition before
// anything is read: nil, or an id that is not one the fence hands out, is
// invalid_request.
func CheckReservation(r *Reservation) error {
	if r == nil {
		return Invalid("reservation", "nil reservation")
	}
	return CheckReservationID(r.ID)
}

// AdvanceRow moves the row cur, read under the transaction's lock and found
// still ours (CheckOwn), to phase to at now with evidence p: what Advance
// writes. A phase before the recorded one is invalid_request (phases only
// move forward), and cur is left as it was.
func AdvanceRow(cur *Reservation, to Phase, p Patch, now time.Time, lease time.Duration) error {
	if to < cur.Phase {
		return Invalid("phase", "phase %s is before the recorded %s", to, cur.Phase)
	}
	ApplyPatch(cur, to, p, now, lease)
	return nil
}

// CheckGeneration refuses generation 0 in a compare-and-set on a published
// generation: generations start at 1, so 0 can only be a caller's bug.
func CheckGeneration(gen uint64) error {
	if gen == 0 {
		return Invalid("generation", "generation 0 is never published")
	}
	return nil
}

// RunningGeneration reports whether pub (found false when the identity has
// none) is generation gen, published and not ended: what BeginStop answers
// after its compare-and-set.
func RunningGeneration(pub Published, found bool, gen uint64) bool {
	return found && pub.Generation == gen && !pub.Ended
}

// FindStuck is what ReleaseStuck acts on for reservation resID: its row
// (hasRow false when gone) and the published generation that carries its id
// when that is not ended (an ended one needs no release). Neither is
// not_found.
func FindStuck(resID string, row Reservation, hasRow bool, pub Published, hasPub bool) (Released, error) {
	var out Released
	if hasRow {
		out.Reservation = &row
	}
	if hasPub && !pub.Ended {
		out.Published = &pub
	}
	if out.Reservation == nil && out.Published == nil {
		return Released{}, verdict.Errorf(verdict.CodeNotFound, map[string]any{"reservation_id": resID},
			"no reservation row and no running generation has reservation %s", resID)
	}
	return out, nil
}
