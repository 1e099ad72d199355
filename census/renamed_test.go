package census

import (
	"testing"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

func (f *fakeTmux) renamed(text string) {
	f.events <- tmuxctl.Event{Kind: tmuxctl.Notify, Note: tmuxctl.Notification{Name: "%session-renamed", Text: text}}
}

// A rename is read by id, never with a full list (at 4,000 sessions one costs
// tmux ~0.65 s, and every create a warm pool serves renames its standby): a
// held session's new name reaches the change feed, a notification naming the
// name the census already holds costs nothing, and a session the census does
// not hold yet is added by the id-only list. A notification without an id
// still takes the full list.
func TestRenameReadByID(t *testing.T) {
	f := newFake()
	f.lines = []string{fakeLine, fakeLine2}
	cfg := testConfig()
	cfg.quiet, cfg.maxDelay = 0, 0 // every trigger is a leading edge
	c := startFake(t, f, cfg)
	sub := c.Subscribe(10)
	defer sub.Close()
	full0, ids0 := f.counts()
	reads0 := f.readCount()

	f.setLines(fakeLine, fakeLine2Renamed)
	f.renamed("$2 renamed")
	if ch := next(t, sub); ch.Kind != Changed || ch.Session.ID != "$2" || ch.Session.Name != "renamed" {
		t.Fatalf("want $2 changed to renamed, got %+v", ch)
	}
	eventually(t, "read done", func() bool { return f.readCount() == reads0+1 })

	// Already so: nothing is read. The next rename (of $1) is handled after
	// it by the same goroutine, so once its read is seen, this one's absence
	// is final.
	f.renamed("$2 renamed")
	f.setLines(fakeLine1Renamed, fakeLine2Renamed)
	f.renamed("$1 first")
	if ch := next(t, sub); ch.Kind != Changed || ch.Session.ID != "$1" || ch.Session.Name != "first" {
		t.Fatalf("want $1 changed to first, got %+v", ch)
	}
	eventually(t, "read done", func() bool { return f.readCount() >= reads0+2 })
	if got := f.readCount() - reads0; got != 2 {
		t.Fatalf("%d reads by id, want 2 (a rename the census holds is not read)", got)
	}

	// Not held yet: the id-only list adds it.
	f.setLines(fakeLine1Renamed, fakeLine2Renamed, fakeLine3)
	f.renamed("$3 three")
	if ch := next(t, sub); ch.Kind != Added || ch.Session.ID != "$3" || ch.Session.Name != "three" {
		t.Fatalf("want $3 added, got %+v", ch)
	}
	if full, ids := f.counts(); full != full0 || ids != ids0+1 {
		t.Fatalf("renames cost %d full and %d id-only lists, want 0 and 1", full-full0, ids-ids0)
	}

	f.notify("%session-renamed") // no id: not the form tmux writes
	eventually(t, "full list", func() bool { full, _ := f.counts(); return full == full0+1 })
}

const fakeLine1Renamed = "$1\t1700000000\t0\t%1\t100\t0\t\t\t1700000000\t\t\t\t\t\t\tfirst"
