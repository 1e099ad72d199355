package fence

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// Reserve's and Reclaim's decisions, shared by every engine (model/saga.pml's
// order): an engine reads the identity's rows under its lock, asks these, and
// writes only what they decided, so the engines cannot disagree on a branch.

// ReserveOver decides what the identity's existing reservation row means for
// a new reservation with spec by (pid, inc): a different state file is
// identity_state_file_mismatch; an owner not proven dead is own.Displaceable's
// refusal; past phase reserved a child may exist, so the answer is
// NeedsRecovery with the row in Abandoned. Otherwise replace is true: the
// engine swaps the row for a fresh one of ours and answers Reserved with the
// row Displaced. The mismatch is checked first so that a request naming the
// wrong state file is told so without probing the owner's liveness.
func ReserveOver(row Reservation, spec Spec, own *Owner, pid int, inc string) (res ReserveResult, replace bool, err error) {
	if err := displaceCheck(row, spec, own, pid, inc); err != nil {
		return ReserveResult{}, false, err
	}
	if row.Phase >= PhaseHelperInvoked {
		return ReserveResult{Outcome: NeedsRecovery, Abandoned: row}, false, nil
	}
	return ReserveResult{}, true, nil
}

// ReserveFree decides a reservation of id with spec when the identity has no
// reservation row; pub is its published record (hasPub false when none) and
// elsewhere reports whether that record is another host's (always false for
// an engine without hosts). A generation not marked ended with another state
// file is identity_state_file_mismatch; one of another host is
// PublishedElsewhere (only its host can tell whether its session lives);
// one of this host is MaybeExisting. Otherwise insert is true: the engine
// writes a fresh row with the next generation and answers Reserved.
func ReserveFree(id Identity, spec Spec, pub Published, hasPub, elsewhere bool) (res ReserveResult, insert bool, err error) {
	if !hasPub || pub.Ended {
		return ReserveResult{}, true, nil
	}
	if pub.StateFile != spec.StateFile {
		return ReserveResult{}, false, Mismatch(id, pub.StateFile, spec.StateFile)
	}
	if elsewhere {
		return ReserveResult{Outcome: PublishedElsewhere, Published: pub}, false, nil
	}
	return ReserveResult{Outcome: MaybeExisting, Published: pub}, false, nil
}

// ReclaimOver refuses a Reclaim, by (pid, inc) with spec, of the identity's
// row found (ok false when there is none) unless it is still the row pinned
// to expectedResID, with the same state file, and its owner is proven dead
// (or it is our own abandoned attempt). A row gone or replaced means someone
// else recovered it first: fence_lost. nil means the engine replaces the row.
func ReclaimOver(row Reservation, ok bool, expectedResID string, spec Spec, own *Owner, pid int, inc string) error {
	if !ok || row.ID != expectedResID {
		return Lost(expectedResID, "is no longer the identity's row")
	}
	return displaceCheck(row, spec, own, pid, inc)
}

// displaceCheck is what Reserve and Reclaim both ask of an existing row: the
// same state file, and an owner the caller may displace.
func displaceCheck(row Reservation, spec Spec, own *Owner, pid int, inc string) error {
	if row.Spec.StateFile != spec.StateFile {
		return Mismatch(row.Identity, row.Spec.StateFile, spec.StateFile)
	}
	return own.Displaceable(row, pid, inc)
}

// NewReservationID returns a fresh reservation id: 32 lowercase hex
// characters from crypto/rand, so that an id is never reused and a Release
// of an old id never deletes a successor's row.
func NewReservationID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// NewReservation is the fresh row a Reserve writes: resID for id with spec,
// owned by (pid, inc) on host, at phase reserved with generation gen, claimed
// at now with its diagnostic lease.
func NewReservation(resID string, id Identity, spec Spec, pid int, inc string, gen uint64, now time.Time,
	lease time.Duration, host Host) Reservation {
	return Reservation{ID: resID, Identity: id, Spec: spec, OwnerPID: pid, OwnerIncarnation: inc,
		Phase: PhaseReserved, Generation: gen, ClaimedAt: now, UpdatedAt: now, LeaseUntil: now.Add(lease),
		Host: host.Name, HostMachineID: host.MachineID, HostBootID: host.BootID}
}
