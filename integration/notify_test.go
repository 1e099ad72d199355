package integration

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// notifySocket is a unixgram socket standing in for systemd's $NOTIFY_SOCKET:
// every datagram received is passed on, whole, on msgs.
type notifySocket struct {
	Path string
	msgs chan string
	conn *net.UnixConn
	done chan struct{}
}

func listenNotify(t *testing.T) *notifySocket {
	t.Helper()
	dir, err := os.MkdirTemp("", "skcn")
	if err != nil {
		t.Fatal(err)
	}
	n := &notifySocket{Path: filepath.Join(dir, "notify"), msgs: make(chan string, 64), done: make(chan struct{})}
	n.conn, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: n.Path, Net: "unixgram"})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	go func() {
		defer close(n.done)
		buf := make([]byte, 64<<10)
		for {
			k, _, err := n.conn.ReadFromUnix(buf)
			if err != nil {
				return
			}
			n.msgs <- string(buf[:k])
		}
	}()
	t.Cleanup(func() {
		n.conn.Close()
		<-n.done
		os.RemoveAll(dir)
	})
	return n
}

// await returns the first datagram carrying the assignment want (e.g.
// "READY=1"), with every datagram received before it. It gives up early when
// the daemon exits, unless watchExit is false (a stopped daemon's last datagram may
// still be on its way to the reader).
func (n *notifySocket) await(t *testing.T, d *Daemon, want string, watchExit bool) (string, []string) {
	t.Helper()
	var before []string
	deadline := time.After(startDeadline)
	var done <-chan struct{}
	if watchExit {
		done = d.done
	}
	for {
		select {
		case m := <-n.msgs:
			for _, line := range strings.Split(m, "\n") {
				if line == want {
					return m, before
				}
			}
			before = append(before, m)
		case <-done:
			t.Fatalf("daemon exited before sending %s (got %q): %v\n%s", want, before, d.state, clip(d.Log()))
		case <-deadline:
			t.Fatalf("no %s on $NOTIFY_SOCKET within %v (got %q)\n%s", want, startDeadline, before, clip(d.Log()))
		}
	}
}

// TestNotify: under Type=notify the daemon says READY=1 only once the API
// answers and the census synced, says STOPPING=1 on SIGTERM and exits 0, and
// the tmux server with its sessions outlives it. Neither the server nor an agent
// inherits NOTIFY_SOCKET.
func TestNotify(t *testing.T) {
	t.Parallel()
	ns := listenNotify(t)
	h := NewHome(t)
	// Adopt: a session from an earlier daemon life, so the first sync has work.
	first := h.Start(t, DaemonOpts{})
	old := first.MustCreate(t, NewSpec(t, "notify-old"), "published")
	first.Stop(t)

	d := h.Start(t, DaemonOpts{NoWait: true, Env: []string{"NOTIFY_SOCKET=" + ns.Path}})
	msg, before := ns.await(t, d, "READY=1", true)
	// At the moment READY=1 arrives the daemon must already serve: no retry here.
	status, body, err := tryGet(h, "/v1/ping")
	if err != nil || status != 200 || !strings.Contains(string(body), `"ok":true`) {
		t.Errorf("READY=1 (%q) arrived but GET /v1/ping: %d %s %v", msg, status, body, err)
	}
	l := h.List(t)
	if !l.Census.Synced || !hasSession(l, old.Name) {
		t.Errorf("READY=1 arrived but ls --json: synced %v, sessions %+v; want synced with %s",
			l.Census.Synced, l.Sessions, old.Name)
	}
	for _, m := range before {
		if strings.Contains(m, "STOPPING=1") {
			t.Errorf("STOPPING=1 before READY=1: %q", before)
		}
	}

	s := d.MustCreate(t, NewSpec(t, "notify-new"), "published")
	agent := waitAgent(t, s.PanePID, "sleep")
	serverPID := l.Census.ServerPID
	for _, pid := range []int{serverPID, s.PanePID, agent} {
		if envHas(pid, "NOTIFY_SOCKET="+ns.Path) {
			t.Errorf("pid %d (tmux server, pane or agent) inherited NOTIFY_SOCKET", pid)
		}
	}

	d.Stop(t) // SIGTERM, exit 0
	ns.await(t, d, "STOPPING=1", false)
	if !alive(serverPID) {
		t.Fatalf("the tmux server (pid %d) did not outlive the daemon", serverPID)
	}
	names := map[string]bool{}
	for _, ts := range h.AgentSessions(t) {
		names[ts.Name] = true
	}
	if !names[old.Name] || !names[s.Name] || !alive(agent) {
		t.Errorf("after the stop tmux has %v, agent %d alive %v; want %s and %s running",
			names, agent, alive(agent), old.Name, s.Name)
	}
	// The home's cleanup kills the server by its pid and checks nothing is left.
}

func hasSession(l List, name string) bool {
	for _, s := range l.Sessions {
		if s.Name == name {
			return true
		}
	}
	return false
}
