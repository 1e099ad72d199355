package fence

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// The test binary impersonates helper processes (like Go's os/exec tests):
// with FENCE_TEST_HELPER set, TestMain runs that mode instead of the tests.
// Separate processes are what make the liveness tests real: their own pid,
// incarnation and state. (fence/sqlite has the fence's multi-process tests.)
const helperEnv = "FENCE_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	goleak.VerifyTestMain(m)
}

func runHelper(mode string) int {
	switch mode {
	case "sleep": // a live child: blocks until stdin closes
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	case "exit":
		return 0
	case "liveness":
		return helperLiveness()
	}
	fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
	return 2
}

// helperCmd returns a command running this test binary in helper mode.
func helperCmd(t testing.TB, mode string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{helperEnv + "=" + mode}, env...)...)
	cmd.Stderr = os.Stderr
	return cmd
}

// child is a started helper process with line-oriented stdin/stdout.
type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startChild(t testing.TB, mode string, env ...string) *child {
	t.Helper()
	cmd := helperCmd(t, mode, env...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(c.stop)
	return c
}

// stop closes stdin, kills the child by pid if it is still there, and reaps it.
func (c *child) stop() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.in.Close()
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}

func (c *child) send(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		t.Fatalf("send %q: %v", line, err)
	}
}

func (c *child) recv(t testing.TB) string {
	t.Helper()
	line, err := c.out.ReadString('\n')
	if err != nil {
		t.Fatalf("recv from pid %d: %v", c.cmd.Process.Pid, err)
	}
	return strings.TrimSuffix(line, "\n")
}

// kill SIGKILLs the child and reaps it, so its pid is provably dead (ESRCH).
func (c *child) kill(t testing.TB) {
	t.Helper()
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}
