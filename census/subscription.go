package census

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// subFormat loops over every session server-side; tmux evaluates it once a
// second and sends a line only when the value changes. It carries only safe
// tokens (ids, digits, tag values), because the value is not escaped: a hand-
// set tag holding a newline would spill onto bare lines, which tmuxctl skips,
// and the next re-list reads it exactly anyway.
//
// One segment per session, "$id/activity/panes/attached/identity/generation":
//   - activity: the last three digits of the current window's
//     window_activity (epoch seconds), which tmux moves on every pane output.
//     A change is applied from the value itself (subscription.go
//     activityFrom), without asking tmux: busy agents change it every second.
//   - panes: per pane nothing while it runs, "<status>.<signal>" once dead
//     under remain-on-exit (tmux 3.3a has no notification for that), so both
//     the death and the status that follows it a tick later are seen.
//   - the attached count, the identity's last four hex digits, the generation.
//
// A change in the last four (or a segment the census cannot match) is read
// by id, two small commands whatever the server's size, instead of a full
// list; sessions appearing or disappearing cost an id-only list.
//
// It is kept short on purpose. tmux 3.3a builds the #{S:} value by strlcat, so
// each evaluation costs the square of its length: with all five tags and every
// pane's id, pid and exit fields (about 190 bytes per session) it cost tmux
// 30–40 % of a core at 4,000 idle sessions; this one, about 24 bytes per
// session of live agents (BenchmarkSubscriptionCost, BENCHMARKS.md). What it
// leaves out has a notification of its own (clients attaching, panes and
// windows changing) or is a hand edit that the periodic reconcile (30 s, longer
// at scale: reconcileShare) and every authority decision (Inspect re-reads
// tmux) catch: @skc-reservation, @skc-state and @skc-control, the identity
// beyond its last four hex digits, a pane respawned by hand.
const subFormat = "#{S:" + subSegment + " }"

// wroteFlag follows window_activity in the list and in reads by id: "+"
// while window_activity is still the session's creation second but the pane
// has written (its cursor has moved, or lines went to history), else nothing.
// tmux starts window_activity at the window's creation, in whole seconds, so
// without it an agent that prints its banner in its first second and then
// waits would look as if it had never written. It is not in subFormat: there
// it cost tmux 40-50 % more per evaluation for sessions that never wrote
// (their window_activity stays their creation time); a session the
// subscription first shows without activity is read by id once its creation
// second is over instead (wrotecheck.go).
const wroteFlag = "#{?#{==:#{window_activity},#{session_created}}," +
	"#{?#{==:#{cursor_x}#{cursor_y}#{history_size},000},,+},}"

// activityMod is the modulus of the activity field of subFormat (3 digits).
const activityMod = 1000

// segment is one session's part of a subscription value.
type segment struct {
	id, act, panes, rest string // rest: attached/identity/generation
}

func parseSegment(f string) segment {
	p := strings.SplitN(f, "/", 4)
	for len(p) < 4 {
		p = append(p, "")
	}
	return segment{id: p[0], act: p[1], panes: p[2], rest: p[3]}
}

// subDiff is what one subscription line asks of the census.
type subDiff struct {
	full  bool                // the first value of a connection: a full re-list
	stale bool                // a session appeared or went that the census does (not) hold: an id-only list
	reads []string            // held sessions whose pane or tags changed: read by id
	reap  bool                // a pane is dead without its status yet (reapPoke)
	stuck int                 // segments showing a pane dead without a status (stuck.go)
	acts  map[string]segment  // held sessions whose activity moved
	quiet []string            // sessions first shown (wrotecheck.go)
	segs  map[string]struct{} // the value's segments (raw)
}

// onSubscription acts on one census subscription line.
func (c *Census) onSubscription(ctx context.Context, b *burst, text string) {
	d := c.subChanged(text)
	c.noteStuck(b, d.stuck)
	if d.full {
		c.trigger(ctx, b, true)
		return
	}
	if len(d.acts) > 0 {
		c.applyActivity(d.acts)
	}
	if len(d.quiet) > 0 {
		c.checkWroteLater(b, d.quiet)
	}
	if d.reap {
		c.reapPoke(ctx)
	}
	if d.stale {
		c.trigger(ctx, b, false)
	}
	if len(d.reads) > 0 {
		if b.reads == nil {
			b.reads = map[string]struct{}{}
		}
		for _, id := range d.reads {
			b.reads[id] = struct{}{}
		}
		c.startReads(ctx, b)
	}
}

// subChanged records a census subscription line and compares it with the
// previous one and with the census. Each segment is led by the session's
// unique id: a segment whose id had one before is that session changing,
// any other a session appearing. Run's goroutine only.
func (c *Census) subChanged(text string) subDiff {
	_, val, ok := strings.Cut(text, " : ")
	d := subDiff{segs: map[string]struct{}{}}
	for _, f := range strings.Split(val, " ") {
		if f != "" {
			d.segs[f] = struct{}{}
		}
	}
	old := c.subSegs
	c.subSegs = d.segs
	seen := c.subSeen
	c.subSeen = make(map[string]string, len(d.segs))
	if !ok || old == nil {
		c.firstValue(&d)
		return d
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for f := range d.segs {
		sg := parseSegment(f)
		c.subSeen[sg.id] = f
		if sg.panes == "." {
			d.stuck++
		}
		prev, had := seen[sg.id]
		if had && prev == f {
			continue
		}
		ps := parseSegment(prev) // empty when !had
		if sg.panes == "." && ps.panes != "." {
			// Dead without a status, newly: held or not (a session first
			// seen so was never poked for before, stuck.go).
			d.reap = true
		}
		if !had {
			d.quiet = append(d.quiet, sg.id) // checked once its creation second is over
		}
		e := c.sessions[sg.id]
		if e == nil {
			if !had {
				d.stale = true // a new session the census does not hold yet
			}
			continue
		}
		if !had || ps.panes != sg.panes || ps.rest != sg.rest {
			if !segmentMatches(e.s, sg) {
				d.reads = append(d.reads, sg.id)
			}
		}
		if sg.act != actDigits(e.s) {
			if d.acts == nil {
				d.acts = map[string]segment{}
			}
			d.acts[sg.id] = sg
		}
	}
	c.noteGone(&d, seen, old)
	return d
}

// firstValue records a connection's first value, which a full re-list
// follows. Run's goroutine only.
func (c *Census) firstValue(d *subDiff) {
	for f := range d.segs {
		sg := parseSegment(f)
		c.subSeen[sg.id] = f
		if sg.panes == "." {
			d.stuck++
		}
	}
	d.full = true
}

// noteGone looks at the sessions of the previous value (seen, its segments
// old) missing from this one: one the census still holds is kept in subSeen,
// so that it reappearing changed is a change, and when it went just now the
// census is behind (stale). Run's goroutine only, c.mu read-held.
func (c *Census) noteGone(d *subDiff, seen map[string]string, old map[string]struct{}) {
	for id, f := range seen {
		if _, still := c.subSeen[id]; still {
			continue
		}
		if _, known := c.sessions[id]; known {
			c.subSeen[id] = f
			if _, was := old[f]; was {
				d.stale = true
			}
		}
	}
}

// segmentMatches says whether a segment's panes and tags agree with what the
// census holds of s (its active pane; a session of several panes never
// matches and is read by id when its segment changes).
func segmentMatches(s Session, sg segment) bool {
	return sg.panes == paneCode(s) &&
		sg.rest == strconv.Itoa(s.Attached)+"/"+lastN(s.Tags[TagIdentity], 4)+"/"+s.Tags[TagGeneration]
}

// paneCode is subFormat's code of a one-pane session's pane.
func paneCode(s Session) string {
	if !s.PaneDead {
		return ""
	}
	st := ""
	if s.PaneDeadStatus != nil {
		st = strconv.Itoa(*s.PaneDeadStatus)
	}
	return st + "." + s.PaneDeadSignal
}

func lastN(v string, n int) string {
	if len(v) > n {
		return v[len(v)-n:]
	}
	return v
}

// actDigits is subFormat's activity field for what the census holds of s.
func actDigits(s Session) string {
	t := s.Activity
	if t.IsZero() {
		t = s.Created
	}
	return fmt.Sprintf("%03d", t.Unix()%activityMod) // #{=-3:…} keeps leading zeros
}

// cutWrote splits an activity field into its value and wroteFlag.
func cutWrote(v string) (string, bool) {
	if w, ok := strings.CutSuffix(v, "+"); ok {
		return w, true
	}
	return v, false
}

// activityAt is a session's Activity from tmux's window_activity: zero while
// it is still the window's creation time and the pane has not written
// (wrote: wroteFlag); the creation second when it has.
func activityAt(act, created int64, wrote bool) time.Time {
	if act < created || act == created && !wrote {
		return time.Time{}
	}
	return time.Unix(act, 0).UTC()
}

// activityFrom rebuilds an activity time from its last three digits: the
// latest second up to now (plus a second of slack for tmux's clock) with
// those digits. The field only changes when the pane writes, and the
// subscription reports it within a second or two, so the latest such second
// is the one — unless the daemon stalled for over 16 minutes, which the next
// full list corrects.
func activityFrom(digits string, now time.Time) (time.Time, bool) {
	d, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || d < 0 || d >= activityMod {
		return time.Time{}, false
	}
	n := now.Unix() + 1
	t := n - ((n-d)%activityMod+activityMod)%activityMod
	return time.Unix(t, 0).UTC(), true
}

// applyActivity sets the activity of held sessions from subscription
// segments, without asking tmux, and emits each as Changed. Activity never
// moves back within a life: a list read before the output and applied
// after it keeps the later time (applyAt).
func (c *Census) applyActivity(acts map[string]segment) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	life := c.info.ServerLife
	for id, sg := range acts {
		old := c.sessions[id]
		if old == nil {
			continue
		}
		t, ok := activityFrom(sg.act, now)
		if !ok || !t.After(old.s.Activity) || !t.After(old.s.Created) {
			continue
		}
		e := *old
		e.s.Activity = t
		c.sessions[id] = &e
		if !e.control {
			c.emitLocked(Change{Kind: Changed, Session: e.s, Life: life})
		}
	}
}

// startReads starts the next batch of reads by id unless one is in flight.
// Many at once (a burst of deaths, say) cost one full list instead.
func (c *Census) startReads(ctx context.Context, b *burst) {
	if b.reading || len(b.reads) == 0 {
		return
	}
	if len(b.reads) > maxFreshReads {
		b.reads = nil
		c.trigger(ctx, b, true)
		return
	}
	ids := make([]string, 0, len(b.reads))
	for id := range b.reads {
		ids = append(ids, id)
	}
	b.reads, b.reading = nil, true
	go func() { b.readDone <- c.rereadIDs(ctx, ids) }()
}

// readsDone handles the end of a batch of reads by id: a failure costs a
// full re-list (with its backoff), and what arrived meanwhile goes next.
func (c *Census) readsDone(ctx context.Context, b *burst, err error) {
	b.reading = false
	if err != nil && !errors.Is(err, errStale) && !errors.Is(err, tmuxctl.ErrNotConnected) && ctx.Err() == nil {
		c.log.Warn().Err(err).Msg("census read by id failed; re-listing")
		c.trigger(ctx, b, true)
	}
	c.startReads(ctx, b)
}

// rereadIDs reads held sessions by id (base fields and own tags, exactly)
// and applies what changed. A session gone by then is left to the list its
// end's notification brings — unless its caller is removing it (Removing),
// whose end is answered by this read: ids are never reused within a server
// life, so "no such session" is final. One the census no longer holds is not
// added.
func (c *Census) rereadIDs(ctx context.Context, ids []string) error {
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	c.mu.RLock()
	life, epoch, connected := c.info.ServerLife, c.epoch, c.online
	c.mu.RUnlock()
	if !connected {
		return tmuxctl.ErrNotConnected
	}
	rows := make([]row, len(ids))
	todo := make([]int, len(ids))
	for i, id := range ids {
		rows[i], todo[i] = row{s: Session{ID: id}, broken: true}, i
	}
	out := make([]*entry, len(ids))
	if err := c.readExact(ctx, life, rows, todo, out); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch != epoch || !c.online || c.info.ServerLife != life {
		return errStale
	}
	for i, e := range out {
		if e == nil {
			c.removedLocked(ids[i], life)
			continue
		}
		old := c.sessions[e.s.ID]
		if old == nil {
			continue
		}
		e.control = e.control || old.control || e.s.ID == c.info.ControlSessionID
		e.admitted = old.admitted
		keepCreatorsTags(old, e)
		if old.s.Activity.After(e.s.Activity) {
			e.s.Activity = old.s.Activity
		}
		if old.control == e.control && sameSession(old.s, e.s) {
			continue
		}
		c.sessions[e.s.ID] = e
		c.changeLocked(old, e, life)
	}
	return nil
}
