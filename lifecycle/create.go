package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/proctree"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// CreateRequest asks for the session of one identity. Callers (api/) have validated
// and canonicalised it; lifecycle trusts it.
type CreateRequest struct {
	Identity fence.Identity
	Spec     fence.Spec
	Wait     time.Duration // how long to wait for another in-flight create to publish
}

// CreateResult is a successful create: Status is "published" or "existing".
type CreateResult struct {
	Status  string
	Session View
}

// Tag names on supervised sessions: the census owns the vocabulary, the saga writes
// it, so both read the same constants.
const (
	TagIdentity    = census.TagIdentity
	TagGeneration  = census.TagGeneration
	TagReservation = census.TagReservation
	TagState       = census.TagState
	TagSince       = census.TagSince
)

// sagaTimeout bounds the steps after Reserve. They run detached from the caller's
// context: a client that hangs up mid-saga must not turn every create into an
// abandoned row; Shutdown stops them explicitly instead.
const sagaTimeout = 60 * time.Second

// censusSyncWait bounds how long a create waits for an unsynced census (the
// control client reconnecting, e.g. starting a new server after the old one
// died) before it fails closed with tmux_unavailable.
const censusSyncWait = 5 * time.Second

// maxAdmitRounds bounds Reserve's retries after an ended generation or a recovery
// (the model's creators retry at most three times; a few more cost nothing).
const maxAdmitRounds = 8

// attempt is one create between its reservation and its verdict. Its fields belong
// to the create's goroutine, except resID and stop, which are set before the
// attempt is tracked and never change: they are all that Shutdown (another
// goroutine) may read.
type attempt struct {
	resID     string // the claimed reservation's id; immutable (res is rewritten by every Advance)
	req       CreateRequest
	res       fence.Reservation
	digest    string
	name      string
	life      tmuxctl.ServerLife
	tmuxID    string
	panePID   int
	paneStart uint64 // the pane process's start time, 0 when unknown (proctree.Hold)
	paneID    string
	created   time.Time
	since     string // @skc-since (Unix ns): set once by tags, or the kept session's ("" if none)
	spawned   uint64 // tmux's command number of the new-session (census.AdmitCreated)
	tagged    uint64 // tmux's command number of the last tag command (census.AdmitCreated)
	start     time.Time
	stop      context.CancelFunc
	restart   *restartOf // set when the attempt starts a generation after the first
	// reuse is, for a create, the session the identity's ended generation
	// left (see leftoverOf); the create starts in it as a restart would.
	reuse     *keptSession
	respawned bool   // its helper was started in a kept session (respawn-pane)
	claimed   string // the token of the warm pool's standby it claimed ("" when none)
	// sbCgroup is the claimed standby's cgroup, the generation's while the
	// attempt runs in it ("" when none, or not served by a standby).
	sbCgroup string
	// sbIncarnation is the claimed standby's incarnation, read at its spawn.
	sbIncarnation string
	pooled        bool // it took a standby off the pool (refilled when the create answered)
	// preclaim is set when the reservation recorded its standby and the
	// standby's start (pool_preclaim.go): the claim's spawned step is done.
	preclaim *preclaim

	sent      bool // new-session was written: from here a session may exist
	uncertain bool // a step's outcome is unknown: abandon, never guess
	fenceLost bool // the row is not ours any more: no tmux mutation at all
}

// Create runs the create saga (DESIGN §6) and answers published or existing, or a
// *verdict.Error. Every call ends in exactly one verdict of its own.
func (m *Manager) Create(ctx context.Context, req CreateRequest) (CreateResult, error) {
	start := time.Now()
	if c, err := fence.CanonicalIdentity(req.Identity); err == nil {
		req.Identity = c // verdicts of every outcome name the identity one way
	}
	if err := m.begin(); err != nil {
		e := verdict.AsError(err)
		m.emit(ctx, m.refusedRecord(req, e, start))
		m.met.refused(e.Code)
		return CreateResult{}, err
	}
	defer m.end()
	if err := m.waitCensus(ctx); err != nil {
		// Without a synced census neither "existing" nor recovery can be
		// decided: refuse (503) rather than guess.
		_, _, err := m.refuse(ctx, req, unavailable(err), start)
		m.observeCreate(start, nil, err)
		return CreateResult{}, err
	}
	pc := m.takePreclaim(req)
	res, out, err := m.admit(ctx, req, start, pc)
	claimed := m.settlePreclaim(pc, res, err)
	if err != nil || out != nil {
		m.observeCreate(start, out, err)
		if err != nil {
			return CreateResult{}, err
		}
		return *out, nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sagaTimeout)
	defer cancel()
	// The fence canonicalised the identity and spec (realpath): tags, names and
	// verdicts use its form, so every later reader digests the same bytes.
	req.Identity, req.Spec = res.Identity, res.Spec
	a := &attempt{resID: res.ID, req: req, res: res, digest: res.Identity.Digest(), start: start, stop: cancel}
	if claimed {
		a.preclaim = pc // generation 1: no predecessor, nothing left to reuse
		a.bindStandby(pc.sb)
	} else {
		a.reuse = m.leftoverOf(sctx, res)
	}
	m.track(a)
	defer m.untrack(a)
	result, err := m.saga(sctx, a)
	m.observeCreate(start, &result, err)
	return result, err
}

// waitCensus returns once the census is synced, or errNotSynced after
// censusSyncWait or when ctx ends, whichever comes first: a create sent right
// after the tmux server died waits for the reconnect instead of failing at once.
func (m *Manager) waitCensus(ctx context.Context) error {
	if m.census.Synced() {
		return nil
	}
	m.syncWaits.Add(1)
	wctx, cancel := context.WithTimeout(ctx, censusSyncWait)
	defer cancel()
	if err := m.census.WaitSynced(wctx); err != nil {
		return fmt.Errorf("%w after waiting: %w", errNotSynced, err)
	}
	return nil
}

func (m *Manager) observeCreate(start time.Time, out *CreateResult, err error) {
	switch {
	case err != nil:
		m.met.create(outcomeOf(err), time.Since(start))
	case out != nil:
		m.met.create(out.Status, time.Since(start))
	}
}

func outcomeOf(err error) string {
	if verdict.IsRefusal(verdict.CodeOf(err)) {
		return verdict.VerdictRefused
	}
	return verdict.VerdictFailed
}

// admit reserves the identity, resolving what stands in the way: a published
// generation (live → existing; gone → marked ended, reserve again), a dead owner's
// row (recovery), or a live in-flight create (wait up to req.Wait for it to publish).
// It returns either the reservation to proceed with, or a final answer whose verdict
// has been written.
func (m *Manager) admit(ctx context.Context, req CreateRequest, start time.Time, pc *preclaim) (fence.Reservation, *CreateResult, error) {
	deadline := start.Add(req.Wait)
	waited := false
	for round := 0; round < maxAdmitRounds; {
		rr, err := m.reserve(ctx, req, pc)
		if err != nil {
			if retryable(err) && m.waitInflight(ctx, req.Identity, err, deadline) {
				waited = true
				continue
			}
			return m.refuse(ctx, req, err, start)
		}
		round++
		switch rr.Outcome {
		case fence.Reserved:
			m.reclaimedInPlace(ctx, rr)
			m.fault.hit(FaultReserved)
			return rr.Reservation, nil, nil
		case fence.PublishedElsewhere:
			if rr.Published.Stopping == nil {
				return fence.Reservation{}, m.existingElsewhere(ctx, req, rr.Published, start), nil
			}
			// Being stopped on its host: not an existing agent (it is about to
			// end). Wait for that host's proof as for one of ours, by the
			// fence, within the create's wait.
			if time.Now().Before(deadline) && sleepCtx(ctx, pollInterval) {
				round--
				continue
			}
			return m.refuse(ctx, req, stoppingError(rr.Published, verdict.CodeIdentityReservedLive,
				"generation %d is stopping on host %s: its processes are not proven gone yet (waited %v)",
				rr.Published.Host, req.Wait), start)
		case fence.MaybeExisting:
			out, again, err := m.maybeExisting(ctx, req, rr.Published, waited, start)
			if !again {
				return fence.Reservation{}, out, err
			}
		case fence.NeedsRecovery:
			r, err := m.recoverRow(ctx, rr.Abandoned, req.Spec, deadline)
			switch {
			case r != nil:
				m.fault.hit(FaultReserved)
				return *r, nil, nil
			case errors.Is(err, errRecovered), verdict.CodeOf(err) == verdict.CodeFenceLost:
				// preserved and released, or someone else recovered it: look again
			default:
				return m.refuse(ctx, req, err, start)
			}
		default:
			return m.refuse(ctx, req, fmt.Errorf("fence: unexpected reserve outcome %v", rr.Outcome), start)
		}
	}
	err := verdict.Errorf(verdict.CodeIdentityFenceContended, nil, "identity kept changing while reserving")
	return m.refuse(ctx, req, err, start)
}

// retryable: a live in-flight create of the same identity, or a busy fence — both
// may clear within the caller's wait.
func retryable(err error) bool {
	c := verdict.CodeOf(err)
	return c == verdict.CodeIdentityReservedLive || c == verdict.CodeIdentityFenceContended
}

// waitInflight waits, until deadline, for the in-flight create that refused us to
// finish: its generation published or its row gone. It polls with reads only —
// Reserve is a write transaction, and racing creates hammering it would contend
// the fence for the very create they wait for. It reports whether to Reserve again.
func (m *Manager) waitInflight(ctx context.Context, id fence.Identity, refusal error, deadline time.Time) bool {
	var resID string
	if e := verdict.AsError(refusal); e != nil {
		resID, _ = e.Details["reservation_id"].(string)
	}
	for i := 1; time.Now().Before(deadline); i++ {
		if !sleepCtx(ctx, pollInterval) {
			return false
		}
		if resID == "" || i%20 == 0 {
			// A contended fence, or a while without news (its owner may have
			// died, which only Reserve can tell): try again.
			return true
		}
		if p, ok, err := m.fence.PublishedByReservation(ctx, resID); err == nil && ok && !p.Ended {
			return true
		}
		if _, ok, err := m.fence.Reservation(ctx, resID); err == nil && !ok {
			return true
		}
	}
	return false
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// maybeExisting handles a published generation that is not marked ended: a live
// inspection decides (DESIGN §5). again reports that the generation was marked ended
// and Reserve should run again.
func (m *Manager) maybeExisting(ctx context.Context, req CreateRequest, pub fence.Published, waited bool, start time.Time) (*CreateResult, bool, error) {
	if pub.Stopping != nil {
		return m.awaitStop(ctx, req, pub, causeOf(pub.Stopping.Reason), start)
	}
	auth, sess, err := m.inspectPublished(ctx, pub)
	if (err != nil || auth == census.Unknown) && !m.census.Synced() && m.waitCensus(ctx) == nil {
		// The server died between the create's census check and this look
		// (a create racing a server's death and the restarts after it): wait
		// for the census of the next server, as a create that came a moment
		// later would, and look again.
		auth, sess, err = m.inspectPublished(ctx, pub)
	}
	if err != nil || auth == census.Unknown {
		if err == nil {
			err = errors.New("census cannot decide")
		}
		_, out, rerr := m.refuse(ctx, req, m.undecided(pub, err), start)
		return out, false, rerr
	}
	if auth == census.Authoritative && sess != nil && sess.PaneDead && !m.notAgentsDeath(ctx, *sess, pub) {
		// Kept by remain-on-exit, but its agent is gone: not an existing session.
		return m.awaitStop(ctx, req, pub, endCause{reason: verdict.ReasonAgentExited}, start)
	}
	switch auth {
	case census.Authoritative:
		v := m.viewOf(sess, &pub)
		reason := verdict.ReasonSessionLive
		if waited {
			reason = verdict.ReasonInflightPublished
		}
		m.emit(ctx, m.existingRecord(req, pub, reason, start))
		return &CreateResult{Status: verdict.VerdictExisting, Session: v}, false, nil
	case census.Absent:
		// The session is gone; its processes may not be (the model's
		// "session gone, agent stopping"): wait for the proof, then reserve.
		return m.awaitStop(ctx, req, pub, endCause{reason: m.goneReason(pub)}, start)
	}
	// Another session wears the identity's tags but not the published generation:
	// something outside the saga tampered with tmux. Fail closed — and say the
	// way out, which only a person can decide: kill resolves the session by
	// its $id and ends the generation.
	// By identity: it resolves the published generation whatever its tags
	// say; by $id it did not once the reservation tag was removed too (the
	// advice led to not_found: found outside-in).
	hint := "skc-supervisor kill --state-dir " + shellQuote(pub.Identity.StateDir) +
		" --session-id " + shellQuote(pub.Identity.SessionID)
	rerr := verdict.Errorf(verdict.CodeIdentityOrphanUnresolved,
		map[string]any{"tmux_id": pub.TmuxID, "session_name": pub.SessionName, "generation": pub.Generation, "hint": hint},
		"the published session %s no longer carries this identity's generation %d in its @skc-* tags (were they edited by hand?); it is left alone: end it with `%s`, then create again",
		pub.TmuxID, pub.Generation, hint)
	_, out, rerr2 := m.refuse(ctx, req, rerr, start)
	return out, false, rerr2
}

// undecided is the refusal of a create whose published generation the census
// could not decide: tmux_unavailable, unless live tmux contradicts itself —
// more than one session wears the identity's tags (set by hand on another
// session, a standby even): tmux answered, and a retry will not change it;
// only a person can, by ending or untagging the sessions that are not the
// published one.
func (m *Manager) undecided(pub fence.Published, err error) error {
	var ie *census.InspectError
	if !errors.As(err, &ie) || ie.Reason != census.UnknownContradiction {
		return unavailable(err)
	}
	var ids []string
	for _, s := range m.census.ByIdentity(pub.Identity.Digest()) {
		ids = append(ids, s.ID)
	}
	return verdict.Errorf(verdict.CodeIdentityOrphanUnresolved,
		map[string]any{"tmux_id": pub.TmuxID, "generation": pub.Generation, "sessions": ids},
		"sessions %v carry this identity's tags, published in %s (were @skc-* options set by hand?); they are left alone: end or untag the ones that are not %s, then create again",
		ids, pub.TmuxID, pub.TmuxID)
}

// inspectPublished asks the census (which re-reads live tmux) about a published
// generation.
func (m *Manager) inspectPublished(ctx context.Context, pub fence.Published) (census.Authority, *census.Session, error) {
	return m.census.Inspect(ctx, m.publishedEvidence(pub))
}

// publishedEvidence is what the census is to look for of generation pub.
func (m *Manager) publishedEvidence(pub fence.Published) census.Evidence {
	return census.Evidence{
		IdentityDigest: pub.Identity.Digest(),
		AttemptName:    pub.SessionName,
		TmuxID:         pub.TmuxID,
		Life:           m.evidenceLife(pub.ServerPID, pub.ServerStart),
		Generation:     pub.Generation,
	}
}

// lifeOf rebuilds the server life recorded in the fence; zero when none was.
func (m *Manager) lifeOf(pid int, start int64) tmuxctl.ServerLife {
	if pid == 0 {
		return tmuxctl.ServerLife{}
	}
	return tmuxctl.ServerLife{Socket: m.socket(), PID: pid, StartTime: start}
}

// evidenceLife is the life to inspect a recorded tmux id in: the recorded life when
// it is the census's current one; otherwise zero, so the census judges by name and
// identity only — ids belong to one server life, and a session of a server that is
// no longer on the socket cannot be in the census.
func (m *Manager) evidenceLife(pid int, start int64) tmuxctl.ServerLife {
	life := m.lifeOf(pid, start)
	if info, ok := m.census.Info(); ok && info.ServerLife == life {
		return life
	}
	return tmuxctl.ServerLife{}
}

func (m *Manager) socket() string {
	if info, ok := m.tmux.Info(); ok {
		return info.Socket
	}
	return ""
}

// attemptName is unique per reservation and uses only [a-z0-9-], so tmux's name
// sanitising and format expansion cannot alter it and no later attempt can wear an
// orphan's name.
func attemptName(digest, resID string) string {
	if len(digest) > 12 {
		digest = digest[:12]
	}
	return "skc-" + digest + "-" + strings.ToLower(resID)
}

// newSessionArgs is the spawn command. The pane command has several argv words, so
// tmux execs it directly, with no shell; no user-controlled byte is in it (argv, env,
// cwd and label stay in the fence and the helper reads them by reservation id), and
// -c/-e/-n, which expand formats, are never used.
func (m *Manager) newSessionArgs(a *attempt) []string {
	args := []string{
		"new-session", "-d", "-P", "-F",
		"#{session_id}\t#{pane_pid}\t#{pane_id}\t#{session_created}",
		"-s", a.name, "-x", "200", "-y", "50", "--",
	}
	return append(args, m.helperArgv(a)...)
}

// helperArgv is the pane command of the attempt's generation (new-session's,
// or respawn-pane's for a restart in the kept session).
func (m *Manager) helperArgv(a *attempt) []string {
	args := []string{m.cfg.HelperPath, "helper", "--home", m.cfg.Home,
		"--reservation", a.res.ID, "--generation", strconv.FormatUint(a.res.Generation, 10)}
	if cg := proctree.GenerationCgroup(m.cgroupBase, a.res.ID); cg != "" {
		args = append(args, "--cgroup", cg)
	}
	return args
}

// spawnReply is what new-session's -P line says of the new session.
type spawnReply struct {
	id, paneID string
	panePID    int
	created    time.Time
}

// parseSpawn reads new-session's -P line: id, pane pid, pane id, created.
func parseSpawn(r tmuxctl.Reply) (spawnReply, error) {
	if len(r.Lines) != 1 {
		return spawnReply{}, fmt.Errorf("new-session: %d reply lines", len(r.Lines))
	}
	f := strings.Split(r.Lines[0], "\t")
	if len(f) != 4 || !strings.HasPrefix(f[0], "$") || !strings.HasPrefix(f[2], "%") {
		return spawnReply{}, fmt.Errorf("new-session: unexpected reply %q", r.Lines[0])
	}
	pid, err1 := strconv.Atoi(f[1])
	sec, err2 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil {
		return spawnReply{}, fmt.Errorf("new-session: unexpected reply %q", r.Lines[0])
	}
	return spawnReply{id: f[0], paneID: f[2], panePID: pid, created: time.Unix(sec, 0)}, nil
}

// awaitStop waits, within the create's wait, for the stop of the identity's
// published generation (joining it, or starting it: the generation's end was
// found by this create) and reports that Reserve should run again once its
// processes are proven gone. Past the wait the create is refused
// identity_reserved_live with details.stopping; a stop that could not prove
// them gone refuses identity_reserved_unknown (its verdict says so).
func (m *Manager) awaitStop(ctx context.Context, req CreateRequest, pub fence.Published, cause endCause, start time.Time) (*CreateResult, bool, error) {
	run := m.stopGeneration(pub, cause)
	t := time.NewTimer(time.Until(start.Add(req.Wait)))
	defer t.Stop()
	// The timer's tick is consumed by the select that sees it, so whether
	// the wait ran out is remembered here, not read from t.C a second time.
	waited := false
	select {
	case <-run.done: // a finished stop wins over a wait that is also over
	default:
		select {
		case <-run.done:
		case <-t.C:
			waited = true
		case <-ctx.Done():
		}
	}
	var err error
	select {
	case <-run.done:
		if run.err == nil {
			return nil, true, nil
		}
		err = run.err
		if verdict.CodeOf(err) != verdict.CodeIdentityReservedUnknown {
			err = unavailable(err)
		}
	default:
		if err = m.unprovenBefore(pub); err != nil {
			break
		}
		if waited {
			err = stoppingError(pub, verdict.CodeIdentityReservedLive,
				"generation %d is stopping: its processes are not proven gone yet (waited %v)", req.Wait)
			break
		}
		err = stoppingError(pub, verdict.CodeIdentityReservedLive,
			"generation %d is stopping; the request ended before its processes were proven gone (%v)", ctx.Err())
	}
	_, out, rerr := m.refuse(ctx, req, err, start)
	return out, false, rerr
}
