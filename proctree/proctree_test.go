package proctree

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMain lets the test binary be the processes it holds: "leader" becomes a
// session leader (as tmux makes a pane's process) — after entering the cgroup
// named by its second argument, if any — and starts a child that leaves its
// process group ("pgrp") or its session ("setsid"), then waits to be killed.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "leader" {
		if os.Args[3] != "" {
			if err := EnterCgroup(os.Args[3]); err != nil {
				os.Exit(3)
			}
		}
		exe, _ := os.Executable()
		c := exec.Command(exe, "sleeper")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: os.Args[2] == "pgrp", Setsid: os.Args[2] == "setsid"}
		if err := c.Start(); err != nil {
			os.Exit(4)
		}
		os.Stdout.WriteString(strconv.Itoa(c.Process.Pid) + "\n")
		for {
			time.Sleep(time.Hour) // not select {}: the runtime would call that a deadlock and exit
		}
	}
	if len(os.Args) > 2 && os.Args[1] == "exiter" { // exits with the status given once its stdin closes
		_, _ = io.Copy(io.Discard, os.Stdin)
		code, _ := strconv.Atoi(os.Args[2])
		os.Exit(code)
	}
	if len(os.Args) > 1 && os.Args[1] == "threadexec" { // execs a sleeper from a thread that is not the main one
		done := make(chan error)
		go func() {
			runtime.LockOSThread() // a new goroutine's locked thread: not the process's main thread
			exe, _ := os.Executable()
			done <- syscall.Exec(exe, []string{exe, "sleeper"}, os.Environ())
		}()
		<-done
		os.Exit(5)
	}
	if len(os.Args) > 1 && os.Args[1] == "sleeper" {
		for {
			time.Sleep(time.Hour) // not select {}: the runtime would call that a deadlock and exit
		}
	}
	os.Exit(m.Run())
}

// startLeader starts a session leader whose child leaves as mode says, and
// returns the leader's Hold and the child's pid.
func startLeader(t *testing.T, mode, cgroup string) (Hold, int) {
	t.Helper()
	exe, _ := os.Executable()
	c := exec.Command(exe, "leader", mode, cgroup)
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	buf := make([]byte, 32)
	n, err := out.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(string(buf[:n-1]))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	start, err := ChildStartTime(c.Process.Pid, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	boot, err := BootID()
	if err != nil {
		t.Fatal(err)
	}
	return Hold{Boot: boot, PanePID: c.Process.Pid, PaneStart: start, Cgroup: cgroup, InCgroup: cgroup != ""}, child
}

func hasPID(pids []int, p int) bool {
	for _, x := range pids {
		if x == p {
			return true
		}
	}
	return false
}

// TestSessionHold: without a cgroup the pane's session holds its processes: a
// child in a process group of its own is found, signalled and proven gone.
func TestSessionHold(t *testing.T) {
	h, child := startLeader(t, "pgrp", "")
	r := Probe(h)
	if r.State != Alive || !hasPID(r.PIDs, h.PanePID) || !hasPID(r.PIDs, child) {
		t.Fatalf("probe %+v, want alive with %d and %d", r, h.PanePID, child)
	}
	if n, err := Signal(h, unix.SIGKILL); err != nil || n < 2 {
		t.Fatalf("signal: %d %v", n, err)
	}
	// The leader is our child: it stays a zombie until reaped, which is not alive.
	if r := WaitGone(context.Background(), h, time.Now().Add(60*time.Second)); r.State != Gone {
		t.Fatalf("after SIGKILL: %+v", r)
	}
}

// TestSessionHoldMissesSetsid documents the limit written in
// docs/architecture.md: without a cgroup, a child that leaves the session is
// not found.
func TestSessionHoldMissesSetsid(t *testing.T) {
	h, child := startLeader(t, "setsid", "")
	if r := Probe(h); hasPID(r.PIDs, child) {
		t.Fatalf("probe %+v found the child that left the session", r)
	}
}

// TestCgroupHold: with a cgroup, a child that leaves the session is held too;
// cgroup.kill ends both and "populated 0" is the proof.
func TestCgroupHold(t *testing.T) {
	base, err := DetectCgroupBase(t.TempDir())
	if err != nil {
		t.Skipf("no cgroup here: %v", err)
	}
	t.Cleanup(func() { RemoveBase(base) })
	dir := GenerationCgroup(base, "0123456789abcdef0123456789abcdef")
	h, child := startLeader(t, "setsid", dir)
	t.Cleanup(func() { _ = RemoveCgroup(dir) })
	r := Probe(h)
	if r.State != Alive || !hasPID(r.PIDs, child) {
		t.Fatalf("probe %+v, want alive with the child %d", r, child)
	}
	if _, err := Signal(h, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if r := WaitGone(context.Background(), h, time.Now().Add(60*time.Second)); r.State != Gone {
		t.Fatalf("after cgroup.kill: %+v", r)
	}
	if err := RemoveCgroup(dir); err != nil {
		t.Fatalf("remove the empty cgroup: %v", err)
	}
	if r := Probe(h); r.State != Gone {
		t.Fatalf("a removed cgroup holds nothing: %+v", r)
	}
}

// TestUnreadableCgroupIsUnknown: a cgroup.events that cannot be read is
// unknown, never empty.
func TestUnreadableCgroupIsUnknown(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "cgroup.events"), 0o700); err != nil {
		t.Fatal(err)
	}
	if r := Probe(Hold{Cgroup: dir, InCgroup: true}); r.State != Unknown {
		t.Fatalf("probe %+v, want unknown", r)
	}
}

// TestOtherBootIsGone and TestNoPaneIsGone: a hold of another boot, or whose
// pane process was gone at spawn, holds nothing.
func TestOtherBootIsGone(t *testing.T) {
	if r := Probe(Hold{Boot: "another-boot", PanePID: os.Getpid(), PaneStart: 1}); r.State != Gone {
		t.Fatalf("probe %+v", r)
	}
	if r := Probe(Hold{PanePID: os.Getpid()}); r.State != Gone {
		t.Fatalf("probe %+v", r)
	}
}

// TestReusedPaneIsGone: a pane pid that now names another process (another
// start time) was freed, so its session has no member left.
func TestReusedPaneIsGone(t *testing.T) {
	st, err := ChildStartTime(os.Getpid(), os.Getppid())
	if err != nil {
		t.Fatal(err)
	}
	if r := Probe(Hold{PanePID: os.Getpid(), PaneStart: st + 1}); r.State != Gone {
		t.Fatalf("probe %+v", r)
	}
}
