package fence

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"

	"go.uber.org/goleak"

	"github.com/skc-supervisor/skc-supervisor/internal/proctest"
	"github.com/skc-supervisor/skc-supervisor/internal/testwatch"
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
	testwatch.Arm()
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
	return proctest.Command(t, helperEnv, mode, env...)
}

// child is a started helper process with line-oriented stdin/stdout.
type child = proctest.Child

func startChild(t testing.TB, mode string, env ...string) *child {
	t.Helper()
	return proctest.Start(t, helperCmd(t, mode, env...))
}
