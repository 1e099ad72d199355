package census

import (
	"context"
	"strings"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// AdmitCreated is ordered against lists by tmux's command numbers: a list run
// before the session's new-session keeps it, a list run after it removes it
// (Removed), and a session that an already applied later list did not show
// is not admitted at all.
func TestAdmitCreatedOrdersAgainstLists(t *testing.T) {
	life := tmuxctl.ServerLife{Socket: "s", PID: 10, StartTime: 1}
	c := offline(life)
	sub := c.Subscribe(16)
	defer sub.Close()
	if err := c.applyAt(c.epoch, life, nil, 50); err != nil {
		t.Fatal(err)
	}
	s := Session{ID: "$5", Name: "n", Tags: map[string]string{TagIdentity: digest(5)}}
	if ok, err := c.AdmitCreated(life, s, 100, 0); !ok || err != nil {
		t.Fatalf("AdmitCreated: %v %v", ok, err)
	}
	if got, ok := c.ByID("$5"); !ok || !got.Managed || len(c.ByIdentity(digest(5))) != 1 {
		t.Fatalf("admitted session: %+v %v", got, ok)
	}
	if err := c.applyAt(c.epoch, life, nil, 90); err != nil { // ran before the new-session
		t.Fatal(err)
	}
	if _, ok := c.ByID("$5"); !ok {
		t.Fatal("a list run before the session existed removed it")
	}
	if err := c.applyAt(c.epoch, life, nil, 110); err != nil { // ran after: the session is gone
		t.Fatal(err)
	}
	if _, ok := c.ByID("$5"); ok {
		t.Fatal("a list run after the create did not remove the gone session")
	}
	for _, want := range []string{"added $5", "removed $5"} {
		ch := <-sub.C()
		if got := ch.Kind.String() + " " + ch.Session.ID; got != want {
			t.Fatalf("change %q, want %q", got, want)
		}
	}
	// Created (number 105) before the list just applied (110), which did not
	// show it: it is gone, and admitting it would leave a ghost.
	if ok, err := c.AdmitCreated(life, Session{ID: "$6", Name: "m"}, 105, 0); ok || err != nil {
		t.Fatalf("AdmitCreated of a session a later list did not show: %v %v", ok, err)
	}
	if ok, err := c.AdmitCreated(tmuxctl.ServerLife{Socket: "s", PID: 11, StartTime: 2}, Session{ID: "$7"}, 120, 0); ok || err == nil {
		t.Fatalf("AdmitCreated in another server life: %v %v", ok, err)
	}
	if _, err := c.AdmitCreated(life, Session{ID: "7"}, 120, 0); err == nil {
		t.Fatal("AdmitCreated accepted a bad id")
	}
}

func TestNumBeforeWraps(t *testing.T) {
	for _, c := range []struct {
		a, b uint64
		want bool
	}{{1, 2, true}, {2, 1, false}, {5, 5, false}, {0xfffffff0, 5, true}, {5, 0xfffffff0, false}} {
		if got := numBefore(c.a, c.b); got != c.want {
			t.Errorf("numBefore(%#x, %#x) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// Against real tmux, inside a burst (the census's own re-list debounced): a
// session created over the control connection and admitted from its
// new-session reply, then killed at once, is reported Removed.
func TestAdmitCreatedEndRightAfterCreate(t *testing.T) {
	r := newRig(t, slowRelists())
	sub := r.c.Subscribe(64)
	defer sub.Close()
	info, _ := r.c.Info()
	r.tmux("new-session", "-d", "-s", "lead", "cat") // leading edge: the burst begins
	eventually(t, "lead listed", func() bool { _, ok := r.c.ByName("lead"); return ok })
	ctx := context.Background()
	rep, err := r.cl.CommandIn(ctx, info.ServerLife, "new-session", "-d", "-P", "-F", "#{session_id}\t#{pane_id}", "-s", "brief", "cat")
	if err != nil {
		t.Fatal(err)
	}
	id, pane, _ := strings.Cut(rep.Lines[0], "\t")
	s := Session{ID: id, Name: "brief", PaneID: pane, Tags: map[string]string{TagIdentity: digest(1)}}
	if ok, err := r.c.AdmitCreated(info.ServerLife, s, rep.Number, 0); !ok || err != nil {
		t.Fatalf("AdmitCreated %s: %v %v", id, ok, err)
	}
	r.tmux("kill-session", "-t", id)
	for {
		ch := next(t, sub)
		if ch.Kind == Removed && ch.Session.ID == id {
			if ch.Reason != ReasonGone || ch.Session.Name != "brief" {
				t.Fatalf("Removed %+v", ch)
			}
			break
		}
	}
	if _, ok := r.c.ByID(id); ok {
		t.Fatal("the ended session is still in the census")
	}
}

// A session the census read while its creator's tags were still being set
// (pipelined, in no fixed order) gets the full tags when its creator admits
// it, with a Changed.
func TestAdmitCreatedCompletesPartialTags(t *testing.T) {
	life := tmuxctl.ServerLife{Socket: "s", PID: 10, StartTime: 1}
	c := offline(life)
	sub := c.Subscribe(16)
	defer sub.Close()
	partial := entryFor(5, "n", digest(5)) // identity only: read mid-tagging
	if err := c.applyAt(c.epoch, life, []*entry{partial}, 120); err != nil {
		t.Fatal(err)
	}
	tags := map[string]string{TagIdentity: digest(5), TagGeneration: "3", TagReservation: "r", TagState: "s"}
	if ok, err := c.AdmitCreated(life, Session{ID: "$5", Name: "n", Tags: tags}, 100, 0); !ok || err != nil {
		t.Fatalf("AdmitCreated: %v %v", ok, err)
	}
	if got, _ := c.ByID("$5"); got.Tags[TagGeneration] != "3" || len(got.Tags) != 4 || !got.Managed {
		t.Fatalf("tags after admission: %+v", got.Tags)
	}
	for _, want := range []string{"added $5", "changed $5"} {
		ch := <-sub.C()
		if got := ch.Kind.String() + " " + ch.Session.ID; got != want {
			t.Fatalf("change %q, want %q", got, want)
		}
	}
}

// A warm pool's standby, held untagged under its standby name since it was
// spawned, is renamed and tagged by the create that claims it: admission gives
// the census both before the relist the rename triggers, so the session is
// found by its attempt name and no longer by the standby's.
func TestAdmitCreatedTakesTheClaimsName(t *testing.T) {
	life := tmuxctl.ServerLife{Socket: "s", PID: 10, StartTime: 1}
	c := offline(life)
	standby := entryFor(6, "skc-standby-0123456789abcdef", "")
	if err := c.applyAt(c.epoch, life, []*entry{standby}, 120); err != nil {
		t.Fatal(err)
	}
	tags := map[string]string{TagIdentity: digest(6), TagGeneration: "1", TagReservation: "r", TagState: "s"}
	if ok, err := c.AdmitCreated(life, Session{ID: "$6", Name: "skc-attempt", Tags: tags}, 130, 0); !ok || err != nil {
		t.Fatalf("AdmitCreated: %v %v", ok, err)
	}
	if got, ok := c.ByName("skc-attempt"); !ok || got.ID != "$6" || !got.Managed {
		t.Fatalf("by the attempt's name: %+v %v", got, ok)
	}
	if _, ok := c.ByName("skc-standby-0123456789abcdef"); ok {
		t.Fatal("still found by the standby's name")
	}
}

// A list (or read) tmux ran while the creator's tags were being set, applied
// after the creator admitted the session, keeps the creator's tags and name:
// applied as read it took the session's identity away (a lookup found an
// unmanaged session) until the next read. A list run after the last tag
// command is tmux's own word again.
func TestAdmitCreatedOutlivesAnEarlierRead(t *testing.T) {
	life := tmuxctl.ServerLife{Socket: "s", PID: 10, StartTime: 1}
	c := offline(life)
	if err := c.applyAt(c.epoch, life, nil, 90); err != nil {
		t.Fatal(err)
	}
	tags := map[string]string{TagIdentity: digest(5), TagGeneration: "1", TagReservation: "r", TagState: "s"}
	if ok, err := c.AdmitCreated(life, Session{ID: "$5", Name: "skc-a", Tags: tags, PaneID: "%9", PanePID: 707}, 100, 106); !ok || err != nil {
		t.Fatalf("AdmitCreated: %v %v", ok, err)
	}
	early := entryFor(5, "skc-standby-0123456789abcdef", "")            // read at 103: untagged, the standby's name,
	early.s.PaneID, early.s.PanePID, early.s.PaneDead = "%9", 653, true // the pane before its respawn
	if err := c.applyAt(c.epoch, life, []*entry{early}, 103); err != nil {
		t.Fatal(err)
	}
	if got, ok := c.ByID("$5"); !ok || !got.Managed || got.Identity() != digest(5) || got.Name != "skc-a" || got.PanePID != 707 || got.PaneDead {
		t.Fatalf("after a read from before the tags: %+v %v", got, ok)
	}
	if len(c.ByIdentity(digest(5))) != 1 {
		t.Fatal("not found by its identity")
	}
	late := entryFor(5, "skc-b", "") // read at 110: the tags removed by hand since
	if err := c.applyAt(c.epoch, life, []*entry{late}, 110); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.ByID("$5"); got.Managed || got.Name != "skc-b" {
		t.Fatalf("a read after the tags did not win: %+v", got)
	}
}

// A restart respawns a kept session's dead pane and admits the session again:
// the census, still holding the previous generation's dead pane, takes the
// creator's new pane with its tags (a read before them could not know it).
func TestAdmitCreatedTakesTheRespawnedPane(t *testing.T) {
	life := tmuxctl.ServerLife{Socket: "s", PID: 10, StartTime: 1}
	c := offline(life)
	kept := entryFor(5, "skc-a", digest(5))
	kept.s.PaneID, kept.s.PanePID, kept.s.PaneDead = "%9", 653, true
	if err := c.applyAt(c.epoch, life, []*entry{kept}, 120); err != nil {
		t.Fatal(err)
	}
	tags := map[string]string{TagIdentity: digest(5), TagGeneration: "2", TagReservation: "r", TagState: "s"}
	if ok, err := c.AdmitCreated(life, Session{ID: "$5", Name: "skc-a", Tags: tags, PaneID: "%9", PanePID: 707}, 130, 136); !ok || err != nil {
		t.Fatalf("AdmitCreated: %v %v", ok, err)
	}
	if got, _ := c.ByID("$5"); got.PanePID != 707 || got.PaneDead || got.Tags[TagGeneration] != "2" {
		t.Fatalf("after the respawn's admission: %+v", got)
	}
}

// A read tmux ran after the creator's last tag command is tmux's own word:
// the creator's admission, arriving after it, does not put back the name the
// creator gave (a rename by hand right after the create, which the census
// read by id and whose later notification it then did not read again).
func TestAdmitCreatedKeepsALaterRead(t *testing.T) {
	life := tmuxctl.ServerLife{Socket: "s", PID: 10, StartTime: 1}
	c := offline(life)
	tags := map[string]string{TagIdentity: digest(6), TagGeneration: "1", TagReservation: "r", TagState: "s"}
	later := entryFor(6, "by-hand", digest(6))
	later.s.Tags = tags
	later.exact = tagsOf(tags)
	if err := c.applyAt(c.epoch, life, []*entry{later}, 140); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.AdmitCreated(life, Session{ID: "$6", Name: "skc-attempt", Tags: tags}, 130, 136); !ok || err != nil {
		t.Fatalf("AdmitCreated: %v %v", ok, err)
	}
	if got, ok := c.ByID("$6"); !ok || got.Name != "by-hand" || !got.Managed {
		t.Fatalf("after the creator's late admission: %+v %v", got, ok)
	}
}
