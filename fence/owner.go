package fence

import (
	"errors"
	"os"
	"sync"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Owner is one fence handle's side of the ownership rules, the same for every
// engine: who this process is as a row owner, which rows it has in flight, and
// whether another owner's row may be displaced. An engine keeps one per handle
// (NewOwner) and asks it inside its transactions.
type Owner struct {
	opt Options

	mu  sync.Mutex
	pid int
	inc string

	hostOnce sync.Once
	host     Host
	hostErr  error
}

// NewOwner returns the owner of a handle opened with opt (defaults applied).
func NewOwner(opt Options) *Owner { return &Owner{opt: opt.WithDefaults()} }

// inflight holds the reservation ids this process is acting on right now. It
// is process-wide because ownership is per process: a row owned by our pid and
// incarnation is in flight (it blocks) or our own abandoned attempt
// (resolvable). Abandon and Release take an id out; closing a handle takes out
// the ids it put in.
var inflight = struct {
	sync.Mutex
	m map[string]*Owner
}{m: map[string]*Owner{}}

// Track marks reservation id in flight through o. Call it inside the
// transaction that writes the row, before COMMIT: there is then no instant
// where our own row looks abandoned.
func (o *Owner) Track(id string) {
	inflight.Lock()
	inflight.m[id] = o
	inflight.Unlock()
}

// Untrack takes reservation id out of flight (Abandon, Release, a failed write).
func Untrack(id string) {
	inflight.Lock()
	delete(inflight.m, id)
	inflight.Unlock()
}

// InFlight reports whether this process is acting on reservation id.
func InFlight(id string) bool {
	inflight.Lock()
	defer inflight.Unlock()
	_, ok := inflight.m[id]
	return ok
}

// Forget takes every reservation o put in flight out of it (the handle's Close).
func (o *Owner) Forget() {
	inflight.Lock()
	for id, owner := range inflight.m {
		if owner == o {
			delete(inflight.m, id)
		}
	}
	inflight.Unlock()
}

// Self returns this process's owner identity (pid, incarnation), cached once
// known; Options.Self replaces it. An error is identity_incarnation_unavailable.
func (o *Owner) Self() (int, string, error) {
	if o.opt.Self != nil {
		pid, inc, err := o.opt.Self()
		if err == nil && inc == "" {
			err = errors.New("empty incarnation")
		}
		return pid, inc, incarnationErr(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.inc == "" {
		pid := os.Getpid()
		inc, err := Incarnation(pid)
		if err != nil {
			return 0, "", incarnationErr(err)
		}
		o.pid, o.inc = pid, inc
	}
	return o.pid, o.inc, nil
}

func incarnationErr(err error) error {
	if err == nil {
		return nil
	}
	return verdict.Errorf(verdict.CodeIdentityIncarnationUnavailable, nil,
		"cannot establish this process's incarnation: %w", err)
}

// Host returns the host this handle's rows are written from: Options.Host
// completed by LocalHost, once. It is asked when a row is written, not at
// open: the pane helper opens the fence and writes no owner rows. (The daemon
// checks SKC_HOST at start.)
func (o *Owner) Host() (Host, error) {
	o.hostOnce.Do(func() { o.host, o.hostErr = LocalHost(o.opt.Host) })
	return o.host, o.hostErr
}

// Live decides the liveness of row's owner from this handle's host
// (OwnerLive, with Options.Liveness as the probe); LiveUnknown when this
// host's identity cannot be established.
func (o *Owner) Live(row Reservation) Live {
	here, err := o.Host()
	if err != nil {
		return LiveUnknown
	}
	return OwnerLive(row, here, o.opt.Liveness)
}

// Displaceable returns nil when row's owner is proven dead (OwnerLive: on this
// host, by a probe or an earlier boot) or the row is our own attempt (pid,
// inc) that is no longer in flight; otherwise the refusal:
// identity_reserved_live for a live owner or our own attempt in flight,
// identity_reserved_unknown when the owner's liveness cannot be established —
// an owner on another host always (details.host) — fail closed: only the
// proven dead are displaced.
func (o *Owner) Displaceable(row Reservation, pid int, inc string) error {
	details := map[string]any{"owner_pid": row.OwnerPID, "reservation_id": row.ID, "phase": row.Phase.String()}
	if here, err := o.Host(); err == nil && !SameHost(row.OwnerHost(), here) {
		details["host"] = row.Host
		return verdict.Errorf(verdict.CodeIdentityReservedUnknown, details,
			"the identity is reserved by process %d on host %s, whose liveness cannot be proven from here (reservation %s)",
			row.OwnerPID, row.Host, row.ID)
	}
	if row.OwnerPID == pid && row.OwnerIncarnation == inc {
		if InFlight(row.ID) {
			return verdict.Errorf(verdict.CodeIdentityReservedLive, details,
				"the identity is being created by this process (reservation %s, phase %s)", row.ID, row.Phase)
		}
		return nil
	}
	switch l := o.Live(row); l {
	case Dead:
		return nil
	case Alive:
		return verdict.Errorf(verdict.CodeIdentityReservedLive, details,
			"the identity is reserved by live process %d (reservation %s, phase %s)", row.OwnerPID, row.ID, row.Phase)
	default:
		return verdict.Errorf(verdict.CodeIdentityReservedUnknown, details,
			"the identity is reserved by process %d whose liveness cannot be established (reservation %s)", row.OwnerPID, row.ID)
	}
}

// CheckOwn decides whether the row read for resID (found reports whether one
// was) is still ours, (pid, inc): same owner, not abandoned, in flight in this
// process. Anything else is fence_lost: Advance and Publish write nothing.
func CheckOwn(row Reservation, found bool, resID string, pid int, inc string) error {
	switch {
	case !found:
		return Lost(resID, "no longer exists")
	case row.OwnerPID != pid || row.OwnerIncarnation != inc:
		return Lost(resID, "is owned by another process")
	case row.Abandoned || !InFlight(resID):
		return Lost(resID, "was abandoned")
	}
	return nil
}
