package census

import (
	"syscall"
	"testing"
)

// The hardening case seen from the census: the control client is killed
// by pid, or its session killed by a human, round after round. Every round
// the census resyncs the same server life (no session churn), and the
// client reconnected exactly once per round.
func TestResyncsAfterControlChurn(t *testing.T) {
	r := newRig(t, nil)
	r.tmux("new-session", "-d", "-s", "stays", "cat") // keeps the server up
	eventually(t, "session seen", func() bool { _, ok := r.c.ByName("stays"); return ok })
	first, _ := r.c.Info()
	seq := r.c.Snapshot().Seq
	const rounds = 20
	for i := 0; i < rounds; i++ {
		r.waitSynced()
		info, _ := r.c.Info()
		if i%2 == 0 {
			if err := syscall.Kill(info.ClientPID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		} else {
			r.tmux("kill-session", "-t", "skc-control")
		}
		eventually(t, "resynced on a new control client", func() bool {
			now, _ := r.c.Info()
			return now.ClientPID != info.ClientPID && r.c.Synced()
		})
		if now, _ := r.c.Info(); now.ServerLife != first.ServerLife {
			t.Fatalf("round %d: server life changed", i)
		}
	}
	if n := r.cl.Reconnects(); n != rounds {
		t.Fatalf("Reconnects = %d, want %d", n, rounds)
	}
	if snap := r.c.Snapshot(); snap.Seq != seq || len(snap.Sessions) != 1 {
		t.Fatalf("same life must not churn: %+v", snap)
	}
}
