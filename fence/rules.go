package fence

import (
	"errors"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// The saga's transition rules, shared by every engine: an engine reads the
// rows inside its transaction, asks these, and writes what they decided.

// ErrFenceLost is the cause of every fence_lost error: the reservation row is
// no longer ours, and the caller must perform no tmux mutation.
var ErrFenceLost = errors.New("fence lost: the reservation row is no longer ours")

// Lost is the fence_lost refusal for reservation resID (errors.Is ErrFenceLost);
// why completes "reservation <id> …".
func Lost(resID, why string) error {
	return &verdict.Error{Code: verdict.CodeFenceLost, Err: ErrFenceLost,
		Details: map[string]any{"reservation_id": resID},
		Message: "reservation " + resID + " " + why}
}

// Mismatch is the identity_state_file_mismatch refusal: the identity is
// recorded with state file recorded, and a request asked for asked.
func Mismatch(id Identity, recorded, asked string) error {
	return verdict.Errorf(verdict.CodeIdentityStateFileMismatch,
		map[string]any{"field": "state_file", "recorded": recorded, "requested": asked},
		"identity %s/%s is recorded with state file %s, not %s", id.StateDir, id.SessionID, recorded, asked)
}

// CheckAdvance validates an Advance of r to phase to with evidence p before
// anything is read: a nil reservation, a malformed id, an unknown or backwards
// phase, PhasePublished before Publish recorded it (Advance to published after
// Publish only re-confirms ownership), or missing evidence (attempt name at
// helper_invoked, tmux id at spawned) is invalid_request.
func CheckAdvance(r *Reservation, to Phase, p Patch) error {
	if err := CheckReservation(r); err != nil {
		return err
	}
	switch {
	case !to.Valid():
		return Invalid("phase", "unknown phase %d", int(to))
	case to == PhasePublished && r.Phase != PhasePublished:
		return Invalid("phase", "phase published is recorded by Publish")
	case to < r.Phase:
		return Invalid("phase", "phase %s is before the reservation's %s", to, r.Phase)
	}
	return CheckPatch(r.ID, to, p)
}

// CheckPublishPhase refuses to publish the row cur unless it is at phase
// tagged — or, with release (PublishRelease: a claimed standby's saga, which
// sets its tags after spawned and records no tagged step), at spawned.
func CheckPublishPhase(cur Reservation, release bool) error {
	if cur.Phase == PhaseTagged || release && cur.Phase == PhaseSpawned {
		return nil
	}
	want := "tagged"
	if release {
		want = "spawned or tagged"
	}
	return Invalid("phase", "publish needs phase %s; reservation %s is at %s", want, cur.ID, cur.Phase)
}

// ApplyPatch moves the row r to phase to at now, renewing its diagnostic lease,
// and records p's non-zero evidence.
func ApplyPatch(r *Reservation, to Phase, p Patch, now time.Time, lease time.Duration) {
	r.Phase, r.UpdatedAt, r.LeaseUntil = to, now, now.Add(lease)
	if p.AttemptName != "" {
		r.AttemptName = p.AttemptName
	}
	if p.TmuxID != "" {
		r.TmuxID = p.TmuxID
	}
	if p.PanePID != 0 {
		r.PanePID = p.PanePID
	}
	if p.ServerPID != 0 {
		r.ServerPID = p.ServerPID
	}
	if p.ServerStart != 0 {
		r.ServerStart = p.ServerStart
	}
	if p.PaneStart != 0 {
		r.PaneStart = p.PaneStart
	}
	if p.Cgroup != "" {
		r.Cgroup = p.Cgroup
	}
}

// NewPublished is the record Publish writes for the row cur (ours, at phase
// tagged, StartReason carried from the caller's reservation) at now, over the
// identity's published record old (hadOld false when there is none). It
// refuses a generation not above the published one (internal: generations
// only grow), and a restart whose identity no longer waits for its next start
// (agent_not_running: a kill cancelled it while it was under way — nothing
// failed to spawn, and an alert on spawn_failed must not fire for a kill).
func NewPublished(cur Reservation, old Published, hadOld bool, now time.Time) (Published, error) {
	if hadOld && old.Generation >= cur.Generation {
		return Published{}, verdict.Errorf(verdict.CodeInternal, map[string]any{"generation": cur.Generation},
			"generation %d is not above the published %d", cur.Generation, old.Generation)
	}
	if cur.StartReason != "" && (!hadOld || !old.Ended || old.Restart.State != RestartExited) {
		return Published{}, verdict.Errorf(verdict.CodeAgentNotRunning, map[string]any{"restart_state": old.Restart.State},
			"restart of generation %d cancelled: the identity no longer waits for its next start", old.Generation)
	}
	pub := Published{Identity: cur.Identity, Generation: cur.Generation, ReservationID: cur.ID,
		SessionName: cur.AttemptName, TmuxID: cur.TmuxID, ServerPID: cur.ServerPID, ServerStart: cur.ServerStart,
		StateFile: cur.Spec.StateFile, Label: cur.Spec.Label, PublishedAt: now,
		PanePID: cur.PanePID, PaneStart: cur.PaneStart, Cgroup: cur.Cgroup,
		StopTimeoutMS: cur.Spec.StopTimeout().Milliseconds(), Spec: cur.Spec,
		Host: cur.Host, HostMachineID: cur.HostMachineID}
	pub.Restart = nextStarts(old, hadOld, cur.StartReason, now)
	if hadOld {
		pub.Superseded = &old
	}
	pub.BootID, _ = bootID() // "" only where the fence could not have reserved either
	return pub, nil
}

// maxStarts bounds the start times kept per identity: the start limit
// (restart_burst, at most this) needs no more.
const maxStarts = 100

// nextStarts is the restart bookkeeping of a generation published at now: a
// restart (reason set, over an earlier generation) counts one more start
// after the first and keeps the consecutive failures; a create starts over. A
// person's restart request counts too, but starts the start limit's window
// and the backoff afresh: a give-up it overrides (or a crash loop it answers)
// would otherwise give up again at the first end.
func nextStarts(old Published, hadOld bool, reason string, now time.Time) RestartInfo {
	switch {
	case reason == "" || !hadOld:
		return RestartInfo{Starts: []time.Time{now}}
	case reason == verdict.ReasonManualRestart:
		return RestartInfo{Restarts: old.Restart.Restarts + 1, Starts: []time.Time{now}}
	}
	starts := append(append([]time.Time(nil), old.Restart.Starts...), now)
	if len(starts) > maxStarts {
		starts = starts[len(starts)-maxStarts:]
	}
	return RestartInfo{Restarts: old.Restart.Restarts + 1, Failures: old.Restart.Failures, Starts: starts}
}

// RestartDue is when next's start is due, written at now: zero unless it waits
// (RestartExited).
func RestartDue(next RestartNext, now time.Time) time.Time {
	if next.State != RestartExited {
		return time.Time{}
	}
	return now.Add(next.Delay)
}
