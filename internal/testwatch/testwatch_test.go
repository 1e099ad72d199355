package testwatch

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestReportNamesRunningTestsLast: the goroutines of running tests come
// after the others, and the last line names them (closures and subtests
// under their test's name, TestMain not at all).
func TestReportNamesRunningTestsLast(t *testing.T) {
	stacks := strings.Join([]string{
		"goroutine 1 [chan receive]:\ntesting.(*M).Run(0xc0)\nexample.com/p.TestMain(0xc0)",
		"goroutine 7 [select]:\nexample.com/p.TestHang.func2.1()\n\t/x/p_test.go:10 +0x1\ntesting.tRunner(0xc0, 0x1)",
		"goroutine 9 [IO wait]:\nexample.com/tmuxctl.(*Conn).readLoop(0xc0)",
		"goroutine 11 [sleep]:\nexample.com/p.TestOther(0xc0)\ntesting.tRunner(0xc0, 0x1)",
	}, "\n\n")
	var out bytes.Buffer
	Report(&out, 90*time.Second, []byte(stacks))
	text := out.String()
	if i, j := strings.Index(text, "goroutine 9 "), strings.Index(text, "goroutine 7 "); i < 0 || j < i {
		t.Fatalf("test goroutines not last:\n%s", text)
	}
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	last := lines[len(lines)-1]
	if !strings.Contains(last, "still running: TestHang, TestOther (") || strings.Contains(last, "TestMain") ||
		!strings.Contains(last, "after 1m30s") {
		t.Fatalf("last line %q", last)
	}
}

// TestReportWithoutTests says so instead of an empty list.
func TestReportWithoutTests(t *testing.T) {
	var out bytes.Buffer
	Report(&out, time.Second, []byte("goroutine 1 [running]:\nmain.main()"))
	if !strings.Contains(out.String(), "still running: (none") {
		t.Fatal(out.String())
	}
}
