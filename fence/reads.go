package fence

import (
	"encoding/json"
	"fmt"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// IdentityReads is what `show` needs of the fence for one identity. The byte
// slices may be shared with an engine's read cache: read them, never modify
// them (their capacity equals their length, so an append copies).
type IdentityReads struct {
	// Reservation is the identity's reservation row, nil when it has none.
	Reservation *Reservation
	// ReservationJSON is json.Marshal(Reservation), or null.
	ReservationJSON []byte
	// VerdictsJSON is the JSON array of the identity's most recent verdicts
	// (up to the limit asked), oldest first, each as json.Marshal encodes a
	// verdict.Record.
	VerdictsJSON []byte
}

// Verdicts decodes VerdictsJSON.
func (r IdentityReads) Verdicts() ([]verdict.Record, error) {
	out := []verdict.Record{}
	if err := json.Unmarshal(r.VerdictsJSON, &out); err != nil {
		return nil, fmt.Errorf("fence: cached verdicts: %w", err)
	}
	return out, nil
}

// HelperSpec is what the pane helper needs of its reservation.
type HelperSpec struct {
	ReservationID string
	Identity      Identity
	Generation    uint64
	Spec          Spec
}

// Released is what ReleaseStuck cleared.
type Released struct {
	Reservation *Reservation // the reservation row removed, if the id named one
	Published   *Published   // the generation marked ended, if the id named one
}
