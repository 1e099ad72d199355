package census

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Pane deaths under remain-on-exit follow tmux within about a subscription
// tick, with their exit status and signal, for sessions created one fork at
// a time by a separate client (each one dying at once, often within the
// tick of its creation): the case BenchmarkBurst100/forks found stuck at
// pane_dead false for 27–47 s. Waits have the generous limit, never a
// duration bound; the old behaviour missed them until the 30 s reconcile,
// and 40 of them made at least one miss all but certain.
func TestPaneDeathsFollowTmux(t *testing.T) {
	cfg := testConfig()
	cfg.reconcile = time.Hour // only the subscription path may tell
	r := newRig(t, &cfg)
	r.tmux("set-option", "-g", "remain-on-exit", "on")
	want := map[string]string{} // name → "status/signal"
	for i := 0; i < 40; i++ {
		name := "d" + strconv.Itoa(i)
		switch i % 4 {
		case 0, 1:
			r.tmux("new-session", "-d", "-s", name, "true")
			want[name] = "0/"
		case 2:
			r.tmux("new-session", "-d", "-s", name, "exit 3")
			want[name] = "3/"
		default:
			r.tmux("new-session", "-d", "-s", name, "kill -9 $$")
			want[name] = "/9"
		}
	}
	eventually(t, "every pane dead with its status", func() bool {
		n := 0
		for _, s := range r.c.Snapshot().Sessions {
			st := ""
			if s.PaneDeadStatus != nil {
				st = strconv.Itoa(*s.PaneDeadStatus)
			}
			if w, ok := want[s.Name]; ok && s.PaneDead && st+"/"+s.PaneDeadSignal == w {
				n++
			}
		}
		return n == len(want)
	})
}

// Activity follows the pane's output (tmux's window_activity), and stays
// zero for a pane that has written nothing since its session was created.
func TestActivityFollowsOutput(t *testing.T) {
	r := newRig(t, nil)
	quiet := r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", "quiet", "cat")
	busy := r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", "busy", "cat")
	eventually(t, "both listed", func() bool {
		_, a := r.c.ByID(quiet)
		_, b := r.c.ByID(busy)
		return a && b
	})
	for round := 0; round < 2; round++ {
		// Output in a later second than the last: the activity must move.
		before, _ := r.c.ByID(busy)
		eventually(t, "a new second", func() bool {
			return time.Now().Unix() > max(before.Activity.Unix(), before.Created.Unix())
		})
		r.tmux("send-keys", "-t", busy, "-l", "hello"+strconv.Itoa(round))
		var tmuxAct int64
		eventually(t, "tmux's activity moved", func() bool {
			tmuxAct, _ = strconv.ParseInt(r.tmux("display-message", "-p", "-t", busy, "#{window_activity}"), 10, 64)
			return tmuxAct > max(before.Activity.Unix(), before.Created.Unix())
		})
		eventually(t, "census activity equals tmux's", func() bool {
			s, _ := r.c.ByID(busy)
			return s.Activity.Unix() >= tmuxAct
		})
	}
	if s, _ := r.c.ByID(quiet); !s.Activity.IsZero() {
		t.Fatalf("a pane without output has activity %v", s.Activity)
	}
}

// A pane that writes at once and then waits has activity: tmux's
// window_activity may still be the creation second (it usually is), which
// wroteFlag tells apart from no output; a quiet pane beside it has none.
func TestActivityOfABannerThenQuiet(t *testing.T) {
	r := newRig(t, nil)
	quiet := r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", "quiet", "cat")
	banner := r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", "banner", "printf banner; exec cat")
	eventually(t, "the banner's activity", func() bool {
		s, ok := r.c.ByID(banner)
		return ok && !s.Activity.IsZero()
	})
	tmuxAct, _ := strconv.ParseInt(r.tmux("display-message", "-p", "-t", banner, "#{window_activity}"), 10, 64)
	if s, _ := r.c.ByID(banner); s.Activity.Unix() != tmuxAct {
		t.Fatalf("activity %v, tmux's window_activity %d", s.Activity, tmuxAct)
	}
	if s, _ := r.c.ByID(quiet); !s.Activity.IsZero() {
		t.Fatalf("a pane without output has activity %v", s.Activity)
	}
}

// The pane-died hook alone tells a death: with the census subscription
// removed and the reconcile an hour away, only the hook's rename of the
// control window (panehook.go) can bring the read by id.
//
// For a session of ours (generation tag) the hook runs only when it is
// marked TagUnwatched (hookCondition), as this one is: its pane process has
// no pidfd watch to tell the death.
func TestPaneDiedHookTells(t *testing.T) {
	cfg := testConfig()
	cfg.reconcile = time.Hour
	r := newRig(t, &cfg)
	r.tmux("set-option", "-g", "remain-on-exit", "on")
	id := r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", "h", "cat")
	r.tmux("set-option", "-t", id, TagGeneration, "1")
	r.tmux("set-option", "-t", id, TagUnwatched, "1")
	eventually(t, "listed", func() bool { _, ok := r.c.ByID(id); return ok })
	info, _ := r.c.Info()
	if _, err := r.cl.CommandIn(context.Background(), info.ServerLife, "refresh-client", "-B", subName); err != nil {
		t.Fatal(err)
	}
	sub := r.c.Subscribe(16)
	defer sub.Close()
	r.tmux("send-keys", "-t", id, "C-d") // cat exits: the pane dies, the session stays
	// tmux may hold the status (and the hook) until another of its children
	// exits (reapPoke): one such child, as the census's poke would be.
	eventually(t, "pane dead in tmux", func() bool {
		return r.tmux("display-message", "-p", "-t", id, "#{pane_dead}") == "1"
	})
	r.tmux("run-shell", "-b", "true")
	for {
		ch := next(t, sub)
		if ch.Session.ID != id || ch.Kind != Changed || !ch.Session.PaneDead {
			continue
		}
		// The death comes with its exit: status 0 as cat ends on EOF — or,
		// rarely (seen on 3.3a and 3.7 under load), the hangup tmux sends
		// when it sees the pty close before it has collected cat's status. A read that ran
		// between the pty's close (pane_dead) and tmux's waitpid shows the
		// death without a status yet; the hook, which tmux runs once it has
		// the status, brings it in a later change.
		st, sig := ch.Session.PaneDeadStatus, ch.Session.PaneDeadSignal
		if st == nil && sig == "" {
			continue
		}
		if (st == nil || *st != 0) && !(st == nil && sig == "1") {
			t.Fatalf("want exit status 0 with the death, got %+v", ch.Session)
		}
		return
	}
}

// TestPaneDiedHookCondition: tmux itself decides, from the dead pane's
// session, whether the hook forks its shell: for a pane not ours (no
// generation tag) and for one of ours marked unwatched, not for one of ours
// whose pane process lifecycle watches. Evaluated by tmux with if-shell -F on
// each pane, exactly as the hook evaluates it.
func TestPaneDiedHookCondition(t *testing.T) {
	cfg := testConfig()
	r := newRig(t, &cfg)
	mk := func(name string, opts ...string) string {
		id := r.tmux("new-session", "-d", "-P", "-F", "#{session_id}", "-s", name, "cat")
		for i := 0; i+1 < len(opts); i += 2 {
			r.tmux("set-option", "-t", id, opts[i], opts[i+1])
		}
		return id
	}
	for _, c := range []struct {
		id   string
		want string
	}{
		{mk("plain"), "yes"},
		{mk("watched", TagGeneration, "3"), "no"},
		{mk("unwatched", TagGeneration, "3", TagUnwatched, "1"), "yes"},
	} {
		r.tmux("if-shell", "-F", "-t", c.id, hookCondition,
			"set-option -g @hookcond yes", "set-option -g @hookcond no")
		if got := r.tmux("show-options", "-gv", "@hookcond"); got != c.want {
			t.Errorf("session %s: hook runs %q, want %q", c.id, got, c.want)
		}
	}
	if !strings.HasPrefix(paneDiedCommand("$0"), "if-shell -F '"+hookCondition+"' { run-shell -b ") {
		t.Fatalf("hook command %q", paneDiedCommand("$0"))
	}
}
