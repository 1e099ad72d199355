package census

import (
	"cmp"
	"fmt"
	"maps"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// AdmitCreated puts a session the caller has just created into the census
// from what the caller knows of it, without asking tmux and without waiting
// for a list in flight, and reports whether the census holds it now. num is
// tmux's command number of the new-session that created it (its reply's
// %begin number).
//
// Why this is enough: tmux numbers every command it runs from one
// server-wide counter, in the order it runs them (docs/tmux-facts.md §1), and a list's
// reply carries its number too. A list numbered before num ran before the
// session existed, so its not showing the session proves nothing, and the
// census keeps an admitted entry through such a list (createdAfter). A list
// numbered after num shows the session if it was alive then: if that list
// has been applied already without it, the session is gone and is not
// admitted (false, nil); if it is applied later, it removes the entry and
// reports Removed like any end. So an end right after a create is either
// reported Removed or told to the creator now, which is what admission is
// for: the census can report Removed only for a session it holds, and a
// burst's own lists are debounced.
//
// s must carry the session's id, name, creation time, active pane and the
// tags the caller set on it; the next list replaces it with what tmux shows.
// tagged is the command number of the caller's last tag command (0: none
// known): a list or read that tmux ran before it may have caught the tags
// half set, and applied after this admission it would take the session's
// identity away until the next read (keepCreatorsTags); such a read keeps
// the creator's tags and name.
func (c *Census) AdmitCreated(life tmuxctl.ServerLife, s Session, num, tagged uint64) (bool, error) {
	if !validID(s.ID) {
		return false, fmt.Errorf("census: admit: bad session id %q", s.ID)
	}
	if num == 0 {
		return false, fmt.Errorf("census: admit %s: no command number", s.ID)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, held := c.sessions[s.ID]; held {
		c.retagLocked(old, s, life, tagged)
		return true, nil
	}
	if !c.online || !c.synced || c.info.ServerLife != life {
		return false, errStale // the next full sync of this life lists it
	}
	if c.listedLife == life && c.listedNum != 0 && numBefore(num, c.listedNum) {
		return false, nil // a list run after its creation did not show it: gone
	}
	// A copy: the caller's map and pointers are not the census's.
	e := &entry{s: s.clone(), exact: tagsOf(s.Tags), admitted: num, tagged: tagged}
	e.s.Managed = e.s.Tags[TagIdentity] != ""
	e.control = s.ID == c.info.ControlSessionID
	c.sessions[s.ID] = e
	c.indexLocked(e)
	if !e.control {
		c.emitLocked(Change{Kind: Added, Session: e.s, Life: life})
	}
	return true, nil
}

// retagLocked gives a held entry the tags its creator just set, when a list or
// a read by id caught the session while they were being set (they are sent
// pipelined, in no fixed order): the creator's values are the session's own by
// now, and the subscription, which only sees a session appear, would not have
// told. The name is the creator's too: a warm pool's standby, held since it
// was spawned, was renamed to its attempt's name just before (the relist that
// rename triggers may not have run yet). So is the pane, when the creator
// names another pid than the held entry: a restart respawned the pane, and
// the entry still shows the previous generation's dead one (a pane's pid
// changes only so). An entry read after the creator's last command is left as
// tmux showed it. c.mu is held.
func (c *Census) retagLocked(old *entry, s Session, life tmuxctl.ServerLife, tagged uint64) {
	name, tags := s.Name, s.Tags
	newPane := s.PanePID != 0 && s.PanePID != old.s.PanePID
	same := tagsOf(tags) == old.exact && len(old.s.Tags) == len(tags) && (name == "" || name == old.s.Name) && !newPane
	// Read after the creator's last command: tmux's own word, which a rename
	// by hand right after the create may already have changed (renamed.go
	// does not list again when the census holds the name its notification
	// carries).
	readAfter := tagged != 0 && old.readAt != 0 && numBefore(tagged, old.readAt)
	if same || readAfter {
		old.tagged = tagged
		return
	}
	e := &entry{s: old.s.clone(), exact: tagsOf(tags), control: old.control, admitted: old.admitted, tagged: tagged, readAt: old.readAt}
	if name != "" {
		e.s.Name = name
	}
	if newPane {
		e.s.PaneID, e.s.PanePID = cmp.Or(s.PaneID, e.s.PaneID), s.PanePID
		e.s.PaneDead, e.s.PaneDeadStatus, e.s.PaneDeadSignal = false, nil, ""
	}
	e.s.Tags = maps.Clone(tags)
	e.s.Managed = e.s.Tags[TagIdentity] != ""
	c.sessions[e.s.ID] = e
	c.changeLocked(old, e, life)
}

// keepCreatorsTags gives e, read from tmux to replace old, old's picture of
// the session when old was admitted by its creator (AdmitCreated) with tags
// set by a command tmux ran after e's read: that read may have caught them
// half set, and all it shows is older than what the creator knew — the
// respawned pane of a restart, say, which it still shows dead with the
// previous generation's pid. Only a later activity is taken from it. A read
// after the tags is tmux's own word, and the creator's guard ends there.
// c.mu is held.
func keepCreatorsTags(old, e *entry) {
	if old == nil || old == e || old.tagged == 0 {
		return
	}
	if e.readAt == 0 || !numBefore(e.readAt, old.tagged) {
		return // read after the tags (or not known when): tmux's word
	}
	act := e.s.Activity
	e.s, e.exact = old.s.clone(), old.exact
	if act.After(e.s.Activity) {
		e.s.Activity = act
	}
	e.tagged = old.tagged
}

// createdAfter reports whether e was admitted by AdmitCreated for a session
// tmux created after it ran the list numbered num: that list cannot show it.
func createdAfter(e *entry, num uint64) bool {
	return e.admitted != 0 && num != 0 && numBefore(num, e.admitted)
}

// noteListedLocked records the number of a list just applied. c.mu is held.
func (c *Census) noteListedLocked(life tmuxctl.ServerLife, num uint64) {
	if num == 0 {
		return
	}
	if c.listedLife != life || c.listedNum == 0 || numBefore(c.listedNum, num) {
		c.listedLife, c.listedNum = life, num
	}
}

// LastNumber is the latest of tmux command numbers (0: none known), as the
// census orders them (numBefore): what a creator passes AdmitCreated as the
// number of its last tag command.
func LastNumber(nums ...uint64) uint64 {
	var last uint64
	for _, n := range nums {
		if n != 0 && (last == 0 || numBefore(last, n)) {
			last = n
		}
	}
	return last
}

// numBefore compares tmux command numbers, which are a C u_int: serial
// number arithmetic (RFC 1982), so a server that has run more than 2^32
// commands still compares numbers close in time correctly.
func numBefore(a, b uint64) bool {
	return int32(uint32(a)-uint32(b)) < 0
}
