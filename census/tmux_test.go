package census

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"

	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

// A separate tmux client creates, tags, renames and kills a session; the
// census and its change feed follow, and the control session never shows.
func TestReflectsHumanChanges(t *testing.T) {
	r := newRig(t, nil)
	sub := r.c.Subscribe(64)
	defer sub.Close()
	if snap := r.c.Snapshot(); !snap.Synced || len(snap.Sessions) != 0 {
		t.Fatalf("fresh server: want synced and empty (control session hidden), got %+v", snap)
	}

	r.tmux("new-session", "-d", "-s", "h1", "cat")
	ch := next(t, sub)
	if ch.Kind != Added || ch.Session.Name != "h1" || ch.Session.Managed || ch.Session.PanePID == 0 {
		t.Fatalf("want Added h1 unmanaged with a pane pid, got %+v", ch)
	}
	id := ch.Session.ID

	d := digest(1)
	r.tmux("set-option", "-t", id, TagIdentity, d)
	r.tmux("set-option", "-t", id, TagGeneration, "3")
	eventually(t, "tags set by hand reach the census", func() bool {
		s, ok := r.c.ByID(id)
		return ok && s.Managed && s.Tags[TagIdentity] == d && s.Tags[TagGeneration] == "3"
	})
	if got := r.c.ByIdentity(d); len(got) != 1 || got[0].ID != id {
		t.Fatalf("ByIdentity: %+v", got)
	}

	r.tmux("rename-session", "-t", id, "h2")
	eventually(t, "rename", func() bool {
		s, ok := r.c.ByName("h2")
		_, old := r.c.ByName("h1")
		return ok && s.ID == id && !old
	})

	r.tmux("kill-session", "-t", id)
	eventually(t, "kill", func() bool { _, ok := r.c.ByID(id); return !ok })
	var last Change
	for last.Kind != Removed {
		last = next(t, sub)
	}
	if last.Reason != ReasonGone || last.Session.ID != id || last.Session.Tags[TagIdentity] != d {
		t.Fatalf("Removed must carry the last known session with its tags: %+v", last)
	}
	if got := r.c.ByIdentity(d); len(got) != 0 {
		t.Fatalf("identity index kept a killed session: %+v", got)
	}
}

// A SIGKILLed server turns the census unsynced with Removed for every
// session (server_exited); the next server is a new life, synced afresh.
func TestServerKilledAndNewLife(t *testing.T) {
	r := newRig(t, nil)
	for i := 0; i < 3; i++ {
		r.tmux("new-session", "-d", "-s", "k"+strconv.Itoa(i), "cat")
	}
	r.tmux("set-option", "-t", "=k0:", TagIdentity, digest(7))
	eventually(t, "three sessions, one tagged", func() bool {
		return len(r.c.Snapshot().Sessions) == 3 && len(r.c.ByIdentity(digest(7))) == 1
	})
	old, _ := r.c.Info()
	sub := r.c.Subscribe(64)
	defer sub.Close()

	if err := os.WriteFile(r.gate, nil, 0o600); err != nil { // hold the reconnect off
		t.Fatal(err)
	}
	if err := syscall.Kill(old.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	removed := map[string]Change{}
	for len(removed) < 3 {
		ch := next(t, sub)
		if ch.Kind != Removed {
			t.Fatalf("want only Removed after the server died, got %+v", ch)
		}
		removed[ch.Session.Name] = ch
	}
	for name, ch := range removed {
		if ch.Reason != ReasonServerExited || ch.Life != old.ServerLife {
			t.Fatalf("%s: want server_exited in the old life, got %+v", name, ch)
		}
	}
	if removed["k0"].Session.Tags[TagIdentity] != digest(7) {
		t.Fatalf("Removed lost the tags: %+v", removed["k0"])
	}
	if r.c.Synced() {
		t.Fatal("census synced while disconnected")
	}
	if a, _, err := r.c.Inspect(context.Background(), Evidence{IdentityDigest: digest(7), Generation: 1}); a != Unknown || err == nil {
		t.Fatalf("Inspect while unsynced: want Unknown with a reason, got %v %v", a, err)
	}

	os.Remove(r.gate)
	r.waitSynced()
	now, _ := r.c.Info()
	if now.ServerLife == old.ServerLife || now.PID == 0 {
		t.Fatalf("want a new server life, got %+v (old %+v)", now, old)
	}
	if snap := r.c.Snapshot(); len(snap.Sessions) != 0 {
		t.Fatalf("new life: want no sessions, got %+v", snap.Sessions)
	}
	// The old life's end is also told as a Resync mark (sessions it never
	// listed ended with it), once, at the new life's first sync.
	if ch := next(t, sub); ch.Kind != Resync || ch.Life != now.ServerLife {
		t.Fatalf("want one Resync mark in the new life, got %+v", ch)
	}
	r.tmux("new-session", "-d", "-s", "after", "cat")
	ch := next(t, sub)
	if ch.Kind != Added || ch.Session.Name != "after" || ch.Life != now.ServerLife {
		t.Fatalf("want Added in the new life, got %+v", ch)
	}
}

// Tags read by the census are the session's own: a window-level option and
// a global `set -g` / `set -gw` one do not leak into (or hide) them.
func TestTagsCannotBeShadowed(t *testing.T) {
	r := newRig(t, nil)
	own := digest(11)
	r.tmux("new-session", "-d", "-s", "mine", "cat")
	r.tmux("set-option", "-t", "=mine:", TagIdentity, own)
	r.tmux("new-session", "-d", "-s", "plain", "cat")
	r.tmux("set-option", "-g", TagIdentity, digest(99))                 // inherited by sessions without their own
	r.tmux("set-option", "-w", "-t", "=mine:", TagIdentity, digest(98)) // window level shadows the session's
	r.tmux("set-option", "-w", "-t", "=plain:", TagGeneration, "5")
	if err := r.c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	check := func(stage string) {
		t.Helper()
		m, ok1 := r.c.ByName("mine")
		p, ok2 := r.c.ByName("plain")
		if !ok1 || !ok2 || m.Tags[TagIdentity] != own || !m.Managed || p.Managed || len(p.Tags) != 0 {
			t.Fatalf("%s: shadowed tags leaked: mine=%+v plain=%+v", stage, m, p)
		}
		if got := r.c.ByIdentity(digest(99)); len(got) != 0 {
			t.Fatalf("%s: global value indexed: %+v", stage, got)
		}
	}
	check("window + set -g")
	// A global-window option can shadow every session: the census then reads
	// every session exactly, and still gets the session's own values.
	r.tmux("set-option", "-gw", TagIdentity, "")
	if err := r.c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	check("set -gw empty")
	// A hand change of the session's own value under the global shadow is seen.
	r.tmux("set-option", "-t", "=mine:", TagGeneration, "4")
	if err := r.c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if m, _ := r.c.ByName("mine"); m.Tags[TagGeneration] != "4" {
		t.Fatalf("own generation under a shadow: %+v", m)
	}
}

// Every Inspect branch, against a fresh read of live tmux.
func TestInspect(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	d := digest(21)
	r.tmux("new-session", "-d", "-s", "agent-3", "read x; exit 7")
	r.tmux("set-option", "-t", "=agent-3:", TagIdentity, d)
	r.tmux("set-option", "-t", "=agent-3:", TagGeneration, "3")
	r.tmux("set-option", "-t", "=agent-3:", "remain-on-exit", "on")
	r.tmux("new-session", "-d", "-s", "agent-3-old", "cat") // a prefix-sharing name must not match
	id := r.tmux("display-message", "-p", "-t", "=agent-3:", "#{session_id}")
	if err := r.c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	life := func() tmuxctl.ServerLife { i, _ := r.c.Info(); return i.ServerLife }
	ev := Evidence{IdentityDigest: d, AttemptName: "agent-3", TmuxID: id, Life: life(), Generation: 3}
	expect := func(what string, ev Evidence, want Authority) *Session {
		t.Helper()
		a, s, err := r.c.Inspect(ctx, ev)
		if a != want {
			t.Fatalf("%s: got %v (%v), want %v", what, a, err, want)
		}
		if (a == Authoritative || a == Orphan) && s == nil {
			t.Fatalf("%s: no session returned", what)
		}
		return s
	}
	if s := expect("published", ev, Authoritative); s.ID != id || s.PaneDead {
		t.Fatalf("authoritative session: %+v", s)
	}
	// A window-level option cannot fake the identity away.
	r.tmux("set-option", "-w", "-t", "=agent-3:", TagIdentity, digest(22))
	expect("window-level shadow", ev, Authoritative)

	// The pane dies (remain-on-exit): the session lives on, authoritative.
	r.tmux("send-keys", "-t", "=agent-3:", "x", "Enter")
	deadline := time.Now().Add(waitLimit)
	for {
		s, ok := r.c.ByID(id)
		// Only pane_dead is awaited: tmux 3.3a (with utempter) can miss the
		// SIGCHLD of a pane that exits while it runs the utempter helper, and
		// then pane_dead_status stays empty until another child of the server
		// exits (seen here: the pane process left a zombie).
		if ok && s.PaneDead {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pane death never reached the census: %+v; tmux: %s; relists %d", s,
				r.tmux("list-panes", "-a", "-F", "#{session_id} #{pane_dead} #{pane_dead_status} #{pane_dead_signal}"), r.c.Relists())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := expect("dead pane", ev, Authoritative); !s.PaneDead || (s.PaneDeadStatus != nil && *s.PaneDeadStatus != 7) {
		t.Fatalf("dead pane session: %+v", s)
	}

	// A tag changed by hand after the last sync: Inspect does not trust the cache.
	r.tmux("set-option", "-t", id, TagGeneration, "4")
	expect("generation changed by hand", ev, Orphan)
	r.tmux("set-option", "-t", id, TagGeneration, "3")

	expect("attempt name only", Evidence{AttemptName: "agent-3-old", Generation: 3}, Orphan)
	expect("identity, no published generation", Evidence{IdentityDigest: d}, Orphan)
	expect("absent", Evidence{IdentityDigest: digest(23), AttemptName: "agent-3-", Generation: 1}, Absent)
	expect("other life", Evidence{IdentityDigest: d, TmuxID: id, Life: tmuxctl.ServerLife{PID: 1}, Generation: 3}, Unknown)
	expect("name of another identity's session",
		Evidence{IdentityDigest: digest(24), AttemptName: "agent-3", Generation: 1}, Unknown)
	expect("no evidence", Evidence{}, Unknown)

	r.tmux("set-option", "-t", "=agent-3-old:", TagIdentity, d)
	a, _, err := r.c.Inspect(ctx, ev)
	var ie *InspectError
	if a != Unknown || !asInspect(err, &ie) || ie.Code() != UnknownContradiction {
		t.Fatalf("two sessions with the identity: got %v %v", a, err)
	}
}

func asInspect(err error, target **InspectError) bool {
	e, ok := err.(*InspectError)
	if ok {
		*target = e
	}
	return ok
}

// A burst of 100 creates causes far fewer than 100 re-lists. The burst is one
// tmux command line of 100 new-sessions, so its notifications are a burst on
// any machine: 100 forked `tmux` processes are spaced by the machine's load,
// and on a busy one each lands after the quiet period — not a burst at all,
// and rightly re-listed each.
func TestCoalescesBursts(t *testing.T) {
	cfg := defaultConfig()
	r := newRig(t, &cfg)
	r.tmux("set-option", "-g", "remain-on-exit", "on")
	before := r.c.Relists()
	createBurst(r, "line", "b")
	eventually(t, "100 sessions, every pane dead", func() bool {
		snap := r.c.Snapshot()
		for _, s := range snap.Sessions {
			if !s.PaneDead {
				return false
			}
		}
		return len(snap.Sessions) == 100
	})
	n := r.c.Relists() - before
	t.Logf("re-lists for a 100-session create burst: %d", n)
	if n >= 50 {
		t.Fatalf("burst not coalesced: %d re-lists for 100 creates", n)
	}
}

// Killing the control session detaches the control client but leaves the
// server's life: the census resyncs without dropping (or re-adding) anything.
func TestControlSessionKilledSameLife(t *testing.T) {
	r := newRig(t, nil)
	r.tmux("new-session", "-d", "-s", "stays", "cat")
	eventually(t, "session seen", func() bool { _, ok := r.c.ByName("stays"); return ok })
	before := r.c.Snapshot()
	info, _ := r.c.Info()
	r.tmux("kill-session", "-t", info.ControlSessionID)
	eventually(t, "reconnected and resynced in the same life", func() bool {
		r.c.mu.RLock()
		epoch := r.c.epoch
		r.c.mu.RUnlock()
		now, _ := r.c.Info()
		return epoch >= 3 && r.c.Synced() && now.ServerLife == info.ServerLife && now.ControlSessionID != info.ControlSessionID
	})
	after := r.c.Snapshot()
	if after.Seq != before.Seq || len(after.Sessions) != 1 || after.Sessions[0].Name != "stays" {
		t.Fatalf("same life must not churn: before %+v after %+v", before, after)
	}
}

// Names tmux escapes or that look like protocol lines stay one record, and
// the census holds the name exactly as tmux reports it. tmux 3.3a stores a
// control byte in a name escaped (`tab\there`); 3.7 refuses such a name.
func TestOddSessionNames(t *testing.T) {
	r := newRig(t, nil)
	for _, name := range []string{"tab\there", "%end 1 2 3", "sp ace;\"q'", "日本", "-dash"} {
		if strings.ContainsRune(name, '\t') && tmuxtest.AtLeast(3, 7) {
			if out, err := tmuxtest.Command("-S", r.sock, "new-session", "-d", "-s", name, "cat").CombinedOutput(); err == nil ||
				!strings.Contains(string(out), "invalid session name") {
				t.Fatalf("tmux %s accepted %q: %v %s", tmuxtest.Version(), name, err, out)
			}
			continue
		}
		id := r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", name, "cat")
		want := r.tmux("display-message", "-p", "-t", id, "#{session_name}")
		eventually(t, "session "+strconv.Quote(name), func() bool {
			s, ok := r.c.ByID(id)
			return ok && s.Name == want
		})
		if s, ok := r.c.ByName(want); !ok || s.ID != id {
			t.Fatalf("ByName(%q): %+v %v", want, s, ok)
		}
	}
}

// A tag holding a newline or a tab (set by hand; ours never do) breaks the
// list line, but the session is neither lost nor misread.
func TestBrokenTagValues(t *testing.T) {
	r := newRig(t, nil)
	id := r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", "odd", "cat")
	r.tmux("set-option", "-t", id, TagIdentity, digest(31))
	eventually(t, "tagged", func() bool { s, ok := r.c.ByID(id); return ok && s.Managed })
	sub := r.c.Subscribe(16)
	defer sub.Close()
	// The first value makes the continuation line a well-formed row for $99
	// whose name is the real session's (the rest of the real line).
	forged := "x\n$99\t1\t0\t%9\t1\t0\t\t\t1\t\t\t\t\t"
	dup := "x\n" + id + "\t1\t0\t%9\t1\t0\t\t\t1\t\t\t\t\t" // the same, claiming the real id
	for _, v := range []string{forged, forged + "\tname", dup, "a\tb"} {
		r.tmux("set-option", "-t", id, TagState, v)
		if err := r.c.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		s, ok := r.c.ByID(id)
		if !ok || s.Name != "odd" || s.Tags[TagIdentity] != digest(31) || s.PaneID == "%9" || s.PanePID == 1 {
			t.Fatalf("state %q: session misread: %+v %v", v, s, ok)
		}
		if len(r.c.Snapshot().Sessions) != 1 {
			t.Fatalf("state %q: phantom sessions: %+v", v, r.c.Snapshot().Sessions)
		}
	}
	for len(sub.C()) > 0 {
		if ch := <-sub.C(); ch.Kind == Removed {
			t.Fatalf("a broken line removed the session: %+v", ch)
		}
	}
}

// TestInspectManyAgreesWithInspect: InspectMany, one fresh read for all of
// them, answers each piece of evidence as Inspect does alone — authoritative,
// orphan, absent, the unknowns of a contradiction, another life and no
// evidence — whatever else it is asked in the same call.
func TestInspectManyAgreesWithInspect(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	d, d2 := digest(31), digest(32)
	for _, s := range []struct{ name, ident, gen string }{
		{"one", d, "1"}, {"two", d2, "5"}, {"two-copy", d2, "5"}, {"bare", "", ""},
	} {
		r.tmux("new-session", "-d", "-s", s.name, "cat")
		if s.ident != "" {
			r.tmux("set-option", "-t", "="+s.name+":", TagIdentity, s.ident)
			r.tmux("set-option", "-t", "="+s.name+":", TagGeneration, s.gen)
		}
	}
	if err := r.c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	info, _ := r.c.Info()
	one := r.tmux("display-message", "-p", "-t", "=one:", "#{session_id}")
	evs := []Evidence{
		{IdentityDigest: d, AttemptName: "one", TmuxID: one, Life: info.ServerLife, Generation: 1},
		{IdentityDigest: d, Generation: 2},
		{IdentityDigest: d2, AttemptName: "two", Generation: 5},
		{AttemptName: "bare", Generation: 1},
		{IdentityDigest: digest(33), AttemptName: "nowhere", Generation: 1},
		{IdentityDigest: d, TmuxID: one, Life: tmuxctl.ServerLife{PID: 1}, Generation: 1},
		{},
	}
	many := r.c.InspectMany(ctx, evs)
	want := []Authority{Authoritative, Orphan, Unknown, Orphan, Absent, Unknown, Unknown}
	for i, ev := range evs {
		a, s, err := r.c.Inspect(ctx, ev)
		m := many[i]
		if m.Authority != a || m.Authority != want[i] || (m.Err == nil) != (err == nil) ||
			(s == nil) != (m.Session == nil) || s != nil && s.ID != m.Session.ID {
			t.Fatalf("evidence %d: many %v %v %v, alone %v %v %v, want %v", i, m.Authority, m.Session, m.Err, a, s, err, want[i])
		}
	}
}
