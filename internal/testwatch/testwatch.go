// Package testwatch names the tests still running when a test binary is
// about to reach its -timeout. Go's own timeout panic names them on its
// first lines and then prints every goroutine; a CI log that keeps only the
// tail of the output loses the names. Arm fires a little earlier and prints
// the other goroutines first, then those of the running tests, and last one
// line naming them, so the tail of any log says which test hung and where.
package testwatch

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Arm parses the command line (TestMain must, before reading flags) and,
// when the binary runs with a -timeout, reports shortly before it: at the
// timeout less a tenth of it, at most 30 s less. It exits the binary with
// status 2 after the report, as the timeout would have. A timer, not a
// goroutine, waits: goleak's check at the end of a package sees nothing.
func Arm() {
	if !flag.Parsed() {
		flag.Parse()
	}
	f := flag.Lookup("test.timeout")
	if f == nil {
		return
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return
	}
	d, _ := g.Get().(time.Duration)
	if d <= 0 {
		return
	}
	at := d - min(d/10, 30*time.Second)
	time.AfterFunc(at, func() {
		Report(os.Stderr, at, allStacks())
		os.Exit(2)
	})
}

// testFrame matches a frame of a test, benchmark or fuzz function (its
// closures and subtests included), not TestMain.
var testFrame = regexp.MustCompile(`\.((?:Test|Benchmark|Fuzz)[A-Z0-9_][A-Za-z0-9_]*)(?:\.func[0-9.]+)?\(`)

// Report writes stacks (runtime.Stack's text of all goroutines) to w, the
// goroutines of running tests last, then the line that names those tests.
func Report(w io.Writer, after time.Duration, stacks []byte) {
	var others, tests []string
	names := map[string]bool{}
	for _, g := range strings.Split(string(stacks), "\n\n") {
		found := false
		for _, m := range testFrame.FindAllStringSubmatch(g, -1) {
			if m[1] != "TestMain" {
				names[m[1]], found = true, true
			}
		}
		if found {
			tests = append(tests, g)
		} else {
			others = append(others, g)
		}
	}
	list := make([]string, 0, len(names))
	for n := range names {
		list = append(list, n)
	}
	sort.Strings(list)
	fmt.Fprintf(w, "testwatch: %d goroutines, those of running tests last\n\n", len(others)+len(tests))
	for _, g := range append(others, tests...) {
		fmt.Fprintf(w, "%s\n\n", strings.TrimRight(g, "\n"))
	}
	if len(list) == 0 {
		list = []string{"(none: the binary is outside any test)"}
	}
	fmt.Fprintf(w, "testwatch: after %v, near the test timeout, still running: %s (their goroutines are just above)\n",
		after.Round(time.Second), strings.Join(list, ", "))
}

// allStacks is runtime.Stack of every goroutine, the buffer grown until
// the text fits.
func allStacks() []byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.TrimRight(buf[:n], "\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}
