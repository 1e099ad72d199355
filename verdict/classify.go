package verdict

import "net/http"

// Code is a stable snake_case error code. It appears in API errors
// (error.code), in CLI JSON output and in verdicts (skc.code).
//
// Code is an alias of string, not a defined type, so that a code moves between
// Error.Code, Record.Code (a string: it is a wire field) and CodeOf without
// conversions at every call site; Classify and the tests guard the vocabulary.
type Code = string

// Error codes. Each has exactly one row in Classify's table; a test keeps the two
// in step.
const (
	// CodeInvalidRequest: the input broke a docs/contract.md input limit;
	// details.field names the field.
	CodeInvalidRequest Code = "invalid_request"
	// CodeNotFound: no such session.
	CodeNotFound Code = "not_found"
	// CodePermissionDenied: the peer's credentials are not allowed.
	CodePermissionDenied Code = "permission_denied"
	// CodeBodyTooLarge: the API request body is over 1 MiB.
	CodeBodyTooLarge Code = "body_too_large"
	// CodeMethodNotAllowed: the API path exists but not with this method;
	// details.allowed (and the Allow header) lists the methods it takes.
	CodeMethodNotAllowed Code = "method_not_allowed"
	// CodeIdentityReservedLive: a live owner holds the identity's reservation, or its previous generation is still stopping (details.stopping: its processes are not proven gone yet).
	CodeIdentityReservedLive Code = "identity_reserved_live"
	// CodeIdentityReservedUnknown: the owner's liveness cannot be established, so
	// the reservation is not displaced.
	CodeIdentityReservedUnknown Code = "identity_reserved_unknown"
	// CodeIdentityFenceContended: the fence stayed busy (or an in-flight create did
	// not finish) within the wait; retrying later may succeed.
	CodeIdentityFenceContended Code = "identity_fence_contended"
	// CodeIdentityIncarnationUnavailable: our own incarnation (process start time,
	// boot id) cannot be read, so no reservation can be claimed safely.
	CodeIdentityIncarnationUnavailable Code = "identity_incarnation_unavailable"
	// CodeIdentityOrphanUnresolved: an abandoned attempt may still be alive and a
	// live inspection could not decide.
	CodeIdentityOrphanUnresolved Code = "identity_orphan_unresolved"
	// CodeIdentityExistingOwner: recovery found the abandoned attempt's session
	// authoritative and preserved it.
	CodeIdentityExistingOwner Code = "identity_existing_owner"
	// CodeIdentityStateFileMismatch: the identity is recorded with another
	// state_file.
	CodeIdentityStateFileMismatch Code = "identity_state_file_mismatch"
	// CodeFenceLost: the reservation row is no longer ours; no tmux mutation follows.
	CodeFenceLost Code = "fence_lost"
	// CodeSpawnFailed: the command could not be started: details.reason is
	// executable_not_found, not_executable, cwd_missing or helper_missing (the
	// daemon's own binary, the pane command, cannot be run) when it was refused
	// before anything started, absent when tmux refused or failed new-session.
	// HTTP 422: as a rule the request names something that cannot run.
	CodeSpawnFailed Code = "spawn_failed"
	// CodeTagFailed: the @skc-* tags could not be set on the new session.
	CodeTagFailed Code = "tag_failed"
	// CodeTmuxUnavailable: the supervised tmux server is not reachable.
	CodeTmuxUnavailable Code = "tmux_unavailable"
	// CodeFenceUnavailable: the fence database cannot be read or written.
	CodeFenceUnavailable Code = "fence_unavailable"
	// CodeFenceSchemaNewer: the fence was migrated by a newer skc-supervisor
	// (details.schema_version, details.supported): this binary cannot read it
	// and must not change it. Exit 2, like any configuration a restart cannot
	// fix (the systemd unit does not retry it): run that version or a later one.
	CodeFenceSchemaNewer Code = "fence_schema_newer"
	// CodeTimeout: the operation's deadline passed.
	CodeTimeout Code = "timeout"
	// CodeInternal: a bug or an unclassified failure.
	CodeInternal Code = "internal"
	// CodeDaemonUnreachable: the CLI cannot reach the daemon (client side only).
	CodeDaemonUnreachable Code = "daemon_unreachable"
	// CodeBusy: the supervisor cannot take this now — another daemon holds
	// SKC_HOME, too many creates are in flight, or it is shutting down. Retrying
	// later is the right answer, hence one code and exit 75 (EX_TEMPFAIL).
	CodeBusy Code = "busy"
	// CodeAgentNotRunning: the session exists but its agent does not run (its
	// pane is dead), so there is nothing to type into.
	CodeAgentNotRunning Code = "agent_not_running"
	// CodeRemoteSession: the session runs on another host of the fleet
	// (details.host): only that host's daemon acts on it (kill, restart,
	// screen, input, output, wait, attach); show works anywhere.
	CodeRemoteSession Code = "remote_session"
)

// Status words of API error bodies: {"status": …, "error": {…}}.
const (
	// StatusInvalid: the request was malformed; fix it before retrying.
	StatusInvalid = "invalid"
	// StatusRefused: the fence refused the create.
	StatusRefused = "refused"
	// StatusError: everything else.
	StatusError = "error"
)

// CLI exit codes (docs/contract.md). The high ones are sysexits.h values, so shell
// scripts can tell "retry later" (75) from "start the daemon" (69).
const (
	// ExitOK is success (create: published or existing).
	ExitOK = 0
	// ExitFailed is an operation that failed.
	ExitFailed = 1
	// ExitUsage is a usage error or invalid input (also a configuration a
	// restart cannot fix: a fence of a newer schema).
	ExitUsage = 2
	// ExitRefused is a create refused by the fence.
	ExitRefused = 3
	// ExitNotFound is no such session.
	ExitNotFound = 4
	// ExitDaemonUnreachable is EX_UNAVAILABLE: the daemon is not running or not reachable.
	ExitDaemonUnreachable = 69
	// ExitBusy is EX_TEMPFAIL: another daemon holds SKC_HOME, or the fence stayed contended.
	ExitBusy = 75
	// ExitPermission is EX_NOPERM: peer credentials refused.
	ExitPermission = 77
)

// Class is how one code travels: its HTTP status, CLI exit code, the verdict
// reason (event.reason) of a verdict carrying it, and the API status word.
type Class struct {
	HTTP   int    // HTTP status of an API error with this code
	Exit   int    // CLI exit code
	Reason string // event.reason of a verdict with this skc.code
	Status string // StatusInvalid, StatusRefused or StatusError
}

// classes is THE table. Refusals by the fence are 409/exit 3, except the
// contended one: docs/contract.md gives "the fence stayed contended" exit 75 (try again
// later), and its HTTP status stays 409 because the fence refused. fence_lost is a
// conflict discovered mid-create: 409 but a failure (exit 1), not a refusal.
var classes = map[Code]Class{
	CodeInvalidRequest:                 {http.StatusBadRequest, ExitUsage, "invalid_input", StatusInvalid},
	CodeNotFound:                       {http.StatusNotFound, ExitNotFound, "no_such_session", StatusError},
	CodePermissionDenied:               {http.StatusForbidden, ExitPermission, "peer_not_allowed", StatusError},
	CodeBodyTooLarge:                   {http.StatusRequestEntityTooLarge, ExitUsage, "body_too_large", StatusInvalid},
	CodeMethodNotAllowed:               {http.StatusMethodNotAllowed, ExitUsage, "method_not_allowed", StatusInvalid},
	CodeIdentityReservedLive:           {http.StatusConflict, ExitRefused, "owner_alive", StatusRefused},
	CodeIdentityReservedUnknown:        {http.StatusConflict, ExitRefused, "owner_liveness_unknown", StatusRefused},
	CodeIdentityFenceContended:         {http.StatusConflict, ExitBusy, "fence_contended", StatusRefused},
	CodeIdentityIncarnationUnavailable: {http.StatusConflict, ExitRefused, "incarnation_unavailable", StatusRefused},
	CodeIdentityOrphanUnresolved:       {http.StatusConflict, ExitRefused, "orphan_unresolved", StatusRefused},
	CodeIdentityExistingOwner:          {http.StatusConflict, ExitRefused, "existing_owner_preserved", StatusRefused},
	CodeIdentityStateFileMismatch:      {http.StatusConflict, ExitRefused, "state_file_mismatch", StatusRefused},
	CodeFenceLost:                      {http.StatusConflict, ExitFailed, "reservation_lost", StatusError},
	CodeSpawnFailed:                    {http.StatusUnprocessableEntity, ExitFailed, "new_session_failed", StatusError},
	CodeTagFailed:                      {http.StatusInternalServerError, ExitFailed, "tagging_failed", StatusError},
	CodeTmuxUnavailable:                {http.StatusServiceUnavailable, ExitFailed, "tmux_unreachable", StatusError},
	CodeFenceUnavailable:               {http.StatusServiceUnavailable, ExitFailed, "fence_unreachable", StatusError},
	CodeFenceSchemaNewer:               {http.StatusServiceUnavailable, ExitUsage, "fence_schema_newer", StatusError},
	CodeTimeout:                        {http.StatusGatewayTimeout, ExitFailed, "deadline_exceeded", StatusError},
	CodeInternal:                       {http.StatusInternalServerError, ExitFailed, "internal_error", StatusError},
	CodeDaemonUnreachable:              {http.StatusServiceUnavailable, ExitDaemonUnreachable, "daemon_unreachable", StatusError},
	CodeBusy:                           {http.StatusServiceUnavailable, ExitBusy, "busy", StatusError},
	CodeAgentNotRunning:                {http.StatusConflict, ExitFailed, "agent_not_running", StatusError},
	CodeRemoteSession:                  {http.StatusConflict, ExitFailed, "session_on_other_host", StatusError},
}

// Codes lists every code in documentation order.
var Codes = []Code{
	CodeInvalidRequest, CodeNotFound, CodePermissionDenied, CodeBodyTooLarge,
	CodeMethodNotAllowed, CodeIdentityReservedLive, CodeIdentityReservedUnknown, CodeIdentityFenceContended,
	CodeIdentityIncarnationUnavailable, CodeIdentityOrphanUnresolved,
	CodeIdentityExistingOwner, CodeIdentityStateFileMismatch,
	CodeFenceLost, CodeSpawnFailed, CodeTagFailed, CodeTmuxUnavailable,
	CodeFenceUnavailable, CodeFenceSchemaNewer, CodeTimeout, CodeInternal, CodeDaemonUnreachable, CodeBusy,
	CodeAgentNotRunning, CodeRemoteSession,
}

// Classify returns the class of code: THE one table mapping a code to its HTTP
// status, CLI exit code, verdict reason and API status word. An unknown code
// (a bug, or a newer peer) is classified as internal, never as success.
func Classify(code Code) Class {
	if c, ok := classes[code]; ok {
		return c
	}
	return classes[CodeInternal]
}

// Known reports whether code is in the table.
func Known(code Code) bool {
	_, ok := classes[code]
	return ok
}

// IsRefusal reports whether code is a refusal by the fence (verdict refused,
// exit 3 or 75), as opposed to a failure.
func IsRefusal(code Code) bool {
	return Known(code) && Classify(code).Status == StatusRefused
}
