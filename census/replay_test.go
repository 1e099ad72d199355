package census

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// replayed answers one command from a replayed stream: the next reply block,
// or the connection's end once the stream's %exit was read.
func replayed(ctx context.Context, script chan tmuxctl.Record, exited chan struct{}, args []string) (tmuxctl.Reply, error) {
	select {
	case rec := <-script:
		if rec.Error {
			return tmuxctl.Reply{}, &tmuxctl.CommandError{Command: args[0], Lines: rec.Reply.Lines}
		}
		return rec.Reply, nil
	case <-exited:
		return tmuxctl.Reply{}, &tmuxctl.ExitError{}
	case <-ctx.Done():
		return tmuxctl.Reply{}, ctx.Err()
	}
}

// replay plays a recorded control-mode stream (testdata/NAME, the bytes tmux
// wrote, in the style of docs/tmux-facts.md's corpus) into a census running on f, through tmuxctl's
// parser. Notifications become events in wire order; each reply block
// answers the next command the census sends, and the census has applied
// (or refused) what that command was part of before the stream goes on, so
// the race the stream records is played the same way every time; %exit
// ends the connection (Disconnected with the server's exit).
func replay(t *testing.T, f *fakeTmux, c *Census, name string, info tmuxctl.ServerInfo) {
	t.Helper()
	raw, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var recs []tmuxctl.Record
	p := tmuxctl.NewParser(func(r tmuxctl.Record) { recs = append(recs, r) })
	if _, err := p.Write(raw); err != nil {
		t.Fatal(err)
	}
	p.Close()
	script, exited := make(chan tmuxctl.Record), make(chan struct{})
	f.mu.Lock()
	f.script, f.exited = script, exited
	f.mu.Unlock()
	for i, r := range recs {
		switch {
		case r.Kind == tmuxctl.RecordReply:
			script <- r
			if i+1 < len(recs) && recs[i+1].Kind == tmuxctl.RecordReply {
				continue // a pipelined group: its commands are all in flight
			}
			// The list that took it holds the sync lock until it applied
			// its answer (or gave up on it).
			c.syncMu.Lock()
			c.syncMu.Unlock() //nolint:staticcheck // an empty critical section: waiting is the point
		case r.Kind == tmuxctl.RecordNotification && r.Name == tmuxctl.NoteExit:
			close(exited)
			f.events <- tmuxctl.Event{Kind: tmuxctl.Disconnected, Info: info, Err: &tmuxctl.ExitError{Reason: r.Text}}
		case r.Kind == tmuxctl.RecordNotification:
			f.events <- tmuxctl.Event{Kind: tmuxctl.Notify, Note: tmuxctl.Notification{Name: "%" + r.Name, Text: r.Text}}
			eventually(t, "notification handled", func() bool { return len(f.events) == 0 })
		default:
			t.Fatalf("%s: record %d is not a reply or notification: %+v", name, i, r)
		}
	}
}

// deadPID returns the pid of a process that has exited and been reaped: the
// server of a replayed stream that ends with the server's death.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// When the server is killed, tmux can answer a list already sent with an
// empty body just before %exit (tmux 3.3a: 8 kills in 60). Such a list does
// not show the control session, so it is no picture of a live server: the
// sessions end with the server (server_exited), not one by one as missing
// (gone). Replayed for the id-only list (a %sessions-changed) and for the
// full list (a window added), deterministically.
func TestEmptyListBeforeExit(t *testing.T) {
	for _, name := range []string{"exit-race-idlist.out", "exit-race-full.out"} {
		t.Run(name, func(t *testing.T) {
			f := newFake()
			f.lines = []string{fakeLine, fakeLine2}
			cfg := testConfig()
			info := tmuxctl.ServerInfo{ServerLife: tmuxctl.ServerLife{PID: deadPID(t), StartTime: 1}, ControlSessionID: "$0"}
			c := startFakeInfo(t, f, cfg, info, nil)
			sub := c.Subscribe(10)
			defer sub.Close()
			replay(t, f, c, name, info)
			for _, id := range []string{"$1", "$2"} {
				ch := next(t, sub)
				if ch.Kind != Removed || ch.Session.ID != id || ch.Reason != ReasonServerExited {
					t.Fatalf("want %s removed with %s, got %s %s %q", id, ReasonServerExited, ch.Kind, ch.Session.ID, ch.Reason)
				}
			}
		})
	}
}
