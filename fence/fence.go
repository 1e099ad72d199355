// Package fence is the journal that makes create-once an invariant (DESIGN
// §5): one reservation row per identity, the published generation of each
// identity, the pane helpers' postmortems and the sequenced verdict log.
//
// This package holds the rules every storage engine shares, and no storage:
// the types (Identity, Spec, Reservation, Published, phases, outcomes), the
// validation and canonicalisation of what is written, the owner liveness rules
// (who may displace a row: only the proven dead), the saga's transition rules,
// the recovery algorithm, the error codes, and the in-memory identities cache.
// An engine lives in a sub-package (fence/sqlite, the embedded default) and
// implements Fence; fence/fencetest is the suite of behaviour tests every
// engine passes. Lifecycle and the API hold a Fence and never name an engine:
// only the daemon's wiring (cmd) and tests do.
//
// What an engine must keep (DESIGN §5, §6): every transition is one short
// transaction, never held across a tmux command or a spawn; mutual exclusion
// outlives the transaction as row state; a row is only ever displaced when its
// owner is proven dead (lease expiry never authorizes takeover); a contended
// database is identity_fence_contended and an unreachable one
// fence_unavailable — never "absent", never a write.
package fence

import (
	"context"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Fence is an open fence: what the create saga, end detection, the restarter,
// the API and the pane helper ask of it. It is safe for concurrent use. Every
// refusal is a *verdict.Error with a stable code; every method canonicalises
// and validates its input itself (CanonicalIdentity, CanonicalSpec, …), so no
// caller can write a row the contract forbids.
type Fence interface {
	// --- The create saga (DESIGN §6) ---

	// Reserve claims the identity's reservation row for this process:
	//   - a row whose state_file differs: identity_state_file_mismatch;
	//   - a row of our own in flight, or of a live owner: identity_reserved_live;
	//     an owner whose liveness is unknown: identity_reserved_unknown;
	//   - a proven-dead owner's row (or our own abandoned one) at phase reserved:
	//     no child can exist, so it is reclaimed in place (Reserved, Displaced
	//     set); at a later phase: NeedsRecovery, with the row in Abandoned;
	//   - no row, and a published generation not marked ended: MaybeExisting,
	//     or PublishedElsewhere when another host of the fleet published it;
	//   - no row otherwise: a fresh row with the next generation (Reserved).
	// Refusals leave no trace.
	Reserve(ctx context.Context, id Identity, spec Spec) (ReserveResult, error)
	// ReserveClaim is Reserve for a create served by a warm pool's standby:
	// when Reserve would answer Reserved and claim.Spawned accepts the new
	// reservation, the row is written at phase spawned with that evidence
	// (ApplyClaim) and the standby's start is recorded (as RecordHelperStart)
	// in the same transaction; Reservation.Phase says whether it was. Any
	// other answer is Reserve's, and nothing of the claim is written.
	ReserveClaim(ctx context.Context, id Identity, spec Spec, claim Claim) (ReserveResult, error)
	// Reclaim replaces the identity's row, pinned to expectedResID, with a
	// fresh reservation of ours; the owner must be proven dead (or the row is
	// our own abandoned attempt). A row that is gone or carries another id is
	// fence_lost. Past phase reserved call it only after a live inspection
	// (RecoverAbandoned).
	Reclaim(ctx context.Context, id Identity, expectedResID string, spec Spec) (Reservation, error)
	// Advance records that the saga reached phase to, with its evidence, on
	// the row r names, and updates r (CheckAdvance's rules). A row that is
	// gone, owned by someone else or abandoned is fence_lost (errors.Is
	// ErrFenceLost): the caller performs no tmux mutation.
	Advance(ctx context.Context, r *Reservation, to Phase, p Patch) error
	// Abandon keeps the row as evidence for recovery and stops treating it as
	// in flight. Abandoning a row that is gone is not an error.
	Abandon(ctx context.Context, resID string) error
	// Release deletes the row pinned to resID; idempotent, never a successor's.
	Release(ctx context.Context, resID string) error
	// Publish publishes r's generation (r ours, at phase tagged) in one
	// transaction with the row's move to phase published and rec's append;
	// rec is returned with its sequence. NewPublished has the rules.
	Publish(ctx context.Context, r *Reservation, rec verdict.Record) (Published, verdict.Record, error)
	// PublishRelease is Publish and Release in one transaction, for a row at
	// phase spawned or tagged: a claimed warm-pool standby's saga, whose tags
	// are set by the time it publishes and whose row has nothing left to do
	// once published (lifecycle, "The warm pool"). The row is gone when it
	// returns nil, and r is at phase published.
	PublishRelease(ctx context.Context, r *Reservation, rec verdict.Record) (Published, verdict.Record, error)
	// RecoverAbandoned resolves a dead owner's row (or our own abandoned one)
	// as Recover describes.
	RecoverAbandoned(ctx context.Context, ab Reservation, insp Inspector) (RecoverResult, error)

	// --- Ends, stops and restarts ---

	// MarkEnded marks the identity's published generation gen ended, as a
	// compare-and-set on the generation (false, nothing written, when it is
	// another one or already ended), appending rec in the same transaction.
	MarkEnded(ctx context.Context, id Identity, gen uint64, rec verdict.Record) (bool, verdict.Record, error)
	// MarkEndedNext is MarkEnded that also records what follows the end (the
	// restart decision) and appends also after rec when not nil: one commit.
	MarkEndedNext(ctx context.Context, id Identity, gen uint64, rec verdict.Record, next RestartNext, also *verdict.Record) (bool, verdict.Record, error)
	// BeginStop records that generation gen is stopping, with the reason and
	// the time SIGKILL is due, unless a stop is already recorded (the first
	// stands). It returns the generation as recorded; ok is false when gen is
	// not the published, not-ended generation.
	BeginStop(ctx context.Context, id Identity, gen uint64, reason string, deadline time.Time) (Published, bool, error)
	// StopKilled records that SIGKILL was sent to the stopping generation gen.
	StopKilled(ctx context.Context, id Identity, gen uint64) error
	// ReleaseStuck is the operator's escape (`fence release --reservation
	// ID`): it removes the reservation row resID, or marks ended the not-ended
	// generation it published, and appends describe's record, in one
	// transaction; allowed is asked inside it and refuses by returning an
	// error. Nothing found is not_found.
	ReleaseStuck(ctx context.Context, resID string, allowed func(Released) error,
		describe func(Released) verdict.Record) (Released, verdict.Record, error)
	// SetRestart changes the restart decision of the ended generation gen as a
	// compare-and-set on its state from, appending also in the same
	// transaction when not nil. ok is false when nothing was written.
	SetRestart(ctx context.Context, id Identity, gen uint64, from string, next RestartNext, also *verdict.Record) (bool, error)
	// RestartsDue lists the identities whose next start is due by before, or
	// all that wait (before zero), earliest first.
	RestartsDue(ctx context.Context, before time.Time) ([]Published, error)

	// --- The pane helper (another process; the daemon may be down) ---

	// RecordHelperStart records the helper's pid, incarnation and cgroup
	// against its reservation; fence_lost when the reservation neither exists
	// nor published its generation (the helper must not run the agent).
	RecordHelperStart(ctx context.Context, resID string, pid int, incarnation, cgroup string) error
	// HelperSpec returns the spec of reservation resID, kept after the row's
	// release until its generation ends; ok is false when there is none.
	HelperSpec(ctx context.Context, resID string) (HelperSpec, bool, error)
	// RecordPostmortem records (or completes) the agent's postmortem, keyed by
	// its reservation id; Identity and Generation may be left zero when
	// RecordHelperStart created the row.
	RecordPostmortem(ctx context.Context, pm Postmortem) error
	// Postmortem returns the postmortem of the identity's generation gen.
	Postmortem(ctx context.Context, id Identity, gen uint64) (Postmortem, bool, error)

	// --- Verdicts ---

	// AppendVerdict and VerdictsSince make the fence the verdict.Journal:
	// sequences increase by one per verdict, in commit order, across restarts.
	verdict.Journal
	// VerdictsFor returns the identity's most recent verdicts, up to limit
	// (all when limit <= 0), oldest first.
	VerdictsFor(ctx context.Context, id Identity, limit int) ([]verdict.Record, error)

	// --- Reads (never a write; consistent with what committed) ---

	// PublishedFor returns the identity's published record, ended or not.
	PublishedFor(ctx context.Context, id Identity) (Published, bool, error)
	// PublishedByReservation returns the published record whose generation
	// reservation resID published, while it is the identity's current one.
	PublishedByReservation(ctx context.Context, resID string) (Published, bool, error)
	// PublishedByTmux returns the published, not-ended generation living in
	// tmux session tmuxID of the server life (serverPID, serverStart).
	PublishedByTmux(ctx context.Context, serverPID int, serverStart int64, tmuxID string) (Published, bool, error)
	// Reservation returns the reservation row with id resID, if it exists.
	Reservation(ctx context.Context, resID string) (Reservation, bool, error)
	// ReservationFor returns the identity's reservation row, if any.
	ReservationFor(ctx context.Context, id Identity) (Reservation, bool, error)
	// Reservations lists every reservation row, oldest claim first.
	Reservations(ctx context.Context) ([]Reservation, error)
	// Identities lists every published identity, ended ones included,
	// ordered by state_dir then session_id.
	Identities(ctx context.Context) ([]Published, error)

	// --- The fleet (every host sharing the fence; SQLite's is this host) ---

	// Host is this handle's host identity, as its owner rows record it.
	Host() Host
	// FleetPublishedByName returns the published, not-ended generation
	// living in the session named name, on whatever host published it.
	FleetPublishedByName(ctx context.Context, name string) (Published, bool, error)
	// FleetIdentities lists every host's published identities, ended ones
	// included, ordered by state_dir then session_id.
	FleetIdentities(ctx context.Context) ([]Published, error)
	// FleetVerdictsSince is VerdictsSince over every host's verdicts, in the
	// fleet-wide sequence order (SQLite: VerdictsSince).
	FleetVerdictsSince(ctx context.Context, after int64, limit int) ([]verdict.Record, error)
	// ForgetHost is the operator's escape for a host that is gone for good
	// (`fence forget --host NAME`): in one transaction it removes every
	// reservation row the host owns, marks its not-ended generations ended
	// and appends describe's record. It refuses this host (CheckForget: the
	// only host whose owners can be proven alive); a host with nothing to
	// forget is not_found.
	ForgetHost(ctx context.Context, host string, describe func(Forgotten) verdict.Record) (Forgotten, verdict.Record, error)

	// --- The hot reads, from memory (see PubCache and IdentityReads) ---

	// CachedPublished returns the published record of the identity whose
	// digest (Identity.Digest) is digest, ended or not.
	CachedPublished(ctx context.Context, digest string) (Published, bool, error)
	// CachedPublishedByName returns the published, not-ended generation
	// living in the session named name.
	CachedPublishedByName(ctx context.Context, name string) (Published, bool, error)
	// CachedLive calls fn for every published, not-ended generation, under
	// the cache's read lock: fn must not call the Fence.
	CachedLive(ctx context.Context, fn func(p *Published)) error
	// CachedLiveEach is CachedLive with one variable overwritten row after
	// row: fn must copy what it keeps.
	CachedLiveEach(ctx context.Context, fn func(p *Published)) error
	// CachedIdentityReads returns what `show` needs of the fence for id (its
	// reservation row and latest verdicts, up to limit), as a fresh read
	// would. id is used as stored (Published.Identity), not canonicalised.
	CachedIdentityReads(ctx context.Context, id Identity, limit int) (IdentityReads, error)

	// Close releases the fence. Reservations still in flight through it are
	// forgotten (they become this process's abandoned attempts).
	Close() error
}
