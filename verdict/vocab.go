package verdict

// The vocabulary below crosses the wire (verdicts.jsonl, the HTTP API, the CLI's
// JSON output), so every word is a named constant and never changes meaning once
// shipped. The constants are untyped strings on purpose: they can be assigned to
// Record's string fields and passed where a Code is expected without conversions.

// Event kind: ECS event.kind. Every verdict is a plain "event".
const (
	// KindEvent is the only event.kind a verdict carries.
	KindEvent = "event"
)

// Outcomes: ECS event.outcome.
const (
	// OutcomeSuccess: the decision went the caller's way (published, existing,
	// reclaimed, a session end that was observed and recorded).
	OutcomeSuccess = "success"
	// OutcomeFailure: refused or failed.
	OutcomeFailure = "failure"
	// OutcomeUnknown: the result could not be established (unresolved recovery,
	// an end whose cause is not known).
	OutcomeUnknown = "unknown"
)

// Actions: ECS event.action, the operation that produced the verdict.
const (
	// ActionCreate is a create request (the create saga).
	ActionCreate = "create"
	// ActionRecover is the recovery of an abandoned reservation.
	ActionRecover = "recover"
	// ActionEnd is the detection of a session end (by the end detection loop or
	// at daemon start).
	ActionEnd = "end"
	// ActionKill is a kill request.
	ActionKill = "kill"
	// ActionAdopt is a published identity taken over by a restarted daemon.
	ActionAdopt = "adopt"
	// ActionRelease is an operator's `fence release` of a stuck row or
	// generation, or `fence forget` of a host's.
	ActionRelease = "release"
	// ActionRestart is a restart request (`restart` verb, POST …/restart):
	// it ends the running generation and starts the next one now.
	ActionRestart = "restart"
)

// Verdicts: skc.verdict.
const (
	// VerdictPublished: a create published a new generation.
	VerdictPublished = "published"
	// VerdictExisting: a create found the identity's live authoritative session.
	VerdictExisting = "existing"
	// VerdictRefused: the fence refused a create; skc.code says why.
	VerdictRefused = "refused"
	// VerdictFailed: a create failed after it was admitted; skc.code says why.
	VerdictFailed = "failed"
	// VerdictReclaimed: recovery reclaimed a dead owner's reservation.
	VerdictReclaimed = "reclaimed"
	// VerdictOrphanCleaned: recovery killed an orphan attempt and confirmed it gone.
	VerdictOrphanCleaned = "orphan_cleaned"
	// VerdictPreserved: recovery found an authoritative child and kept it.
	VerdictPreserved = "preserved"
	// VerdictUnresolved: recovery could not establish what exists; the row is kept.
	VerdictUnresolved = "unresolved"
	// VerdictAdopted: a restarted daemon took over a live published session.
	VerdictAdopted = "adopted"
	// VerdictEnded: a published generation ended: its processes are proven
	// gone; skc.exit_kind says how. A kill
	// request also ends in this verdict (exit kind cleanup, reason
	// killed_by_request), so that every generation has exactly one end.
	VerdictEnded = "ended"
	// VerdictReleased: an operator cleared a reservation row or a generation
	// that could not be proven dead or gone (`fence release`), or every one
	// of a host that is gone for good (`fence forget`).
	VerdictReleased = "released"
	// VerdictGaveUp: an identity with a restart policy ended more often than
	// its start limit allows (restart_burst starts within
	// restart_interval_s); it is not started again until a create.
	VerdictGaveUp = "gave_up"
	// VerdictStopped: an identity waiting out its restart delay (its
	// generation ended, its next start due) was stopped for good before that
	// start: by a kill request (reason killed_by_request, action kill), its
	// kept session was killed by hand (tmux_session_missing, action end), or
	// another host of the fleet created the identity meanwhile
	// (published_elsewhere, action end: the kept session is removed,
	// evidence.host names that host). Its generation's ended verdict came
	// before; nothing starts it again here until a create.
	VerdictStopped = "stopped"
)

// Exit kinds: skc.exit_kind, on an ended verdict only.
const (
	// ExitKindExit: the agent exited while we watched; status or signal recorded
	// (from tmux's dead pane, whose process was the agent itself).
	ExitKindExit = "exit"
	// ExitKindProcessPostmortem: the agent ended while the daemon was down; its
	// status or signal was kept by tmux in the dead pane (or by the pane helper
	// when it could not exec the agent) and read back by the next daemon.
	ExitKindProcessPostmortem = "process_postmortem"
	// ExitKindOwnerLost: no exit of the agent is known: its session went with
	// its pane (killed by hand, or with the tmux server), or the pane's process
	// never got as far as the agent; skc.exit then says what tmux recorded of
	// the pane's process, when anything.
	ExitKindOwnerLost = "owner_lost"
	// ExitKindCleanup: we removed the session (kill request, orphan cleanup,
	// compensation of a failed create); skc.exit says how the agent ended
	// when known (its status after SIGTERM, or SIGKILL after the grace).
	ExitKindCleanup = "cleanup"
)

// Reasons: ECS event.reason, a snake_case word. The reasons for refusals and
// failures come from Classify; these are the others.
const (
	// ReasonCreated: a new generation was published.
	ReasonCreated = "created"
	// ReasonSessionLive: the identity's published session is live and authoritative.
	ReasonSessionLive = "session_live"
	// ReasonInflightPublished: a concurrent create of the same identity published
	// while this one waited for it.
	ReasonInflightPublished = "inflight_published"
	// ReasonOwnerDead: the reservation's owner was proven dead.
	ReasonOwnerDead = "owner_dead"
	// ReasonNoChild: the abandoned reservation had not invoked the helper, so no
	// child can exist.
	ReasonNoChild = "no_child"
	// ReasonChildAbsent: a live inspection found no session for the attempt.
	ReasonChildAbsent = "child_absent"
	// ReasonChildAuthoritative: a live inspection found the attempt's session
	// authoritative.
	ReasonChildAuthoritative = "child_authoritative"
	// ReasonInspectionUnknown: a live inspection could not decide.
	ReasonInspectionUnknown = "inspection_unknown"
	// ReasonDaemonRestart: the verdict was written by a daemon (re)starting.
	ReasonDaemonRestart = "daemon_restart"
	// ReasonAgentExited: the agent exited by itself: its pane is dead (every
	// managed window has remain-on-exit on, whatever the server's config).
	ReasonAgentExited = "agent_exited"
	// ReasonTmuxSessionMissing: the session is gone from tmux while its agent
	// ran (killed by hand); the end is written once its processes are gone.
	ReasonTmuxSessionMissing = "tmux_session_missing"
	// ReasonAgentPaneMissing: the agent's pane was killed or respawned by hand
	// while its session stayed (a person's pane left in it); like a session
	// killed by hand it is a stop, written once the agent's processes are gone.
	ReasonAgentPaneMissing = "agent_pane_missing"
	// ReasonServerExited: the supervised tmux server exited.
	ReasonServerExited = "server_exited"
	// ReasonKilledByRequest: a kill request ended the generation (SIGTERM,
	// SIGKILL after its stop_timeout_ms, then the session removed).
	ReasonKilledByRequest = "killed_by_request"
	// ReasonOrphanCleanup: an orphan attempt was killed during recovery.
	ReasonOrphanCleanup = "orphan_cleanup"
	// ReasonProcessesNotProvenGone: a stopping generation's processes could not be
	// proven gone, even after SIGKILL (verdict unresolved, action end): the
	// identity stays blocked until they are, or until `fence release`.
	ReasonProcessesNotProvenGone = "processes_not_proven_gone"
	// ReasonOperatorRelease: `fence release` cleared it.
	ReasonOperatorRelease = "operator_release"
	// ReasonHostForgotten: `fence forget --host NAME` cleared every row and
	// running generation of a host that is gone for good (one released
	// verdict; its evidence lists them).
	ReasonHostForgotten = "host_forgotten"
	// ReasonPublishedElsewhere: the identity's generation runs on another
	// host of the fleet (an existing verdict; or a stopped one, when it was
	// created there while this host waited to restart it; evidence.host
	// names it).
	ReasonPublishedElsewhere = "published_elsewhere"
	// ReasonRestart: a generation started by the restart policy after its
	// predecessor's agent exited.
	ReasonRestart = "restart"
	// ReasonServerRestart: a generation started by the restart policy after
	// the tmux server died (or the host rebooted) under its predecessor.
	ReasonServerRestart = "server_restart"
	// ReasonManualRestart: a generation started by a restart request.
	ReasonManualRestart = "manual_restart"
	// ReasonStartLimit: the gave_up verdict's reason: more starts than
	// restart_burst within restart_interval_s.
	ReasonStartLimit = "start_limit"
)

// Verdicts lists every skc.verdict value, for documentation and tests.
var Verdicts = []string{
	VerdictPublished, VerdictExisting, VerdictRefused, VerdictFailed,
	VerdictReclaimed, VerdictOrphanCleaned, VerdictPreserved, VerdictUnresolved,
	VerdictAdopted, VerdictEnded, VerdictReleased, VerdictGaveUp, VerdictStopped,
}

// Actions lists every event.action value.
var Actions = []string{ActionCreate, ActionRecover, ActionEnd, ActionKill, ActionAdopt, ActionRelease, ActionRestart}

// Outcomes lists every event.outcome value.
var Outcomes = []string{OutcomeSuccess, OutcomeFailure, OutcomeUnknown}

// ExitKinds lists every skc.exit_kind value.
var ExitKinds = []string{ExitKindExit, ExitKindProcessPostmortem, ExitKindOwnerLost, ExitKindCleanup}

// Reasons lists the event.reason values that are not tied to an error code
// (those are in Classify's table; AllReasons returns both).
var Reasons = []string{
	ReasonCreated, ReasonSessionLive, ReasonInflightPublished, ReasonOwnerDead,
	ReasonNoChild, ReasonChildAbsent, ReasonChildAuthoritative, ReasonInspectionUnknown,
	ReasonDaemonRestart, ReasonAgentExited, ReasonTmuxSessionMissing, ReasonAgentPaneMissing, ReasonServerExited,
	ReasonKilledByRequest, ReasonOrphanCleanup, ReasonProcessesNotProvenGone, ReasonOperatorRelease,
	ReasonHostForgotten, ReasonPublishedElsewhere, ReasonRestart, ReasonServerRestart, ReasonManualRestart, ReasonStartLimit,
}

// AllReasons returns every event.reason value: Reasons followed by the reason of
// every code in Codes, without duplicates.
func AllReasons() []string {
	seen := make(map[string]bool)
	var out []string
	add := func(r string) {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	for _, r := range Reasons {
		add(r)
	}
	for _, c := range Codes {
		add(Classify(c).Reason)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
