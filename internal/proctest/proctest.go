// Package proctest runs a test binary again as a helper process (like Go's
// os/exec tests) and talks to it line by line over stdin and stdout. Tests
// that claim behaviour across processes use it: a helper has its own pid,
// incarnation, connections and locks, which no goroutine can fake.
//
// The test binary's TestMain serves a helper: when the environment variable
// the test chose (env) is set, it runs that mode instead of the tests.
package proctest

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Command returns a command running this test binary as helper mode: env=mode
// in its environment, with extra ("KEY=value") after it, and no test selected
// (-test.run=^$), so only TestMain's helper branch runs. Its stderr is the
// test's, so a helper's failure is seen in the test's output.
func Command(t testing.TB, env, mode string, extra ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{env + "=" + mode}, extra...)...)
	cmd.Stderr = os.Stderr
	return cmd
}

// Child is a started helper process with line-oriented stdin/stdout.
type Child struct {
	// Cmd is the started command: Cmd.Process.Pid is the helper's pid,
	// Cmd.Wait reaps it after it exits on its own.
	Cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// Start starts cmd with pipes to its stdin and stdout; the test's cleanup
// stops it (Stop), so no helper outlives its test.
func Start(t testing.TB, cmd *exec.Cmd) *Child {
	t.Helper()
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
	c := &Child{Cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(c.Stop)
	return c
}

// Stop closes stdin, kills the child by pid if it is still there, and reaps it.
func (c *Child) Stop() {
	if c.Cmd.ProcessState != nil {
		return
	}
	_ = c.in.Close()
	_ = c.Cmd.Process.Kill()
	_ = c.Cmd.Wait()
}

// Send writes line and a newline to the child's stdin.
func (c *Child) Send(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		t.Fatalf("send %q: %v", line, err)
	}
}

// Recv reads one line from the child's stdout, without its newline; a child
// that exits first fails the test.
func (c *Child) Recv(t testing.TB) string {
	t.Helper()
	line, err := c.ReadLine()
	if err != nil {
		t.Fatalf("recv from pid %d: %v", c.Cmd.Process.Pid, err)
	}
	return line
}

// ReadLine reads one line from the child's stdout, without its newline: Recv
// for a test that counts a child's silence rather than failing on it.
func (c *Child) ReadLine() (string, error) {
	line, err := c.out.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

// CloseInput closes the child's stdin: its signal to finish.
func (c *Child) CloseInput() { _ = c.in.Close() }

// Wait reaps the child: its own exit status, nil for a clean exit.
func (c *Child) Wait() error { return c.Cmd.Wait() }

// Kill SIGKILLs the child and reaps it, so its pid is provably dead (ESRCH).
func (c *Child) Kill(t testing.TB) {
	t.Helper()
	_ = c.Cmd.Process.Kill()
	_ = c.Cmd.Wait()
}
