package lifecycle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/proctree"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// saga runs the steps after the reservation, each recorded in the fence before the
// next starts, in the order of model/saga.pml: helper_invoked (before
// new-session) → new-session → spawned → tags → tagged → publish → published →
// release. A create that claims a warm pool's standby runs the shorter
// claimSaga instead (pool_claim.go). A failure compensates in reverse (see undo).
func (m *Manager) saga(ctx context.Context, a *attempt) (res CreateResult, retErr error) {
	defer func() {
		if retErr != nil {
			retErr = m.undo(ctx, a, retErr)
			m.pool.dropHandoff(a.claimed) // a standby killed before it read it
		}
		if a.pooled {
			m.pool.refill()
		}
	}()
	// A command that cannot start is refused while nothing exists in tmux:
	// undo only releases the reservation (spawncheck.go). A create whose
	// reservation recorded a standby checked it before it took the standby.
	if a.preclaim == nil {
		if err := checkCommand(a.req.Spec, os.Getenv("PATH"), a.restart != nil); err != nil {
			return res, err
		}
		if err := m.checkHelper(); err != nil {
			return res, err
		}
	}
	a.name = attemptName(a.digest, a.res.ID)
	invoked := fence.Patch{AttemptName: a.name}
	kept := a.kept()
	if kept != nil { // a restart (or a create) in the kept session: its name stays
		a.name, invoked.AttemptName, invoked.Kept = kept.name, kept.name, true
	}
	if kept == nil {
		if a.preclaim != nil {
			return m.claimSaga(ctx, a, a.preclaim.sb)
		}
		if sb, ok := m.takeStandby(); ok {
			return m.claimSaga(ctx, a, sb)
		}
	}
	if err := m.advance(ctx, a, fence.PhaseHelperInvoked, invoked); err != nil {
		return res, err
	}
	m.fault.hitIn(a.restart != nil, FaultHelperInvoked)
	if err := m.spawnOrRespawn(ctx, a, kept); err != nil {
		return res, err
	}
	return m.afterSpawn(ctx, a)
}

// afterSpawn is the saga from new-session (or respawn-pane) on: spawned,
// tags, tagged, publish, release.
func (m *Manager) afterSpawn(ctx context.Context, a *attempt) (res CreateResult, retErr error) {
	// What holds the generation's processes, recorded before publication:
	// the pane's process (a session leader, the tmux server's child) by pid
	// and start time, and the cgroup it enters. A pane process already gone
	// (0) never started an agent: that happens only after publication.
	a.paneStart, _ = proctree.ChildStartTime(a.panePID, a.life.PID)
	patch := fence.Patch{TmuxID: a.tmuxID, PanePID: a.panePID, ServerPID: a.life.PID, ServerStart: a.life.StartTime,
		PaneStart: a.paneStart, Cgroup: proctree.GenerationCgroup(m.cgroupBase, a.res.ID)}
	if err := m.advance(ctx, a, fence.PhaseSpawned, patch); err != nil {
		return res, err
	}
	m.fault.hitIn(a.restart != nil, FaultSpawned)
	if spawnedHook != nil {
		spawnedHook(a)
	}
	if err := m.tag(ctx, a); err != nil {
		return res, err
	}
	if !a.respawned { // a kept session is in the census already
		if err := m.admitCreated(a); err != nil {
			return res, err
		}
	}
	// No wait for the pane helper here: it reads its spec from the fence's
	// specs table, which outlives the row's release until the generation ends,
	// so it may start before or after publication (its gate — exec the agent
	// only once this generation is published and its own — is unchanged). A
	// helper that cannot start is not detected by the create: its pane dies,
	// and end detection writes the generation's ended verdict (owner_lost when
	// the helper never recorded its start; a failed exec's postmortem status,
	// 127 or 126, when it did).
	if err := m.advance(ctx, a, fence.PhaseTagged, fence.Patch{}); err != nil {
		return res, err
	}
	m.fault.hitIn(a.restart != nil, FaultTagged)
	return m.publish(ctx, a)
}

// spawnedHook, when a test sets it, runs once an attempt's spawned phase is
// recorded, before its tags: a test can move tmux under the start there.
var spawnedHook func(a *attempt)

// ownBusyWait bounds how long the attempt's own transitions (advance,
// publish) wait out a busy fence (identity_fence_contended). The attempt holds
// the identity's reservation; what keeps the fence busy is other creators'
// short transactions queued on the identity's lock — on a fleet, every host's
// racers — and giving up would fail (503) a create that is about to succeed,
// leaving its row to recovery. A busy answer wrote nothing, so the
// transition is simply tried again.
const ownBusyWait = 5 * time.Second

// whileBusy runs f until it answers other than identity_fence_contended, for
// up to ownBusyWait (or until ctx ends), and returns its last answer.
func whileBusy(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(ownBusyWait)
	for {
		err := f()
		if verdict.CodeOf(err) != verdict.CodeIdentityFenceContended || time.Now().After(deadline) ||
			!sleepCtx(ctx, 5*time.Millisecond) {
			return err
		}
	}
}

// advance records a phase, waiting out a busy fence (whileBusy); a lost fence
// stops the attempt with no further tmux mutation.
func (m *Manager) advance(ctx context.Context, a *attempt, to fence.Phase, p fence.Patch) error {
	start := time.Now()
	err := whileBusy(ctx, func() error { return m.fence.Advance(ctx, &a.res, to, p) })
	m.met.fenceOp(fenceOpAdvance, start)
	if err == nil {
		return nil
	}
	if verdict.CodeOf(err) == verdict.CodeFenceLost {
		a.fenceLost = true
		return err
	}
	return verdict.Errorf(verdict.CodeFenceUnavailable, nil, "advance to %s: %w", to, err)
}

// spawn sends new-session in the server life the attempt is decided in and learns
// the ids from its -P reply.
//
// A new-session that provably was not sent (no connection, or the server life
// changed before it was written) is sent once more in the current life, after
// waiting up to censusSyncWait for a connection: the reservation was decided by
// the fence, not by a server life, and no session of the attempt exists, so this
// is the saga started a moment later — it lets a create that met the server's
// death still publish on the new server.
func (m *Manager) spawn(ctx context.Context, a *attempt) error {
	var reply tmuxctl.Reply
	err := errors.New("not tried")
	for try := 0; try < 2 && err != nil; try++ {
		life, ok := m.awaitLife(ctx)
		if !ok {
			return verdict.Errorf(verdict.CodeTmuxUnavailable, nil, "tmux not connected")
		}
		a.life = life
		a.sent = true
		reply, err = m.commandIn(ctx, life, m.newSessionArgs(a)...)
		if err != nil && !notSent(err) {
			break
		}
		a.sent = err == nil
	}
	if err != nil {
		return m.spawnError(a, err)
	}
	sp, err := parseSpawn(reply)
	if err != nil {
		// tmux answered, so a session exists, but we cannot name it by id:
		// recovery finds it by its unique attempt name.
		a.uncertain = true
		return verdict.Errorf(verdict.CodeSpawnFailed, nil, "%w", err)
	}
	a.tmuxID, a.panePID, a.paneID, a.created, a.spawned = sp.id, sp.panePID, sp.paneID, sp.created, reply.Number
	return nil
}

// awaitLife returns the server life the control connection reaches now, waiting
// up to censusSyncWait for one while there is none (a reconnect in flight).
func (m *Manager) awaitLife(ctx context.Context) (tmuxctl.ServerLife, bool) {
	deadline := time.Now().Add(censusSyncWait)
	for {
		if life, ok := m.serverLife(); ok {
			return life, true
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, pollInterval) {
			return tmuxctl.ServerLife{}, false
		}
	}
}

func notSent(err error) bool {
	return errors.Is(err, tmuxctl.ErrNotConnected) || errors.Is(err, tmuxctl.ErrLifeChanged)
}

// spawnError classifies a failed new-session. An %error block or a refusal before
// the line was written means no session exists; anything else (the connection
// dropped, the deadline passed) leaves the outcome unknown.
func (m *Manager) spawnError(a *attempt, err error) error {
	var ce *tmuxctl.CommandError
	switch {
	case errors.As(err, &ce):
		a.sent = false // tmux refused it whole: new-session destroys what it began
		return verdict.Errorf(verdict.CodeSpawnFailed, map[string]any{"tmux": ce.Lines}, "new-session: %w", err)
	case errors.Is(err, tmuxctl.ErrNotConnected), errors.Is(err, tmuxctl.ErrLifeChanged):
		a.sent = false
		return verdict.Errorf(verdict.CodeTmuxUnavailable, nil, "new-session not sent: %w", err)
	}
	a.uncertain = true
	if timedOut(err) {
		return verdict.Errorf(verdict.CodeTmuxUnavailable, map[string]any{"command": "new-session"},
			"tmux did not answer new-session within %v; outcome unknown: %w", m.cmdTimeout, err)
	}
	return verdict.Errorf(verdict.CodeTmuxUnavailable, nil, "new-session outcome unknown: %w", err)
}

// tag sets the @skc-* tags by id, one set-option per command line (each costs
// O(sessions) in tmux, so each is set exactly once). They are sent at once,
// pipelined on the control connection, and the saga waits for all replies:
// one round trip instead of five. Their order on the wire is not fixed, so a
// session may briefly carry @skc-identity before its other tags; nothing relies on
// the order — a session is authoritative only with the published generation's
// tags, recorded after `tagged`, and recovery finds an attempt by its unique name.
//
// With them goes `remain-on-exit on` on the session's window (a window option
// of this session alone, so a user config that turns it off globally does not
// matter): an agent's end is then a dead pane, whose exit tmux keeps
// (pane_dead_status, pane_dead_signal) and whose processes the daemon proves
// gone before it writes agent_exited and removes the session — never a
// session that vanishes as if killed by hand. It is set before publication,
// hence before the helper's gate opens, so no agent can exit before it.
func (m *Manager) tag(ctx context.Context, a *attempt) error {
	tags := a.tags()
	errs := make([]error, len(tags)+1)
	nums := make([]uint64, len(tags)+1)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var rep tmuxctl.Reply
			if i == len(tags) {
				rep, errs[i] = m.commandIn(ctx, a.life, "set-option", "-w", "-t", a.tmuxID, "remain-on-exit", "on")
			} else {
				rep, errs[i] = m.commandIn(ctx, a.life, "set-option", "-t", a.tmuxID, tags[i][0], tags[i][1])
			}
			nums[i] = rep.Number
		}(i)
	}
	wg.Wait()
	a.tagged = census.LastNumber(nums...)
	for i, err := range errs {
		if err != nil && timedOut(err) {
			// tmux is stuck: a kill could not be confirmed either, so undo
			// abandons the row at once and recovery decides from live tmux.
			a.uncertain = true
			return verdict.Errorf(verdict.CodeTmuxUnavailable, map[string]any{"command": "set-option"},
				"tmux did not answer set-option %s within %v: %w", tagName(tags, i), m.cmdTimeout, err)
		}
	}
	for i, err := range errs {
		if err == nil {
			continue
		}
		var ce *tmuxctl.CommandError
		if !errors.As(err, &ce) {
			// The connection failed (the server died, say): whether the tag
			// landed is unknown, and so whether a kill can be confirmed; undo
			// decides. Not a refusal of the tag: tmux was not there to ask.
			return verdict.Errorf(verdict.CodeTmuxUnavailable, map[string]any{"command": "set-option"},
				"set-option %s: %w", tagName(tags, i), err)
		}
		return verdict.Errorf(verdict.CodeTagFailed, map[string]any{"tmux": ce.Lines}, "set-option %s: %w", tagName(tags, i), err)
	}
	return nil
}

func tagName(tags [][2]string, i int) string {
	if i < len(tags) {
		return tags[i][0]
	}
	return "remain-on-exit"
}

// admitCreated puts the attempt's session into the census (census.AdmitCreated).
func (m *Manager) admitCreated(a *attempt) error {
	// The census must hold the session before the create answers, or a kill or
	// the server's exit right after it ends a session its change feed never
	// knew, and no ended verdict is written. It is admitted from what the saga
	// knows, ordered against the census's lists by tmux's command numbers
	// (census.AdmitCreated): no tmux read, no wait for a list in flight.
	// Best effort: a failure leaves it to the census's own lists, as before.
	// But a session a later list already showed gone ended before it could
	// be published (its agent never ran): the create fails and undo confirms
	// it gone and releases the row, rather than publish a dead session whose
	// end the census can no longer report.
	ok, err := m.census.AdmitCreated(a.life, m.createdSession(a), a.spawned, a.tagged)
	switch {
	case err != nil:
		m.log.Debug().Err(err).Str("tmux_id", a.tmuxID).Msg("census admit failed")
	case !ok:
		return verdict.Errorf(verdict.CodeSpawnFailed, map[string]any{"tmux_id": a.tmuxID},
			"session %s ended before it was published", a.tmuxID)
	}
	return nil
}

// createdSession is the census's view of the attempt's session right after
// its tags were set.
func (m *Manager) createdSession(a *attempt) census.Session {
	s := census.Session{ID: a.tmuxID, Name: a.name, Created: a.created.UTC(), PaneID: a.paneID, PanePID: a.panePID,
		Tags: make(map[string]string, 5)}
	if k := a.kept(); k != nil && k.shown != "" {
		s.Name = k.shown // a kept session renamed by hand keeps its name
	}
	for _, t := range a.tags() {
		s.Tags[t[0]] = t[1]
	}
	if a.since != "" {
		s.Tags[TagSince] = a.since // a kept session's, which tags does not set again
	}
	return s
}

// tags are the @skc-* tags of the attempt's session, name and value. A
// session that becomes the identity's now (a new one, a claimed standby, a
// create's reuse of a kept one) is dated by @skc-since; a restart in the
// kept session leaves its date as it is.
func (a *attempt) tags() [][2]string {
	t := [][2]string{
		{TagGeneration, strconv.FormatUint(a.res.Generation, 10)},
		{TagReservation, a.res.ID},
		{TagState, stateDigest(a.req.Spec.StateFile)},
		{TagIdentity, a.digest},
	}
	if a.restart != nil && a.restart.kept != nil {
		a.since = a.restart.kept.since
		return t
	}
	if a.since == "" {
		a.since = strconv.FormatInt(time.Now().UnixNano(), 10)
	}
	return append(t, [2]string{TagSince, a.since})
}

func stateDigest(stateFile string) string {
	h := sha256.Sum256([]byte(stateFile))
	return hex.EncodeToString(h[:])
}

// publishHook, when a test sets it, runs as a create's tagged session is
// about to be published (name: its attempt name): a test can look at what
// lookups show in that window.
var publishHook func(name string)

// publish publishes the generation (its verdict journaled and the row's phase
// recorded in the same transaction), then releases the row. Once published,
// nothing undoes it: later failures are logged and left to recovery.
func (m *Manager) publish(ctx context.Context, a *attempt) (CreateResult, error) {
	if publishHook != nil {
		publishHook(a.name)
	}
	rec := m.publishedRecord(a)
	var pub fence.Published
	var filed verdict.Record
	together := a.claimed != "" // a claimed standby: publish and release are one transaction
	start := time.Now()
	err := whileBusy(ctx, func() (err error) {
		if together {
			pub, filed, err = m.fence.PublishRelease(ctx, &a.res, rec)
		} else {
			pub, filed, err = m.fence.Publish(ctx, &a.res, rec)
		}
		return err
	})
	m.met.fenceOp(fenceOpPublish, start)
	if err != nil {
		if verdict.CodeOf(err) == verdict.CodeFenceLost {
			a.fenceLost = true
			return CreateResult{}, err
		}
		var ve *verdict.Error
		if errors.As(err, &ve) && (ve.Code == verdict.CodeAgentNotRunning || ve.Code == verdict.CodeSpawnFailed || ve.Code == verdict.CodeInternal) {
			// The fence's own refusal (fence/rules.go: a restart a kill
			// cancelled meanwhile, a generation not above the published
			// one): its code, not an unreachable fence.
			return CreateResult{}, verdict.Errorf(ve.Code, ve.Details, "publish: %w", err)
		}
		return CreateResult{}, verdict.Errorf(verdict.CodeFenceUnavailable, nil, "publish: %w", err)
	}
	m.verdicts.Filed(filed)
	if !together {
		m.fault.hitIn(a.restart != nil, FaultPublish)
	}
	if a.restart != nil {
		m.dropSuperseded(ctx, pub) // a session kept and not reused
	} else if pub.Superseded != nil && pub.Superseded.Restart.State == fence.RestartExited {
		m.dropSuperseded(ctx, pub) // a create got there before the restart
	}
	// Published: the rest must happen even if the saga's deadline passes now.
	fctx, cancel := fenceCtx(ctx)
	defer cancel()
	// Publish moved the row to phase published in its own transaction; a
	// further Advance to published would only re-confirm ownership, one more
	// write transaction per create, so there is none. Release pins the id.
	m.fault.hitIn(a.restart != nil, FaultPublished)
	if !together {
		start := time.Now()
		if err := m.fence.Release(fctx, a.res.ID); err != nil {
			m.log.Warn().Err(err).Str("reservation", a.res.ID).Msg("release after publish failed")
		}
		m.met.fenceOp(fenceOpRelease, start)
	}
	m.wakeHelper(a.panePID, a.tmuxID)
	m.watchExit(pub)
	m.endIfDeadAtPublish(pub)
	return CreateResult{Status: verdict.VerdictPublished, Session: m.attemptView(a, pub)}, nil
}

func (m *Manager) publishedRecord(a *attempt) verdict.Record {
	rec := verdict.Record{
		Action: verdict.ActionCreate, Outcome: verdict.OutcomeSuccess,
		Reason: verdict.ReasonCreated, Verdict: verdict.VerdictPublished,
		Duration:    timeSince(a.start),
		Identity:    identityRef(a.req.Identity),
		Session:     &verdict.SessionRef{Name: a.name, ID: a.tmuxID, Generation: a.res.Generation},
		Reservation: &verdict.ReservationRef{ID: a.res.ID, Phase: fence.PhasePublished.String()},
		Evidence: map[string]any{
			"pane_pid": a.panePID, "server_pid": a.life.PID, "server_start": a.life.StartTime,
		},
	}
	if a.restart != nil {
		restartRecord(&rec, a.restart)
	} else if a.reuse != nil {
		rec.Evidence["same_session"] = a.respawned
		rec.Evidence["previous_tmux_id"] = a.reuse.tmuxID
	}
	return rec
}

// kept is the session the attempt reuses, nil for a new session.
func (a *attempt) kept() *keptSession {
	if a.restart == nil {
		return a.reuse
	}
	return a.restart.kept
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprint(err)
}
