package lifecycle

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// Fault points of the create saga (docs/contract.md "Fault injection"). Each names the
// moment right after a step, so a test can crash the daemon between any two steps.
const (
	FaultReserved      = "reserved"
	FaultHelperInvoked = "helper_invoked"
	FaultNewSession    = "new-session"
	FaultSpawned       = "spawned"
	FaultTagged        = "tagged"
	FaultPublish       = "publish"
	FaultPublished     = "published"

	// Points of the warm pool (pool.go): a claim replaces new-session with
	// claimed (the standby renamed to the attempt's name) and adds
	// handed-off (its reservation handed to the standby, after spawned);
	// standby-spawned is right after the pool spawned a standby.
	FaultClaimed        = "claimed"
	FaultHandedOff      = "handed-off"
	FaultStandbySpawned = "standby-spawned"
)

var faultPoints = []string{
	FaultReserved, FaultHelperInvoked, FaultNewSession, FaultSpawned,
	FaultTagged, FaultPublish, FaultPublished,
}

// restartFaultPoints are hit only by a restart (restart_start.go); the saga's
// own points are hit by a restart's saga too.
var restartFaultPoints = []string{FaultRestartDecided, FaultRespawned}

// poolFaultPoints are hit only with a warm pool (Config.PoolSize > 0).
var poolFaultPoints = []string{FaultClaimed, FaultHandedOff, FaultStandbySpawned}

// PoolFaultPoints lists the SKC_FAULT points only a warm pool reaches: a
// claim's steps in saga order, then the pool's refill.
func PoolFaultPoints() []string { return append([]string(nil), poolFaultPoints...) }

// FaultPoints lists the create saga's SKC_FAULT points, in saga order.
func FaultPoints() []string { return append([]string(nil), faultPoints...) }

// RestartFaultPoints lists the SKC_FAULT points only a restart reaches, in order.
func RestartFaultPoints() []string { return append([]string(nil), restartFaultPoints...) }

// fault is the parsed SKC_FAULT setting. The zero value (unset) makes hit a single
// string comparison against "", so production pays nothing. restartOnly
// ("after:restart:<point>") fires a saga point only in a restart's saga, so a
// test can crash a restart without crashing the create before it.
type fault struct {
	point       string
	restartOnly bool
}

func parseFault(s string) (fault, error) {
	if s == "" {
		return fault{}, nil
	}
	p, ok := strings.CutPrefix(s, "after:")
	if !ok {
		return fault{}, fmt.Errorf("lifecycle: SKC_FAULT %q: want after:<point>", s)
	}
	if q, only := strings.CutPrefix(p, "restart:"); only {
		for _, known := range append(FaultPoints(), FaultClaimed, FaultHandedOff) {
			if q == known {
				return fault{point: q, restartOnly: true}, nil
			}
		}
		return fault{}, fmt.Errorf("lifecycle: SKC_FAULT %q: unknown point", s)
	}
	for _, known := range append(append(FaultPoints(), restartFaultPoints...), poolFaultPoints...) {
		if p == known {
			return fault{point: p}, nil
		}
	}
	return fault{}, fmt.Errorf("lifecycle: SKC_FAULT %q: unknown point", s)
}

// hitIn is hit for a point of the saga, which creates and restarts share:
// an after:restart:<point> setting fires only when restart is true.
func (f fault) hitIn(restart bool, point string) {
	if f.restartOnly && restart {
		f.restartOnly = false
	}
	f.hit(point)
}

// hit kills the process with SIGKILL when point is the configured fault point: a
// crash that runs no deferred code, exactly like an OOM kill or a power cut.
func (f fault) hit(point string) {
	if f.restartOnly {
		return // after:restart:<point>: only hitIn, in a restart
	}
	if f.point == "" || f.point != point {
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is not deliverable late; never continue past the point
}
