package fence

import "time"

// Claim is what a create served by a warm pool's standby records with its
// reservation (Fence.ReserveClaim): the standby as the attempt's pane — the
// evidence of phase spawned — and the standby's start, as a pane helper
// records its own (RecordHelperStart). Everything in it is known before the
// reservation (the standby was spawned earlier), so the reservation, its
// spawned step and the start record are one transaction instead of three: a
// crash between them could only leave a row at phase reserved, which no
// child can be told from (model/saga.pml, -DPOOL).
type Claim struct {
	// Spawned returns the spawned evidence for the reservation r (its
	// attempt name is made of r's id), or false to leave r at phase
	// reserved: the caller then runs the saga of a create without a standby.
	Spawned func(r Reservation) (Patch, bool)
	// HelperPID is the standby's pid (the process that execs the agent).
	HelperPID int
	// Incarnation is its incarnation (IncarnationOf).
	Incarnation string
	// Cgroup is the cgroup it is in, "" when none.
	Cgroup string
}

// ApplyClaim moves the fresh reservation r (ours, at phase reserved) to
// phase spawned with c's evidence, checked as Advance checks it. applied is
// false, r unchanged, when c.Spawned declines; an invalid claim is refused
// (the engine then writes nothing of the reservation either).
func ApplyClaim(r *Reservation, c Claim, now time.Time, lease time.Duration) (applied bool, err error) {
	if c.Spawned == nil {
		return false, nil
	}
	p, ok := c.Spawned(*r)
	if !ok {
		return false, nil
	}
	if err := CheckAdvance(r, PhaseSpawned, p); err != nil {
		return false, err
	}
	if err := CheckHelperStart(r.ID, c.HelperPID, c.Incarnation); err != nil {
		return false, err
	}
	if err := AdvanceRow(r, PhaseSpawned, p, now, lease); err != nil {
		return false, err
	}
	return true, nil
}
