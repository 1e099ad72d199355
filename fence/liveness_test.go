package fence

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// waitFor polls cond until it holds or a generous deadline passes (no timed
// assertions: the deadline only bounds a hung test).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestLivenessSelf(t *testing.T) {
	inc, err := Incarnation(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if got := Liveness(os.Getpid(), inc); got != Alive {
		t.Fatalf("self is %s", got)
	}
	in, ok := parseIncarnation(inc)
	if !ok || in.boot == "" || in.start == 0 {
		t.Fatalf("incarnation %q", inc)
	}
}

func TestLivenessLiveThenReapedChild(t *testing.T) {
	c := startChild(t, "sleep")
	pid := c.Cmd.Process.Pid
	inc, err := Incarnation(pid)
	if err != nil {
		t.Fatal(err)
	}
	if got := Liveness(pid, inc); got != Alive {
		t.Fatalf("live child is %s", got)
	}
	c.Kill(t) // SIGKILL and reap: the pid is gone (ESRCH)
	if got := Liveness(pid, inc); got != Dead {
		t.Fatalf("reaped child is %s", got)
	}
}

func TestLivenessZombie(t *testing.T) {
	cmd := helperCmd(t, "sleep")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	inc, err := Incarnation(pid)
	if err != nil {
		t.Fatal(err)
	}
	in.Close() // the child exits; we do not wait yet, so it stays a zombie
	waitFor(t, "the child to become a zombie", func() bool {
		st, err := readStat(pid)
		return err == nil && st.state == 'Z'
	})
	if got := Liveness(pid, inc); got != Dead {
		t.Fatalf("zombie is %s", got)
	}
	if _, err := Incarnation(pid); err == nil {
		t.Fatal("a zombie has an incarnation")
	}
}

func TestLivenessForgedIncarnation(t *testing.T) {
	pid := os.Getpid()
	inc, err := Incarnation(pid)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := parseIncarnation(inc)
	reused := in
	reused.start++ // same pid, another life: a reused pid
	otherBoot := in
	otherBoot.boot = "00000000-0000-0000-0000-000000000000"
	otherNS := in
	otherNS.pidns = "1"
	otherPidfs := in
	otherPidfs.pidfs = "1"
	for _, tc := range []struct {
		name string
		inc  string
		want Live
	}{
		{"reused pid", reused.String(), Dead},
		{"another boot", otherBoot.String(), Dead},
		{"another pid namespace", otherNS.String(), LiveUnknown},
		{"garbage", "nonsense", LiveUnknown},
		{"empty", "", LiveUnknown},
	} {
		if got := Liveness(pid, tc.inc); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	if in.pidfs != "" {
		if got := Liveness(pid, otherPidfs.String()); got != Dead {
			t.Errorf("another pidfs inode: %s, want dead", got)
		}
	}
	if got := Liveness(0, inc); got != LiveUnknown {
		t.Errorf("pid 0: %s", got)
	}
}

func TestReadStatParsesCommWithParens(t *testing.T) {
	// The command name may contain ") " — fields are counted after the last ')'.
	b := "123 (a) b) c) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 20 21"
	f := strings.Fields(b[strings.LastIndexByte(b, ')')+1:])
	if f[0] != "S" || f[19] != "424242" {
		t.Fatalf("fields %v", f)
	}
	st, err := readStat(os.Getpid())
	if err != nil || st.state == 0 || st.start == 0 {
		t.Fatalf("%+v %v", st, err)
	}
}

// TestLivenessEPERM: kill(pid, 0) answering EPERM means a live process of
// another user. As root we cannot get EPERM ourselves, so the check runs in
// a child process with the uid of nobody, against this (root) process.
func TestLivenessEPERM(t *testing.T) {
	pid := os.Getpid()
	inc, err := Incarnation(pid)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := parseIncarnation(inc)
	reused := in
	reused.start++
	if os.Getuid() != 0 {
		if inc1, err := Incarnation(1); err == nil && unix.Kill(1, 0) == unix.EPERM {
			if got := Liveness(1, inc1); got != Alive {
				t.Fatalf("pid 1 (EPERM) is %s", got)
			}
			return
		}
		t.Skip("needs root, or a pid 1 we may not signal")
	}
	bin := copyTestBinary(t)
	for _, tc := range []struct {
		inc  string
		want Live
	}{{inc, Alive}, {reused.String(), Dead}} {
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"=liveness", "FENCE_PID="+strconv.Itoa(pid), "FENCE_INC="+tc.inc)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("checker: %v", err)
		}
		if got := strings.TrimSpace(string(out)); got != "EPERM "+tc.want.String() {
			t.Fatalf("as nobody: %q, want EPERM %s", got, tc.want)
		}
	}
}

// copyTestBinary copies the test binary where another uid may run it.
func copyTestBinary(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fence-bin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "fence.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// helperLiveness prints what kill(pid, 0) says and Liveness's answer.
func helperLiveness() int {
	pid, _ := strconv.Atoi(os.Getenv("FENCE_PID"))
	kerr := "ok"
	if err := unix.Kill(pid, 0); err != nil {
		kerr = unix.ErrnoName(err.(unix.Errno))
	}
	fmt.Println(kerr, Liveness(pid, os.Getenv("FENCE_INC")))
	return 0
}
