// Package tmuxtest is the test suite's one source of the tmux binary. Every
// test that starts tmux, runs a tmux command, or hands a daemon its --tmux /
// SKC_TMUX takes the binary from Bin, so that one variable moves the whole
// suite to another tmux build:
//
//	SKC_TEST_TMUX=/path/to/tmux-3.7c/bin/tmux go test ./...
//
// Unset, it is "tmux" as found on PATH (Debian 12: 3.3a). `make test-tmux37`
// builds 3.7c and runs the tmux-facing packages with it. The package imports
// nothing of ours, so tests of every package, tmuxctl included, may use it.
package tmuxtest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Env is the variable that names the tmux binary under test.
const Env = "SKC_TEST_TMUX"

var (
	once     sync.Once
	resolved string
	missing  error
)

// resolve looks the binary up once: an absolute path, so that wrappers and
// daemons with another PATH run the same build.
func resolve() {
	name := strings.TrimSpace(os.Getenv(Env))
	if name == "" {
		name = "tmux"
	}
	resolved = name
	if p, err := exec.LookPath(name); err == nil {
		resolved = p
	} else {
		missing = err
	}
}

// Bin is the tmux binary under test: $SKC_TEST_TMUX, else tmux on PATH, as
// an absolute path when it can be found.
func Bin() string {
	once.Do(resolve)
	return resolved
}

// Need skips the test when tmux cannot be found and SKC_TEST_TMUX is unset
// (make test installs tmux), and fails it when SKC_TEST_TMUX names a binary
// that is not there: a run that asked for a tmux build must not pass by
// skipping every test that uses it.
func Need(t testing.TB) {
	t.Helper()
	once.Do(resolve)
	if missing == nil {
		return
	}
	if os.Getenv(Env) != "" {
		t.Fatalf("%s=%s: %v", Env, os.Getenv(Env), missing)
	}
	t.Skip("tmux not installed")
}

// Command is exec.Command for the tmux under test, with -u first: without
// it a client under LC_ALL=C (as CI and services often run) gets every
// non-ASCII character of command output replaced by '_' (docs/tmux-facts.md §3), and a
// test comparing names would fail for the locale, not for the product.
func Command(args ...string) *exec.Cmd {
	return exec.Command(Bin(), append([]string{"-u"}, args...)...)
}

// AtLeast reports whether the tmux under test is at least major.minor
// ("3.3a" is 3.3; an unparseable version counts as new).
func AtLeast(major, minor int) bool {
	v := strings.TrimPrefix(Version(), "next-")
	var ma, mi int
	if n, _ := fmt.Sscanf(v, "%d.%d", &ma, &mi); n < 1 {
		return true
	}
	return ma > major || ma == major && mi >= minor
}

// Version is `tmux -V` of the binary under test without the "tmux " prefix
// ("3.3a", "3.7c"), or "" when it cannot be run.
func Version() string {
	out, err := Command("-V").Output()
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(strings.TrimSpace(string(out)), "tmux ")
}
