package census

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// How tags are read exactly, and cheaply (docs/tmux-facts.md §7.2).
//
// `#{@skc-identity}` in a session format is resolved by format_find in the
// order server options → pane → window → global window → session → global
// session, and format_defaults fills in the session's current window and
// active pane. So the list value of a tag can be shadowed by a server,
// window, pane or global-window option, or inherited from `set -g`. Only
// `show-options -t '$N'` (no -A, no -g) reads the session's own options, and
// that is one command per session.
//
// A full sync therefore sends, pipelined: the list (one line per session with
// every tag's *resolved* value) plus three tiny global reads (`show-options -s`,
// `-gw`, `-g`). It then reads a session's own options exactly only when:
//   - a server or global-window `@skc-*` option exists (it could shadow any
//     session, even with an empty value): every session, every sync;
//   - the session is new (once per session: creates are rare and cost tmux
//     far more than one show-options; it also proves the id exists, so a
//     hand-set tag value holding a newline cannot forge a session line);
//   - the resolved values differ from what the session's own values (last read
//     exactly) plus the `set -g` defaults predict, which catches every change
//     made by hand and every window/pane-level shadow that changes a value.
//
// In the steady state that is zero extra per-session commands. What remains
// unseen is a window/pane-level `@skc-*` option whose value hides a later
// change of the session's own value without changing the resolved one — it
// needs a human to set supervisor tags at the wrong level. Inspect never
// relies on the list alone for the sessions it judges: it reads them exactly.

// tagNames are the tags read in the list, in field order.
var tagNames = [...]string{TagControl, TagIdentity, TagGeneration, TagReservation, TagState, TagSince}

// tagVals holds the tagNames values, in order.
type tagVals [len(tagNames)]string

const (
	baseFields = 9                              // id … window_activity
	listFields = baseFields + len(tagNames) + 1 // base fields, tags, name (the rest of the line)
	// listFormat puts the name last so that it is "the rest of the line".
	listFormat = "#{session_id}\t#{session_created}\t#{session_attached}\t" +
		"#{pane_id}\t#{pane_pid}\t#{pane_dead}\t#{pane_dead_status}\t#{pane_dead_signal}\t#{window_activity}" + wroteFlag + "\t" +
		"#{@skc-control}\t#{@skc-identity}\t#{@skc-generation}\t#{@skc-reservation}\t#{@skc-state}\t#{@skc-since}\t" +
		"#{session_name}"
	// baseFormat is listFormat without tags, for sessions whose list line did
	// not parse (a hand-set tag holding a tab or newline).
	baseFormat = "#{session_id}\t#{session_created}\t#{session_attached}\t" +
		"#{pane_id}\t#{pane_pid}\t#{pane_dead}\t#{pane_dead_status}\t#{pane_dead_signal}\t#{window_activity}" + wroteFlag + "\t" +
		"#{session_name}"
)

// errStale means a sync's result belongs to an epoch that has ended.
var errStale = errors.New("census: sync overtaken by a connect or disconnect")

// errNoControl means a list did not show the census's own control session.
// A live server always lists it (the control client is attached to it), so
// such a list is no picture of a live server: when the server is killed,
// tmux can answer a list already sent with an empty body just before %exit,
// and reading that as "every session gone" would end sessions as
// tmux_session_missing instead of server_exited. It is treated as no answer.
var errNoControl = errors.New("census: list without the control session (server exiting?): not applied")

// row is one parsed list line.
type row struct {
	line    string
	s       Session // base fields
	list    tagVals // resolved tag values as the list shows them
	badTags bool    // some resolved tag is not a safe token
	broken  bool    // the line did not parse; only s.ID is known
	prev    *entry  // the census entry for s.ID when the list was read
	same    bool    // the line equals prev.line and was not parsed
}

// globals is what the three global option reads found.
type globals struct {
	shadow bool    // a server or global-window @skc-* option exists
	gsess  tagVals // `set -g` session defaults
}

// Refresh runs a full re-list now and returns when the census has applied it.
func (c *Census) Refresh(ctx context.Context) error {
	return c.resync(ctx)
}

// resync lists every session and applies the result in the epoch it started in.
func (c *Census) resync(ctx context.Context) error {
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	c.mu.RLock()
	life, epoch, connected := c.info.ServerLife, c.epoch, c.online
	c.mu.RUnlock()
	if !connected {
		return tmuxctl.ErrNotConnected
	}
	c.relists.Add(1)
	began := time.Now()
	rows, g, num, err := c.readList(ctx, life, false)
	if err != nil {
		return err
	}
	entries, err := c.resolve(ctx, life, rows, g)
	if err != nil {
		return err
	}
	return c.applyTimed(epoch, life, entries, num, began)
}

// relistIDs applies ended sessions from an id-only list, which costs tmux
// far less than the full list (no tags or pane fields per session). A few
// ids the census does not hold (sessions just created) are read by id, two
// small commands each whatever the server's size; many fall back to a full
// resync. Ids are never reused within a server life (docs/tmux-facts.md §8), so an id
// missing from the list is a session gone.
func (c *Census) relistIDs(ctx context.Context) error {
	c.syncMu.Lock()
	c.mu.RLock()
	life, epoch, connected := c.info.ServerLife, c.epoch, c.online
	c.mu.RUnlock()
	if !connected {
		c.syncMu.Unlock()
		return tmuxctl.ErrNotConnected
	}
	c.idLists.Add(1)
	rep, err := c.cl.CommandIn(ctx, life, "list-sessions", "-F", "#{session_id}")
	if err == nil && !c.showsControl(rep.Lines) {
		err = errNoControl
	}
	if err != nil {
		c.syncMu.Unlock()
		return err
	}
	fresh, err := c.applyIDs(epoch, life, rep)
	if err == nil && len(fresh) > 0 && len(fresh) <= maxFreshReads {
		err = c.readFresh(ctx, epoch, life, fresh, rep.Number)
		fresh = nil
	}
	c.syncMu.Unlock()
	if err == nil && len(fresh) > 0 {
		return c.resync(ctx)
	}
	return err
}

// maxFreshReads bounds the new ids an id-only list reads one by one; more
// (a burst of sessions made by hand, say) cost one full list instead.
const maxFreshReads = 32

// applyIDs removes what an id-only list no longer shows and returns the ids
// it shows that the census does not hold.
func (c *Census) applyIDs(epoch uint64, life tmuxctl.ServerLife, rep tmuxctl.Reply) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch != epoch || !c.online || c.info.ServerLife != life {
		return nil, errStale
	}
	listed := make(map[string]struct{}, len(rep.Lines))
	var fresh []string
	for _, id := range rep.Lines {
		listed[id] = struct{}{}
		if _, ok := c.sessions[id]; !ok && validID(id) {
			fresh = append(fresh, id)
		}
	}
	var gone []*entry
	for id, e := range c.sessions {
		if _, ok := listed[id]; !ok && !createdAfter(e, rep.Number) {
			gone = append(gone, e)
		}
	}
	if len(fresh) == 0 {
		// Only a list whose every session the census now holds may tell
		// AdmitCreated that a session it did not show is gone (readFresh).
		c.noteListedLocked(life, rep.Number)
	}
	for _, e := range sortEntries(gone) {
		c.unindexLocked(e)
		delete(c.sessions, e.s.ID)
		c.doneRemoving(e.s.ID) // a removal told in advance (Removing) is over
		if !e.control {
			c.emitLocked(Change{Kind: Removed, Session: e.s, Reason: ReasonGone, Life: life})
		}
	}
	return fresh, nil
}

// readFresh reads new sessions by id (base fields and own tags, exactly) and
// adds those still there. The sync lock is held, so no list runs meanwhile.
// num is the id-only list's command number: it counts as the last list only
// when every id it showed is held now. A session it showed that is gone by the
// read is not held, and AdmitCreated must still be able to admit it — its
// creator is about to answer for it, and the next list reports it Removed.
func (c *Census) readFresh(ctx context.Context, epoch uint64, life tmuxctl.ServerLife, ids []string, num uint64) error {
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
	complete := true
	defer func() {
		if complete {
			c.noteListedLocked(life, num)
		}
	}()
	for _, e := range out {
		if e == nil { // gone again already: nothing to add, nothing to remove
			complete = false
			continue
		}
		if _, held := c.sessions[e.s.ID]; held {
			continue
		}
		e.control = e.control || e.s.ID == c.info.ControlSessionID
		c.sessions[e.s.ID] = e
		c.indexLocked(e)
		if !e.control {
			c.emitLocked(Change{Kind: Added, Session: e.s, Life: life})
		}
	}
	return nil
}

// readList sends the list and the global reads pipelined and parses them.
// Unless parseAll, a line identical to the one its session was last built
// from is not parsed: the row only points at that entry (prev, same).
func (c *Census) readList(ctx context.Context, life tmuxctl.ServerLife, parseAll bool) ([]row, globals, uint64, error) {
	replies, err := c.pipeline(ctx, life, [][]string{
		{"list-sessions", "-F", listFormat},
		{"show-options", "-s"},
		{"show-options", "-gw"},
		{"show-options", "-g"},
	})
	if err != nil {
		return nil, globals{}, 0, err
	}
	var g globals
	g.shadow = len(parseOptions(replies[1].Lines)) > 0 || len(parseOptions(replies[2].Lines)) > 0
	g.gsess = tagsOf(parseOptions(replies[3].Lines))
	if !c.showsControl(replies[0].Lines) {
		return nil, globals{}, 0, errNoControl
	}
	rows := make([]row, 0, len(replies[0].Lines))
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, line := range replies[0].Lines {
		id, _, _ := strings.Cut(line, "\t")
		p := c.sessions[id]
		if p != nil && p.line == line && !parseAll && !g.shadow {
			rows = append(rows, row{line: line, s: Session{ID: id}, prev: p, same: true})
			continue
		}
		r, ok := parseRow(line)
		if !ok {
			c.log.Warn().Str("line", clip(line)).Msg("skipping unparseable list-sessions line")
			continue
		}
		r.prev = p
		rows = append(rows, r)
	}
	distrustDuplicates(rows)
	return rows, g, replies[0].Number, nil
}

// showsControl reports whether list lines (each led by a session id and a
// tab, or an id alone) include the control session of the current
// connection (true when it is not known, as in unit tests).
func (c *Census) showsControl(lines []string) bool {
	c.mu.RLock()
	ctl := c.info.ControlSessionID
	c.mu.RUnlock()
	if ctl == "" {
		return true
	}
	for _, l := range lines {
		if id, _, _ := strings.Cut(l, "\t"); id == ctl {
			return true
		}
	}
	return false
}

// distrustDuplicates marks every row of an id listed twice as broken, so
// that its fields are read again from tmux by id. Only a hand-set tag value
// holding a newline can make a line look like another session's.
func distrustDuplicates(rows []row) {
	first := make(map[string]int, len(rows))
	for i := range rows {
		j, dup := first[rows[i].s.ID]
		if !dup {
			first[rows[i].s.ID] = i
			continue
		}
		for _, k := range []int{i, j} {
			rows[k].broken, rows[k].same = true, false
			rows[k].s = Session{ID: rows[k].s.ID}
		}
	}
}

// pipeline sends every command at once (tmuxctl matches replies FIFO) and
// waits for all; the first error wins.
func (c *Census) pipeline(ctx context.Context, life tmuxctl.ServerLife, cmds [][]string) ([]tmuxctl.Reply, error) {
	replies := make([]tmuxctl.Reply, len(cmds))
	errs := make([]error, len(cmds))
	var wg sync.WaitGroup
	for i, args := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i], errs[i] = c.cl.CommandIn(ctx, life, args...)
		}()
	}
	wg.Wait()
	return replies, errors.Join(errs...)
}

// parseRow parses one list line. ok is false when not even the id is
// readable; a line with a readable id but a bad shape comes back broken.
func parseRow(line string) (row, bool) {
	f := strings.SplitN(line, "\t", listFields)
	if !validID(f[0]) {
		return row{}, false
	}
	r := row{line: line, s: Session{ID: f[0]}}
	// A name never holds a raw tab (tmux escapes it), so a tab in the last
	// field means a tag value held one and the fields are misaligned.
	if len(f) != listFields || strings.IndexByte(f[listFields-1], '\t') >= 0 || !parseBase(&r.s, f[:baseFields]) {
		r.broken = true
		return r, true
	}
	for i := range tagNames {
		v := f[baseFields+i]
		r.list[i] = v
		if v != "" && !safeToken(v) {
			r.badTags = true
		}
	}
	r.s.Name = f[listFields-1]
	return r, true
}

// parseBase fills the non-tag fields from f (id … window_activity).
func parseBase(s *Session, f []string) bool {
	created, err1 := strconv.ParseInt(f[1], 10, 64)
	attached, err2 := strconv.Atoi(f[2])
	pid, err3 := strconv.Atoi(f[4])
	actField, wrote := cutWrote(f[8])
	act, err4 := strconv.ParseInt(actField, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || (f[5] != "0" && f[5] != "1") {
		return false
	}
	s.Activity = activityAt(act, created, wrote)
	s.Created = time.Unix(created, 0).UTC()
	s.Attached = attached
	s.PaneID = f[3]
	s.PanePID = pid
	s.PaneDead = f[5] == "1"
	s.PaneDeadStatus = nil
	if f[6] != "" {
		st, err := strconv.Atoi(f[6])
		if err != nil {
			return false
		}
		s.PaneDeadStatus = &st
	}
	s.PaneDeadSignal = f[7]
	return true
}

// resolve turns rows into entries, reading own tags exactly where needed
// (see the comment at the top of this file).
func (c *Census) resolve(ctx context.Context, life tmuxctl.ServerLife, rows []row, g globals) ([]*entry, error) {
	out := make([]*entry, len(rows))
	var todo []int
	for i, r := range rows {
		switch {
		case r.same:
			out[i] = r.prev // unchanged line: nothing to parse or read
		case needExact(r, r.prev, g):
			todo = append(todo, i)
		default:
			out[i] = buildEntry(r, r.prev)
		}
	}
	if err := c.readExact(ctx, life, rows, todo, out); err != nil {
		return nil, err
	}
	kept := out[:0]
	ids := make(map[string]struct{}, len(out))
	for i, e := range out {
		if e == nil && rows[i].prev != nil {
			// Gone between the list and the exact read, or the server is
			// exiting and answers reads of live sessions as missing: only
			// a list that shows the control session removes a session, and
			// its end sent a notification that brings the next one.
			e = rows[i].prev
		}
		if e == nil { // a new session gone already: never held, nothing to tell
			continue
		}
		if _, dup := ids[e.s.ID]; !dup { // duplicates were re-read by id: equal
			ids[e.s.ID] = struct{}{}
			kept = append(kept, e)
		}
	}
	return kept, nil
}

// needExact says whether r's own tags must be read with show-options.
func needExact(r row, p *entry, g globals) bool {
	if g.shadow || r.broken || r.badTags {
		return true
	}
	if p == nil {
		return true // a new id: read once, so a forged or shadowed line cannot invent or hide it
	}
	return r.list != effective(p.exact, g.gsess)
}

// effective is what the list shows for a session whose own values are own,
// when nothing shadows it: its own value, else the `set -g` default.
func effective(own, gsess tagVals) tagVals {
	for i := range own {
		if own[i] == "" {
			own[i] = gsess[i]
		}
	}
	return own
}

// buildEntry makes an entry from a row whose own tags are known: unchanged
// from p, or (new session, all tags empty) none.
func buildEntry(r row, p *entry) *entry {
	e := &entry{s: r.s, line: r.line}
	if p != nil {
		e.exact = p.exact
		e.s.Tags = p.s.Tags
		e.control = p.control
	}
	e.s.Managed = e.s.Tags[TagIdentity] != ""
	return e
}

// readExact reads the own options of rows[todo] with bounded concurrency.
func (c *Census) readExact(ctx context.Context, life tmuxctl.ServerLife, rows []row, todo []int, out []*entry) error {
	if len(todo) == 0 {
		return nil
	}
	par := min(c.cfg.confirmPar, len(todo))
	next := make(chan int)
	errs := make([]error, len(todo))
	var wg sync.WaitGroup
	for w := 0; w < par; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range next {
				out[todo[k]], errs[k] = c.exactEntry(ctx, life, rows[todo[k]])
			}
		}()
	}
	for k := range todo {
		next <- k
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// exactEntry reads one session's own options (and, for a broken line, its base
// fields). A nil entry with a nil error means the session is gone.
func (c *Census) exactEntry(ctx context.Context, life tmuxctl.ServerLife, r row) (*entry, error) {
	c.confirms.Add(1)
	s := r.s
	if !r.broken {
		rep, err := c.cl.CommandIn(ctx, life, "show-options", "-t", s.ID)
		if err != nil {
			return nil, goneOr(err)
		}
		return c.exactFrom(s, r, rep), nil
	}
	// Both reads at once: one round trip, not two (a create's admission waits
	// for it). A session gone in between fails both with an error block.
	reps, err := c.pipeline(ctx, life, [][]string{
		{"display-message", "-p", "-t", s.ID, baseFormat},
		{"show-options", "-t", s.ID},
	})
	if err != nil || len(reps[0].Lines) != 1 {
		return nil, goneOr(err)
	}
	f := strings.SplitN(reps[0].Lines[0], "\t", baseFields+1)
	if len(f) != baseFields+1 || f[0] != s.ID || !parseBase(&s, f[:baseFields]) {
		return nil, nil // CANFAIL: an empty expansion means the target is gone
	}
	s.Name = f[baseFields]
	return c.exactFrom(s, r, reps[1]), nil
}

// exactFrom builds the entry of session s from its own show-options reply.
func (c *Census) exactFrom(s Session, r row, rep tmuxctl.Reply) *entry {
	opts := parseOptions(rep.Lines)
	e := &entry{s: s, line: r.line, exact: tagsOf(opts), readAt: rep.Number}
	if len(opts) > 0 {
		e.s.Tags = opts
	}
	e.control = e.exact[0] != ""
	e.s.Managed = e.s.Tags[TagIdentity] != ""
	if r.broken {
		e.line = "" // never take the fast path on a line that did not parse
	}
	return e
}

// goneOr maps a command error about a missing session to "gone" (nil) and
// keeps every other error.
func goneOr(err error) error {
	var ce *tmuxctl.CommandError
	if err == nil || errors.As(err, &ce) {
		return nil
	}
	return err
}

// parseOptions returns the @skc-* options in show-options output lines
// ("name value"). Values of ours are safe tokens; anything else is kept raw.
func parseOptions(lines []string) map[string]string {
	var m map[string]string
	for _, l := range lines {
		if !strings.HasPrefix(l, "@skc-") {
			continue
		}
		name, val, _ := strings.Cut(l, " ")
		if m == nil {
			m = map[string]string{}
		}
		m[name] = val
	}
	return m
}

func tagsOf(m map[string]string) tagVals {
	var t tagVals
	for i, n := range tagNames {
		t[i] = m[n]
	}
	return t
}

// apply replaces the census contents with entries and emits the differences,
// unless the epoch the sync started in has ended.
func (c *Census) apply(epoch uint64, life tmuxctl.ServerLife, entries []*entry) error {
	return c.applyAt(epoch, life, entries, 0)
}

// applyAt is apply for a list tmux ran as command number num (0: unknown,
// which keeps no admitted entry through it).
func (c *Census) applyAt(epoch uint64, life tmuxctl.ServerLife, entries []*entry, num uint64) error {
	return c.applyTimed(epoch, life, entries, num, time.Time{})
}

// applyTimed is applyAt for a full sync that began at began (zero: not
// timed). The duration is stored under c.mu before the census says synced,
// so no reader sees a synced census without its sync's duration.
func (c *Census) applyTimed(epoch uint64, life tmuxctl.ServerLife, entries []*entry, num uint64, began time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch != epoch || !c.online || c.info.ServerLife != life {
		return errStale
	}
	seen := make(map[string]struct{}, len(entries))
	for _, e := range entries {
		seen[e.s.ID] = struct{}{}
		if e.s.ID == c.info.ControlSessionID {
			e.control = true // tmuxctl's own session, even if its tag was removed by hand
		}
		old := c.sessions[e.s.ID]
		if old != nil && old != e && old.s.Activity.After(e.s.Activity) {
			e.s.Activity = old.s.Activity // set from the subscription after this list was read
		}
		if e.readAt == 0 && old != e {
			e.readAt = num // its tags are the list's own, read at its number
		}
		keepCreatorsTags(old, e)
		c.sessions[e.s.ID] = e
		switch {
		case old == nil:
			c.indexLocked(e)
			if !e.control {
				c.emitLocked(Change{Kind: Added, Session: e.s, Life: life})
			}
		case old == e:
		case old.control != e.control || !sameSession(old.s, e.s):
			c.changeLocked(old, e, life)
		}
	}
	var gone []*entry
	for id, e := range c.sessions {
		if _, ok := seen[id]; !ok && !createdAfter(e, num) {
			gone = append(gone, e)
		}
	}
	c.noteListedLocked(life, num)
	for _, e := range sortEntries(gone) {
		c.unindexLocked(e)
		delete(c.sessions, e.s.ID)
		c.doneRemoving(e.s.ID) // a removal told in advance (Removing) is over
		if !e.control {
			c.emitLocked(Change{Kind: Removed, Session: e.s, Reason: ReasonGone, Life: life})
		}
	}
	if c.lifeEnded { // see onConnected: what ended unlisted needs a reconcile
		c.lifeEnded = false
		c.emitLocked(Change{Kind: Resync, Life: life})
	}
	if !began.IsZero() {
		c.lastSync.Store(int64(time.Since(began)))
		c.lastSyncAt.Store(time.Now().UnixNano())
	}
	c.setSyncedLocked()
	return nil
}

// changeLocked replaces old by e in the indexes and emits the change. A
// session that became (or stopped being) the control session appears as
// Removed (or Added), because the control session is never exposed.
func (c *Census) changeLocked(old, e *entry, life tmuxctl.ServerLife) {
	c.unindexLocked(old)
	c.indexLocked(e)
	switch {
	case old.control && e.control:
	case old.control:
		c.emitLocked(Change{Kind: Added, Session: e.s, Life: life})
	case e.control:
		c.emitLocked(Change{Kind: Removed, Session: old.s, Reason: ReasonGone, Life: life})
	default:
		c.emitLocked(Change{Kind: Changed, Session: e.s, Life: life, PaneDied: e.s.PaneDead && !old.s.PaneDead,
			PaneChanged: old.s.PanePID != 0 && e.s.PanePID != 0 && e.s.PanePID != old.s.PanePID})
	}
}

func sortEntries(es []*entry) []*entry {
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && idLess(es[j].s.ID, es[j-1].s.ID); j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
	return es
}

// sameSession compares every field a consumer can see.
func sameSession(a, b Session) bool {
	if a.ID != b.ID || a.Name != b.Name || !a.Created.Equal(b.Created) || a.Attached != b.Attached ||
		a.PaneID != b.PaneID || a.PanePID != b.PanePID || a.PaneDead != b.PaneDead ||
		a.PaneDeadSignal != b.PaneDeadSignal || a.Managed != b.Managed || len(a.Tags) != len(b.Tags) ||
		!a.Activity.Equal(b.Activity) {
		return false
	}
	if (a.PaneDeadStatus == nil) != (b.PaneDeadStatus == nil) ||
		(a.PaneDeadStatus != nil && *a.PaneDeadStatus != *b.PaneDeadStatus) {
		return false
	}
	for k, v := range a.Tags {
		if w, ok := b.Tags[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// validID reports whether s is a tmux session id "$N".
func validID(s string) bool {
	if len(s) < 2 || s[0] != '$' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// safeToken reports whether v uses only the tag alphabet (no space, quote,
// '#', newline or tab can appear, so a line stays one record).
func safeToken(v string) bool {
	for i := 0; i < len(v); i++ {
		b := v[i]
		if !(b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b == '-' || b == '_' || b == '.') {
			return false
		}
	}
	return v != ""
}

func clip(s string) string {
	if len(s) > 200 {
		return fmt.Sprintf("%s… (%d bytes)", s[:200], len(s))
	}
	return s
}
