package lifecycle

import (
	"bytes"
	"context"
	"strings"
	"time"
	"unicode"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// WaitRequest is one wait: exactly one of Exit, Idle (> 0) and Text. Timeout
// 0 waits until the condition holds or the session is gone.
type WaitRequest struct {
	Exit    bool
	Idle    time.Duration
	Text    string
	Timeout time.Duration
}

// WaitResult is a condition that held: "exited" (with the ended verdict),
// "idle" or "text".
type WaitResult struct {
	Status  string          `json:"status"`
	Verdict *verdict.Record `json:"verdict,omitempty"`
}

// textCaptureGap is the least time between two screen captures of a text wait
// while the agent keeps writing: one capture per burst of output, not a loop.
const textCaptureGap = 100 * time.Millisecond

// ValidateWait checks a wait request.
func ValidateWait(req WaitRequest) error {
	n := 0
	for _, set := range []bool{req.Exit, req.Idle != 0, req.Text != ""} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		return invalidInput("condition", "give exactly one of exit, idle and text")
	case req.Idle < 0:
		return invalidInput("idle", "idle must be a positive duration")
	case req.Timeout < 0:
		return invalidInput("timeout", "timeout must not be negative")
	case len(req.Text) > 4096 || !validText(req.Text):
		return invalidInput("text", "text must be valid UTF-8 of at most 4096 bytes without control characters")
	}
	return nil
}

// validText: valid UTF-8 without control characters — C0, DEL and C1
// (U+0080-U+009F) alike, as a label's rule (unicode.IsControl): a C1 such as
// U+0085 (NEL) is a line end to some terminals, and was let through.
func validText(s string) bool {
	return strings.ToValidUTF8(s, "\uFFFD") == s && strings.IndexFunc(s, unicode.IsControl) < 0
}

// Wait blocks until the condition holds (nil error), the session is gone
// (not_found), or the timeout passes (timeout). Exit is decided by the verdict
// feed (the session's ended verdict), idle and text by the session's live
// output (text also by one screen capture first, and after each burst of
// output): tmux is never polled in a loop.
func (m *Manager) Wait(ctx context.Context, ref Ref, req WaitRequest) (WaitResult, error) {
	if err := ValidateWait(req); err != nil {
		return WaitResult{}, err
	}
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	if req.Exit {
		return m.waitExit(ctx, ref)
	}
	t, err := m.readTarget(ctx, ref)
	if err == nil {
		err = m.agentPaneChecked(ctx, &t)
	}
	if err != nil {
		return WaitResult{}, waitErr(ctx, err)
	}
	sub, err := m.followTarget(ctx, t)
	if err != nil {
		return WaitResult{}, waitErr(ctx, err)
	}
	defer sub.Close()
	if req.Idle > 0 {
		return m.waitIdle(ctx, t, sub, req.Idle)
	}
	return m.waitText(ctx, t, sub, req.Text)
}

// held answers a wait whose condition held (status), once tmux confirms that
// t's pane still runs its agent: what held may have been a person's
// program's doing in a pane respawned by hand (agentPaneChecked).
func (m *Manager) held(ctx context.Context, t talkTarget, status string) (WaitResult, error) {
	if err := m.agentPaneChecked(ctx, &t); err != nil {
		return WaitResult{}, waitErr(ctx, err)
	}
	return WaitResult{Status: status}, nil
}

// waitErr turns a context end into the timeout refusal.
func waitErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return verdict.Errorf(verdict.CodeTimeout, nil, "the condition did not hold before the timeout")
	}
	return err
}

func goneErr(name string) error {
	return verdict.Errorf(verdict.CodeNotFound, map[string]any{"name": name}, "session %s is gone", name)
}

// waitExit waits for the ended verdict of the generation ref names now; when
// that generation has ended already, its ended verdict is the answer at once.
func (m *Manager) waitExit(ctx context.Context, ref Ref) (WaitResult, error) {
	after := m.verdicts.Sequence() // before the lookup: an end right after it is seen
	pub, ok, err := m.exitTarget(ctx, ref)
	switch {
	case err == nil && ok && !pub.Ended && m.remote(&pub) && !m.inThisLife(&pub):
		// Its ended verdict is written on its own host, not here.
		return WaitResult{}, remoteSession(pub)
	case err != nil:
		return WaitResult{}, verdict.Errorf(verdict.CodeFenceUnavailable, nil, "%v", err)
	case !ok && ref.Identity != nil:
		return WaitResult{}, verdict.Errorf(verdict.CodeNotFound,
			map[string]any{"state_dir": ref.Identity.StateDir, "session_id": ref.Identity.SessionID},
			"identity %s %s has no generation to wait for", ref.Identity.StateDir, ref.Identity.SessionID)
	case !ok:
		return WaitResult{}, m.noGenerationNamed(ctx, ref.Name) // nothing of this host ever wore it
	case pub.Ended:
		recs, err := m.verdictsOf(ctx, pub.Identity)
		if err != nil {
			return WaitResult{}, err
		}
		for i := len(recs) - 1; i >= 0; i-- {
			if endsGeneration(recs[i], pub) {
				return WaitResult{Status: "exited", Verdict: &recs[i]}, nil
			}
		}
		// Marked ended, its verdict not journaled yet: the feed brings it.
	}
	feed, cancel := m.verdicts.Subscribe(after)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return WaitResult{}, waitErr(ctx, ctx.Err())
		case rec, ok := <-feed:
			if !ok {
				return WaitResult{}, verdict.Errorf(verdict.CodeBusy, nil, "supervisor is shutting down")
			}
			if endsGeneration(rec, pub) {
				return WaitResult{Status: "exited", Verdict: &rec}, nil
			}
		}
	}
}

// exitTarget is the generation a wait --exit on ref waits for: the one ref
// names now, or, for a name no session wears any more, the ended generation
// that lived in the session of that name (a wait that starts after the agent
// ended answers with its ended verdict, as one that started before would).
func (m *Manager) exitTarget(ctx context.Context, ref Ref) (fence.Published, bool, error) {
	pub, ok, err := m.publishedFor(ctx, ref)
	if err != nil || ok || ref.Identity != nil {
		return pub, ok, err
	}
	// A $id, or the current name of a session renamed by hand: the one
	// resolver knows them while the session is listed.
	if t, rerr := m.Resolve(ctx, ref); rerr == nil && t.Published != nil {
		return *t.Published, true, nil
	}
	return m.endedNamed(ctx, ref.Name)
}

// endedNamed finds the ended generation whose session was named name, while
// it is its identity's last generation, in Resolve's order: its tmux id
// ("$N"), the name the session last wore while the census listed it (a
// rename by hand: census.LastNamed), the name it was published under. The
// published name is looked up first by the reservation id in the attempt
// name (one indexed read), else — a session kept over restarts wears its
// first generation's name — by the identity rows' session names, which the
// other two need too. A fence that cannot answer leaves the name gone, as it
// was before this lookup.
func (m *Manager) endedNamed(ctx context.Context, name string) (fence.Published, bool, error) {
	if i := strings.LastIndexByte(name, '-'); !strings.HasPrefix(name, "$") && strings.HasPrefix(name, "skc-") &&
		i > 0 && fence.CheckReservationID(name[i+1:]) == nil {
		pub, ok, err := m.fence.PublishedByReservation(ctx, name[i+1:])
		if ok && err == nil && pub.Ended && pub.SessionName == name && !m.remote(&pub) {
			// (another host's name is not one this host's generations wore)
			if g, ok := m.census.LastNamed(name); !ok || g.ID == pub.TmuxID && g.Life.PID == pub.ServerPID {
				return pub, true, nil // unless another session wore the name since
			}
		}
	}
	pubs, err := m.fence.Identities(ctx)
	if err != nil {
		m.log.Debug().Err(err).Str("name", name).Msg("wait --exit: ended generation by name not looked up")
	}
	ended := pubs[:0]
	for _, p := range pubs {
		if p.Ended && !m.remote(&p) {
			ended = append(ended, p)
		}
	}
	if p, ok := m.endedByTmuxID(ended, name); ok {
		return p, true, nil
	}
	if g, ok := m.census.LastNamed(name); ok {
		for _, p := range ended {
			if p.TmuxID == g.ID && p.ServerPID == g.Life.PID && p.ServerStart == g.Life.StartTime {
				return p, true, nil
			}
		}
	}
	for _, p := range ended {
		if p.SessionName == name {
			return p, true, nil
		}
	}
	return fence.Published{}, false, nil
}

// noGenerationNamed is not_found for a name no generation of this host wore:
// a session tmux lists under it (made by hand) is called not supervised, as
// kill and the other talk verbs call it (found outside-in: wait --exit said
// "no session named" of a session ls lists).
func (m *Manager) noGenerationNamed(ctx context.Context, name string) error {
	if t, err := m.Resolve(ctx, Ref{Name: name}); err == nil && t.Published == nil && t.Session != nil {
		return notSupervised(*t.Session)
	}
	return notFoundName(name)
}

// endedByTmuxID is the ended generation among ended whose session had tmux
// id id: the one of the current server life, else the only one of an earlier
// life (ids start over with each server: two lives' generations of one id
// leave it naming neither, as Resolve's goneNamed does).
func (m *Manager) endedByTmuxID(ended []fence.Published, id string) (fence.Published, bool) {
	if !strings.HasPrefix(id, "$") {
		return fence.Published{}, false
	}
	var hits, here []fence.Published
	for _, p := range ended {
		if p.TmuxID != id {
			continue
		}
		hits = append(hits, p)
		if m.inThisLife(&p) {
			here = append(here, p)
		}
	}
	switch {
	case len(here) == 1:
		return here[0], true
	case len(here) == 0 && len(hits) == 1:
		return hits[0], true
	}
	return fence.Published{}, false
}

func endsGeneration(rec verdict.Record, pub fence.Published) bool {
	return rec.Verdict == verdict.VerdictEnded && rec.Session != nil && rec.Identity != nil &&
		rec.Session.Generation == pub.Generation && rec.Session.ID == pub.TmuxID &&
		rec.Identity.StateDir == pub.Identity.StateDir && rec.Identity.SessionID == pub.Identity.SessionID
}

// heldOr is held, or err when the condition could not be looked at.
func (m *Manager) heldOr(ctx context.Context, t talkTarget, status string, err error) (WaitResult, error) {
	if err != nil {
		return WaitResult{}, err
	}
	return m.held(ctx, t, status)
}

// endedErr is the answer of a wait whose output stream ended: the session
// went (not_found), or its agent's pane was found respawned or killed by hand
// — the stream ends as that stop begins (paneGone) — which is answered as
// the wait's own check would have (paneMissing) while that stop runs.
func (m *Manager) endedErr(t talkTarget) error {
	if cause, ok := m.stopInFlight(t.pub); ok && cause.reason == verdict.ReasonAgentPaneMissing {
		return paneMissing(t.sess.Name)
	}
	return goneErr(t.sess.Name)
}

// waitIdle returns once the pane has written nothing for idle.
func (m *Manager) waitIdle(ctx context.Context, t talkTarget, sub *OutputSub, idle time.Duration) (WaitResult, error) {
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return WaitResult{}, waitErr(ctx, ctx.Err())
		case <-timer.C:
			return m.held(ctx, t, "idle")
		case <-sub.Done():
			items, ok := sub.take()
			if !ok {
				return WaitResult{}, m.endedErr(t)
			}
			if len(items) > 0 {
				timer.Reset(idle)
			}
		}
	}
}

// take returns what is waiting without blocking; ok is false once the stream
// has ended and is drained.
func (s *OutputSub) take() (items []OutputItem, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.items) == 0 && s.ended {
		return nil, false
	}
	items, s.items, s.size = s.items, nil, 0
	if len(items) == 0 && (s.lost > 0 || s.paused) {
		items = []OutputItem{{At: time.Now(), Dropped: s.lost, Paused: s.paused}}
		s.lost, s.paused = 0, false
	}
	return items, true
}

// waitText returns once text is on the screen or has been written by the pane.
func (m *Manager) waitText(ctx context.Context, t talkTarget, sub *OutputSub, text string) (WaitResult, error) {
	seen := func() (bool, error) {
		// -J joins the rows of a line wrapped at the pane's width: text
		// wrapped across two rows is on the screen, and the stream (which
		// has no rows) would find it too when written after the wait began.
		rep, err := m.commandIn(ctx, t.life, append(captureArgs(t.pane(), 0, false), "-J")...)
		if err != nil {
			return false, waitErr(ctx, m.talkError(t, err))
		}
		return strings.Contains(strings.Join(rep.Lines, "\n"), text), nil
	}
	if ok, err := seen(); ok || err != nil {
		return m.heldOr(ctx, t, "text", err)
	}
	want := []byte(text)
	var window []byte // the stream's last bytes, to find text split across chunks
	var lastCapture time.Time
	recheck := time.NewTimer(time.Hour)
	recheck.Stop()
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return WaitResult{}, waitErr(ctx, ctx.Err())
		case <-recheck.C:
		case <-sub.Done():
			items, ok := sub.take()
			if !ok {
				return WaitResult{}, m.endedErr(t)
			}
			for _, it := range items {
				window = append(window, it.Data...)
			}
			if bytes.Contains(window, want) {
				return m.held(ctx, t, "text")
			}
			if keep := len(want) + 4096; len(window) > keep {
				window = append(window[:0], window[len(window)-keep:]...)
			}
			if wait := textCaptureGap - time.Since(lastCapture); wait > 0 {
				recheck.Reset(wait) // capture once this burst settles
				continue
			}
		}
		lastCapture = time.Now()
		if ok, err := seen(); ok || err != nil {
			return m.heldOr(ctx, t, "text", err)
		}
	}
}
