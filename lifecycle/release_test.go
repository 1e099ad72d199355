package lifecycle

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/proctree"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestReleaseRefusalSaysWhatIsLeft: `fence release` of a generation whose
// processes are alive is refused identity_reserved_live; when they have
// already outlived the stop's SIGKILL, the message does not send the operator
// back to `kill` (which is what failed), and says the identity frees itself
// once they are gone.
func TestReleaseRefusalSaysWhatIsLeft(t *testing.T) {
	e := startEnvWith(t, &env{noCgroup: true}, "", true)
	exe, _ := os.Executable()
	c := exec.Command(exe, "agent", "sleep")
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // a session of its own: the hold's member
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	start, err := proctree.ChildStartTime(c.Process.Pid, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	id, _ := e.identity("outlived")
	p := fence.Published{Identity: id, Generation: 3, ReservationID: "0123456789abcdef0123456789abcdef",
		PanePID: c.Process.Pid, PaneStart: start}
	for _, killed := range []bool{false, true} {
		p.Stopping = &fence.Stop{Since: time.Now(), Deadline: time.Now(), Reason: verdict.ReasonKilledByRequest, Killed: killed}
		err := e.m.releasableGeneration(context.Background(), p, map[string]any{})
		ve := verdict.AsError(err)
		if ve == nil || ve.Code != verdict.CodeIdentityReservedLive {
			t.Fatalf("killed=%v: %v", killed, err)
		}
		if sendsToKill := strings.Contains(ve.Message, "`kill` it"); sendsToKill == killed {
			t.Errorf("killed=%v: message %q", killed, ve.Message)
		}
	}
}
