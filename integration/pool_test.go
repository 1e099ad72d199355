package integration

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// standbys are the warm pool's standby sessions, as tmux lists them.
func (h *Home) standbys(t testing.TB) []tmuxSession {
	var out []tmuxSession
	for _, s := range h.AgentSessions(t) {
		if strings.HasPrefix(s.Name, "skc-standby-") {
			out = append(out, s)
		}
	}
	return out
}

// waitStandbys waits until the pool holds n standbys.
func (h *Home) waitStandbys(t *testing.T, n int) []tmuxSession {
	t.Helper()
	var got []tmuxSession
	WaitFor(t, waitDeadline, fmt.Sprintf("%d standbys", n), func() error {
		if got = h.standbys(t); len(got) != n {
			return fmt.Errorf("%d standbys", len(got))
		}
		return nil
	})
	return got
}

// createMany runs one `create --json` process per spec, all at once, and
// requires each to publish.
func createMany(t *testing.T, h *Home, specs []Spec) []Session {
	t.Helper()
	out := make([]Session, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r Result
			var a Answer
			var err error
			for try := 0; try < 10; try++ {
				a = Answer{}
				r, err = h.runCLI(t, CLIOpts{}, s.Args()...)
				if err == nil {
					err = decodeOne(r.Stdout, &a)
				}
				if err != nil || a.Error == nil || !retryableCode(a.Error.Code) {
					break
				}
				// The fence busy beyond its bound on a loaded machine (the
				// same without a pool): a client retries a 503.
			}
			if err == nil && (r.Code != 0 || a.Status != "published" || a.Session == nil) {
				err = fmt.Errorf("not published: %s", r)
			}
			if err == nil {
				out[i] = *a.Session
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %s: %v", specs[i].SessionID, err)
		}
	}
	h.NoteSession(t)
	return out
}

// retryableCode: the refusals a client retries (503s of a busy fence or daemon).
func retryableCode(c string) bool {
	return c == "fence_unavailable" || c == "busy" || c == "identity_fence_contended"
}

// checkPoolWorld: exactly the given sessions are the server's agent sessions
// (one per identity), no standby carries an identity, and `ls` shows no
// standby.
func checkPoolWorld(t *testing.T, h *Home, want []Session) {
	t.Helper()
	byName := map[string]tmuxSession{}
	for _, s := range h.AgentSessions(t) {
		if strings.HasPrefix(s.Name, "skc-standby-") {
			if s.Identity != "" || s.Reservation != "" || s.Generation != "" {
				t.Fatalf("standby %+v carries tags", s)
			}
			continue
		}
		byName[s.Name] = s
	}
	if len(byName) != len(want) {
		t.Fatalf("%d sessions besides the standbys, want %d: %+v", len(byName), len(want), byName)
	}
	idents := map[string]bool{}
	for _, w := range want {
		s, ok := byName[w.Name]
		if !ok || s.ID != w.ID || s.Identity == "" || idents[s.Identity] {
			t.Fatalf("session %+v: tmux has %+v", w, s)
		}
		idents[s.Identity] = true
	}
	l := h.List(t)
	for _, s := range l.Sessions {
		if strings.HasPrefix(s.Name, "skc-standby-") {
			t.Fatalf("ls shows a standby: %+v", s)
		}
	}
	if len(l.Sessions) != len(want) {
		t.Fatalf("ls shows %d sessions, want %d", len(l.Sessions), len(want))
	}
}

// TestPoolBurstAndSIGKILL: `serve --pool 4` serves 32 concurrent creates of
// distinct identities, one session each, no standby ever visible as one; the
// daemon is SIGKILLed with its pool full, and the next one removes the four
// standbys it left (their processes gone), never hands one out, and serves 8
// more creates.
func TestPoolBurstAndSIGKILL(t *testing.T) {
	h := NewHome(t)
	d := h.Start(t, DaemonOpts{Args: []string{"--pool", "4"}})
	h.waitStandbys(t, 4)
	specs := make([]Spec, 32)
	for i := range specs {
		specs[i] = NewSpec(t, fmt.Sprintf("pool-%02d", i))
	}
	got := createMany(t, h, specs)
	checkPoolWorld(t, h, got)
	old := h.waitStandbys(t, 4)
	d.Kill(t)
	h.Start(t, DaemonOpts{Args: []string{"--pool", "4"}})
	WaitFor(t, waitDeadline, "the dead daemon's standbys gone", func() error {
		for _, o := range old {
			for _, s := range h.AgentSessions(t) {
				if s.ID == o.ID {
					return fmt.Errorf("standby %+v still there", o)
				}
			}
			if alive(o.PanePID) {
				return fmt.Errorf("standby pid %d alive", o.PanePID)
			}
		}
		return nil
	})
	h.waitStandbys(t, 4)
	more := make([]Spec, 8)
	for i := range more {
		more[i] = NewSpec(t, fmt.Sprintf("after-%d", i))
	}
	after := createMany(t, h, more)
	for _, s := range after {
		for _, o := range old {
			if s.PanePID == o.PanePID {
				t.Fatalf("session %+v runs in the dead daemon's standby %+v", s, o)
			}
		}
	}
	checkPoolWorld(t, h, append(got, after...))
}
