package integration

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skc-supervisor/skc-supervisor/proctree"
)

// A fleet's hosts on one machine, each as separate as one kernel allows: its
// own pid namespace (its daemons, tmux server, helpers and agents see only
// each other, pids start at 1, /proc is its own), mount namespace (its own
// /proc mount and machine id) and UTS namespace (its host name), made by
// util-linux's unshare as root. Its boot id comes through the test seam
// SKC_TEST_BOOT_ID_FILE (proctree.BootIDFileEnv): the kernel has one boot id
// for all namespaces.
//
// The namespace's init (pid 1) is this test binary (SKC_IT_HELPER=nsinit): it
// bind-mounts the host's machine id, sets the host name, says "ready" and
// then reaps orphans (the tmux server daemonises; its parent becomes the
// namespace's init) until it is killed. Daemons are started inside with
// nsenter, so a daemon may die and be restarted while the host — its tmux
// server and agents — lives on, as on a real machine.
//
// Clients stay outside: the CLI, HTTP and tmux talk to the host through its
// sockets, and /proc of the test's namespace sees every host's processes
// (which is how agents are counted fleet-wide). Ending a host is SIGKILL of
// its init, a child of the unshare process the test holds: the kernel then
// kills everything in the namespace.

// Environment of the nsinit helper.
const (
	nsMachineIDEnv = "SKC_IT_NS_MACHINE_ID" // file to bind over the machine id files
	nsHostnameEnv  = "SKC_IT_NS_HOSTNAME"   // the UTS namespace's host name
)

// machineIDFiles are where the fence reads a machine id (fence.LocalHost):
// each one that exists is covered by the host's own.
var machineIDFiles = []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}

// nsUnavailable says why namespaced hosts cannot run here ("" when they can),
// found once per test binary by starting one.
var nsProbe struct {
	sync.Once
	why string
}

func nsUnavailable() string {
	nsProbe.Do(func() {
		if os.Geteuid() != 0 {
			nsProbe.why = "they need root (unshare of pid and mount namespaces)"
			return
		}
		for _, tool := range []string{"unshare", "nsenter"} {
			if _, err := exec.LookPath(tool); err != nil {
				nsProbe.why = fmt.Sprintf("no %s (Debian package util-linux): %v", tool, err)
				return
			}
		}
		out, err := exec.Command("unshare", "--pid", "--mount", "--uts", "--fork", "--mount-proc",
			"--kill-child", "true").CombinedOutput()
		if err != nil {
			nsProbe.why = fmt.Sprintf("unshare --pid --mount --uts fails here: %v: %s", err, strings.TrimSpace(string(out)))
		}
	})
	return nsProbe.why
}

// needNamespaces skips t, with one line saying why, where namespaced hosts
// cannot be made.
func needNamespaces(t testing.TB) {
	t.Helper()
	if why := nsUnavailable(); why != "" {
		t.Skipf("SKIP namespaced fleet hosts: %s", why)
	}
}

// NSHost is one host of a fleet on this machine: a home of its own in its
// own pid, mount and UTS namespaces, with its own host name, machine id and
// boot id, on the fleet's fence.
type NSHost struct {
	*Home
	Name      string
	Fence     string // the fleet's fence URL (SKC_FENCE)
	BootID    string
	MachineID string // "" when this machine has no machine id file to cover

	seams   string    // directory of the boot id and machine id files
	unshare *exec.Cmd // the process we hold; the init is its child
	initPID int       // the namespace's init, as this test sees it
	pidNS   string    // the pid namespace (readlink /proc/<init>/ns/pid)
	done    chan struct{}
}

// NewNSHost makes host name's namespaces and its home (skipping t where
// namespaces cannot be made). No daemon runs yet: Start starts one.
func NewNSHost(t testing.TB, name, fenceURL string) *NSHost {
	t.Helper()
	needNamespaces(t)
	h := &NSHost{Home: NewHome(t), Name: name, Fence: fenceURL, done: make(chan struct{})}
	seams, err := os.MkdirTemp("", "skcns")
	if err != nil {
		t.Fatal(err)
	}
	h.seams = seams
	h.BootID = randomUUID(t)
	h.MachineID = randomHex(t, 16)
	for file, v := range map[string]string{"boot_id": h.BootID, "machine-id": h.MachineID} {
		if err := os.WriteFile(filepath.Join(seams, file), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !anyExists(machineIDFiles) {
		h.MachineID = "" // nothing to cover: the host has none, as the machine
	}
	h.startNamespaces(t)
	t.Cleanup(func() { h.stop(t) })
	h.Home.outerPID = h.OuterPID
	return h
}

// startNamespaces starts unshare with the nsinit helper and waits for it to
// say ready (its mounts are made).
func (h *NSHost) startNamespaces(t testing.TB) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h.unshare = exec.Command("unshare", "--pid", "--mount", "--uts", "--fork", "--mount-proc", "--kill-child", self)
	h.unshare.Env = h.Env("SKC_IT_HELPER=nsinit", nsHostnameEnv+"="+h.Name,
		nsMachineIDEnv+"="+filepath.Join(h.seams, "machine-id"))
	out, err := h.unshare.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	h.unshare.Stderr = &stderr
	if err := h.unshare.Start(); err != nil {
		t.Fatalf("host %s: unshare: %v", h.Name, err)
	}
	// The line is read before Wait may close the pipe; an init that dies
	// first ends unshare too, and the read meets end of file.
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- line
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(startDeadline):
	}
	go func() { h.unshare.Wait(); close(h.done) }()
	if line != "ready\n" {
		h.unshare.Process.Kill()
		<-h.done
		t.Fatalf("host %s: the namespace's init did not say ready: %q\n%s", h.Name, line, stderr.String())
	}
	if c := children(h.unshare.Process.Pid); len(c) == 1 {
		h.initPID = c[0]
	}
	h.pidNS, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", h.initPID))
	if err != nil || h.initPID == 0 {
		t.Fatalf("host %s: cannot find the namespace's init (pid %d): %v", h.Name, h.initPID, err)
	}
}

// daemonEnv is the daemon's environment on this host: its host name, boot
// id (the seam) and fence (the home's SQLite when Fence is ""), on top of
// the home's.
func (h *NSHost) daemonEnv() []string {
	env := []string{"SKC_HOST=" + h.Name, proctree.BootIDFileEnv + "=" + filepath.Join(h.seams, "boot_id")}
	if h.Fence != "" {
		env = append(env, "SKC_FENCE="+h.Fence)
	}
	return env
}

// Start starts serve inside the host's namespaces (nsenter) and waits until
// it answers on its socket.
func (h *NSHost) Start(t testing.TB, opts DaemonOpts) *Daemon {
	t.Helper()
	select {
	case <-h.done:
		t.Fatalf("host %s: its namespaces are gone", h.Name)
	default:
	}
	opts.Wrap = []string{"nsenter", "--target", strconv.Itoa(h.initPID), "--pid", "--mount", "--uts", "--"}
	opts.Env = append(h.daemonEnv(), opts.Env...)
	return h.Home.Start(t, opts)
}

// In reports whether pid (this test's) lives in the host's pid namespace.
func (h *NSHost) In(pid int) bool {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	return err == nil && ns == h.pidNS
}

// OuterPID maps a pid of the host's namespace (what its tmux server and
// daemon report) to this test's, 0 when no such process lives.
func (h *NSHost) OuterPID(inner int) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !h.In(pid) {
			continue
		}
		if ns := nsPIDs(pid); len(ns) > 1 && ns[len(ns)-1] == inner {
			return pid
		}
	}
	return 0
}

// nsPIDs is the NSpid line of /proc/<pid>/status: the pid in each pid
// namespace from this one down to the process's own.
func nsPIDs(pid int) []int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
			var out []int
			for _, f := range strings.Fields(v) {
				n, _ := strconv.Atoi(f)
				out = append(out, n)
			}
			return out
		}
	}
	return nil
}

// stop ends the host: SIGKILL of its init (the child of the unshare we
// hold, so never a reused pid), which ends every process in the namespace;
// unshare then ends of the same signal.
func (h *NSHost) stop(t testing.TB) {
	select {
	case <-h.done:
	default:
		if h.initPID > 0 {
			_ = syscall.Kill(h.initPID, syscall.SIGKILL)
		} else {
			_ = h.unshare.Process.Kill()
		}
		select {
		case <-h.done:
		case <-time.After(stopDeadline):
			_ = h.unshare.Process.Kill()
			<-h.done
			t.Errorf("host %s: unshare did not end with its init", h.Name)
		}
	}
	os.RemoveAll(h.seams)
}

// runNSInit is the namespace's init (SKC_IT_HELPER=nsinit): it covers the
// machine id files with the host's (a bind mount, private to the mount
// namespace unshare made), sets the host name, says ready on stdout and
// reaps every orphan of the namespace until it is killed.
func runNSInit() int {
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "nsinit: not the init of a pid namespace")
		return 2
	}
	if src := os.Getenv(nsMachineIDEnv); src != "" {
		for _, dst := range machineIDFiles {
			if _, err := os.Stat(dst); err != nil {
				continue
			}
			if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
				fmt.Fprintf(os.Stderr, "nsinit: bind %s over %s: %v\n", src, dst, err)
				return 1
			}
		}
	}
	if name := os.Getenv(nsHostnameEnv); name != "" {
		if err := unix.Sethostname([]byte(name)); err != nil {
			fmt.Fprintln(os.Stderr, "nsinit: sethostname:", err)
			return 1
		}
	}
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	fmt.Println("ready")
	for {
		for {
			var ws unix.WaitStatus
			if pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
		<-chld
	}
}

func anyExists(paths []string) bool {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// randomUUID is a boot id as the kernel writes one (8-4-4-4-12 hex).
func randomUUID(t testing.TB) string {
	s := randomHex(t, 16)
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}

// TestNSHostApart: a namespaced host is apart from the test and the machine
// as the fleet tests assume. Its daemon and agent have pids of their own
// namespace (NSpid), which OuterPID maps back; its mount namespace shows its
// own machine id while the machine's file is untouched; its host name is its
// own; ending the host leaves no process of its home.
func TestNSHostApart(t *testing.T) {
	h := NewNSHost(t, "host-x", "")
	d := h.Start(t, DaemonOpts{})
	if ns := nsPIDs(d.PID()); len(ns) != 2 || !h.In(d.PID()) || h.In(os.Getpid()) {
		t.Fatalf("daemon pid %d: NSpid %v, in the host's namespace %v", d.PID(), ns, h.In(d.PID()))
	}
	token := agentToken()
	spec := NewSpec(t, "apart")
	spec.Argv = []string{"sleep", token}
	h.MustCreate(t, spec, "published")
	var agent int
	WaitFor(t, waitDeadline, "the agent", func() error {
		if pids := sleepers(token); len(pids) != 1 {
			return fmt.Errorf("agents %v", pids)
		}
		agent = sleepers(token)[0]
		return nil
	})
	sessions := h.AgentSessions(t)
	if len(sessions) != 1 || !h.In(agent) || h.OuterPID(sessions[0].PanePID) != agent {
		t.Fatalf("agent %d (in the host: %v), tmux's pane pid %+v maps to %d", agent, h.In(agent), sessions, h.OuterPID(sessions[0].PanePID))
	}
	outer, _ := os.ReadFile(machineIDFiles[0])
	inner, _ := os.ReadFile(fmt.Sprintf("/proc/%d/root%s", d.PID(), machineIDFiles[0]))
	if h.MachineID != "" && (strings.TrimSpace(string(inner)) != h.MachineID || string(outer) == string(inner)) {
		t.Errorf("machine id inside %q, outside %q; want %q inside only", inner, outer, h.MachineID)
	}
	out, err := exec.Command("nsenter", "--target", strconv.Itoa(h.initPID), "--uts", "hostname").Output()
	if err != nil || strings.TrimSpace(string(out)) != h.Name {
		t.Errorf("the host's name: %q %v, want %s", out, err, h.Name)
	}
	d.Stop(t)
	h.stop(t)
	if left := h.processes(); len(left) != 0 {
		t.Errorf("processes of the host left after its end: %v", left)
	}
}
