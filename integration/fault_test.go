package integration

import (
	"encoding/json"
	"syscall"
	"testing"
)

// faultPoints are docs/contract.md's SKC_FAULT points in saga order, with what a
// restarted daemon must make of the abandoned attempt (DESIGN §6):
//   - sessions: agent sessions tmux shows right after the crash;
//   - recovery: the skc.verdict of the one recovery verdict ("" = no row left to
//     recover, so no recovery verdict);
//   - second: the status of the create after the restart.
var faultPoints = []struct {
	point    string
	sessions int
	recovery string
	second   string
}{
	{"reserved", 0, "reclaimed", "published"},
	{"helper_invoked", 0, "reclaimed", "published"},
	{"new-session", 1, "orphan_cleaned", "published"},
	{"spawned", 1, "orphan_cleaned", "published"},
	{"tagged", 1, "orphan_cleaned", "published"},
	{"publish", 1, "preserved", "existing"},
	{"published", 1, "preserved", "existing"},
}

// TestFaultPoints: the daemon is SIGKILLed at each point of a create; a restarted
// daemon leaves exactly one live session for the identity, no orphan, one
// recovery verdict, and never kills an authoritative child.
func TestFaultPoints(t *testing.T) {
	t.Parallel()
	for _, fp := range faultPoints {
		t.Run(fp.point, func(t *testing.T) {
			t.Parallel()
			h := NewHome(t)
			d := h.Start(t, DaemonOpts{Fault: "after:" + fp.point})
			spec := NewSpec(t, "fault-1")
			r := h.CLI(t, spec.Args()...)
			st := d.WaitExit(t, stopDeadline)
			if st == nil {
				d.Kill(t)
				t.Fatalf("daemon did not die at after:%s\ncreate: %s", fp.point, r)
			}
			if sig := signalOf(st); sig != syscall.SIGKILL {
				t.Fatalf("daemon ended with %v, want SIGKILL at after:%s\ncreate: %s\n%s", st, fp.point, r, clip(d.Log()))
			}
			if r.Code == 0 {
				t.Errorf("create answered success although the daemon died at after:%s\n%s", fp.point, r)
			}
			h.NoteSession(t)
			before := h.AgentSessions(t)
			if len(before) != fp.sessions {
				t.Errorf("after the crash at %s tmux has %d agent sessions %+v, want %d", fp.point, len(before), before, fp.sessions)
			}

			if fp.recovery == "orphan_cleaned" {
				for _, b := range before {
					if pid := descendantNamed(b.PanePID, "sleep"); pid != 0 {
						t.Errorf("orphan %q runs the agent (sleep, pid %d): an orphan must never run an agent", b.Name, pid)
					}
				}
			}

			d2 := h.Start(t, DaemonOpts{})
			second := d2.MustCreate(t, spec, fp.second)
			checkAfterRecovery(t, d2, fp.point, fp.recovery, before, second)
		})
	}
}

func checkAfterRecovery(t *testing.T, d *Daemon, point, recovery string, before []tmuxSession, second Session) {
	after := d.AgentSessions(t)
	if len(after) != 1 || after[0].Name != second.Name {
		t.Errorf("tmux has agent sessions %+v after recovery, want exactly %q", after, second.Name)
	}
	for _, b := range before {
		survived := false
		for _, a := range after {
			survived = survived || a.Name == b.Name
		}
		switch {
		case recovery == "orphan_cleaned" && survived:
			t.Errorf("orphan %q (reservation %q) survived recovery", b.Name, b.Reservation)
		case (recovery == "preserved" || recovery == "") && !survived:
			t.Errorf("the authoritative session %q was killed by recovery", b.Name)
		case (recovery == "preserved" || recovery == "") && (second.Name != b.Name || second.PanePID != b.PanePID):
			t.Errorf("create answered %+v, want the original session %+v", second, b)
		case recovery == "preserved" || recovery == "":
			if !alive(b.PanePID) {
				t.Errorf("the authoritative session's pane process %d is dead", b.PanePID)
			}
		}
	}
	vs := d.Verdicts(t)
	checkVerdictStream(t, vs)
	var rec []Verdict
	for _, v := range vs {
		if v.Event.Action == "recover" {
			rec = append(rec, v)
		}
	}
	switch {
	case recovery == "" && len(rec) != 0:
		t.Errorf("after:%s: %d recovery verdicts, want none: %s", point, len(rec), lastVerdicts(rec, 5))
	case recovery != "" && (len(rec) != 1 || rec[0].SKC.Verdict != recovery):
		t.Errorf("after:%s: recovery verdicts %s, want exactly one %q", point, lastVerdicts(rec, 5), recovery)
	}
	if n := countVerdicts(vs, func(v Verdict) bool { return v.SKC.Verdict == "unresolved" }); n != 0 {
		t.Errorf("after:%s: %d unresolved verdicts", point, n)
	}
	status, body := d.Get(t, "/v1/fence")
	var f struct {
		Reservations []json.RawMessage `json:"reservations"`
	}
	if status != 200 || json.Unmarshal(body, &f) != nil || len(f.Reservations) != 0 {
		t.Errorf("fence after recovery: %d %s, want no reservation left", status, body)
	}
}
