package lifecycle

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/creack/pty"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// TestNoAgentOnAHungUpTerminal: a helper whose terminal hung up before its
// exec (the hangup's SIGHUP lost to the exec, or sent before the helper held
// the terminal) does not start its agent beside the dead terminal: it dies
// of the hangup, as the agent would have. On a live terminal, and on a stdin
// that is no terminal at all, the agent starts.
func TestNoAgentOnAHungUpTerminal(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(stdin *os.File) error {
		c := exec.Command(exe, "execagent", "/bin/true")
		c.Stdin = stdin
		return c.Run()
	}
	ptm, pts, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer pts.Close()
	if ttyHungUp(int(pts.Fd())) {
		t.Fatal("a live terminal looks hung up")
	}
	if err := run(pts); err != nil {
		t.Fatalf("agent on a live terminal: %v", err)
	}
	ptm.Close() // the pane's tmux went away
	if !ttyHungUp(int(pts.Fd())) {
		t.Fatal("the terminal did not hang up with its master")
	}
	err = run(pts)
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("helper on a hung-up terminal: %v (the agent ran)", err)
	}
	if ws := ee.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGHUP {
		t.Fatalf("helper on a hung-up terminal: %v, want death by SIGHUP", ws)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if err := run(null); err != nil {
		t.Fatalf("agent with no terminal: %v", err)
	}
}

// TestAgentGetsServersOpenFilesLimit: the helper gives the agent the
// open-files soft limit recorded in the server's environment (the server's
// own raised for its ptys), and not the variable itself.
func TestAgentGetsServersOpenFilesLimit(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command(exe, "execagent", "/bin/sh", "-c", "ulimit -Sn; echo ${"+tmuxctl.AgentNofileEnv+":-unset}")
	c.Env = append(os.Environ(), tmuxctl.AgentNofileEnv+"=321")
	out, err := c.Output()
	if err != nil || string(out) != "321\nunset\n" {
		t.Fatalf("agent's limit and variable: %q %v", out, err)
	}
}

// hupDefaultChild reports SIGHUP's disposition as the kernel holds it
// ("caught", "ignored" or "default"), after hupDefault when args[0] is "set".
func hupDefaultChild(args []string) int {
	if len(args) > 0 && args[0] == "set" {
		hupDefault()
	}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 1
	}
	bit := func(field string) bool {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, field+":"); ok {
				m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
				return err == nil && m&(1<<(uint(syscall.SIGHUP)-1)) != 0
			}
		}
		return false
	}
	switch {
	case bit("SigCgt"):
		fmt.Println("caught")
	case bit("SigIgn"):
		fmt.Println("ignored")
	default:
		fmt.Println("default")
	}
	return 0
}

// TestHupDefaultBeforeExec: right before its exec the helper leaves SIGHUP to
// the kernel's default action — not the Go runtime's handler, which an exec on
// another thread can cut short and so lose the hangup — and a SIGHUP ignored
// by inheritance (nohup) stays ignored for the agent.
func TestHupDefaultBeforeExec(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cmd  *exec.Cmd
		want string
	}{
		{"runtime's handler", exec.Command(exe, "hupdefault"), "caught"},
		{"after hupDefault", exec.Command(exe, "hupdefault", "set"), "default"},
		{"ignored by inheritance", exec.Command("/bin/sh", "-c", `trap "" HUP; exec "$0" hupdefault set`, exe), "ignored"},
	} {
		out, err := tc.cmd.Output()
		if got := strings.TrimSpace(string(out)); err != nil || got != tc.want {
			t.Errorf("%s: SIGHUP %q (%v), want %q", tc.name, got, err, tc.want)
		}
	}
}
