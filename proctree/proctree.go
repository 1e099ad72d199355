// Package proctree holds and proves gone the processes of one generation: the
// pane's process (the pane helper until its gate opens, then, the same
// process after its exec, the agent) and every descendant.
//
// What holds a generation, best first:
//   - a cgroup v2 per generation (Hold.Cgroup), which the pane's process enters
//     before it starts anything: every descendant is born inside, whatever
//     process group or session it makes. SIGKILL is cgroup.kill; the proof is
//     cgroup.events reading "populated 0" (or the cgroup removed, which the
//     kernel allows only once it is empty); an unreadable cgroup.events is
//     unknown, never empty.
//   - otherwise the pane's session: tmux makes the pane's process a session
//     leader (its sid is its pid), and every process whose /proc/PID/stat
//     session field is that sid belongs to the generation. The kernel does not
//     reuse a pid number while any task still uses it as its pid, process group
//     or session id (kernel/pid.c: __change_pid frees the struct pid, and so its
//     number, only once pid_has_task is false for every pid type), so while one
//     member remains the number cannot name another process. A live process
//     with that pid and another start time proves the number was freed, hence
//     every member gone. Members are signalled through pidfds, which pin the
//     process they were opened for.
//
// What can escape: on a host without a usable cgroup, a descendant that leaves
// the pane's session (setsid, a double fork into a new session) is no longer
// found; with a cgroup, only a process allowed to write another cgroup's
// cgroup.procs (root, or the delegated user) can move itself out.
package proctree

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Hold is what a generation is held by, as recorded in the fence when it was
// spawned, so a restarted daemon can finish its stop.
type Hold struct {
	Boot      string // boot id at spawn: processes of another boot are gone
	PanePID   int    // the pane's process, a session leader (sid == pid)
	PaneStart uint64 // its start time (clock ticks since boot, /proc/PID/stat field 22); 0: it was gone at spawn
	Cgroup    string // the generation's cgroup directory, "" when none was made
	// InCgroup: the pane's process recorded that it entered Cgroup before it
	// started anything, so the cgroup alone holds the whole tree.
	InCgroup bool
}

// State is what a probe found.
type State int

// The answers. The zero value is Unknown: a process whose liveness is unknown
// is not dead.
const (
	Unknown State = iota
	Alive
	Gone
)

// String names the state.
func (s State) String() string {
	switch s {
	case Alive:
		return "alive"
	case Gone:
		return "gone"
	}
	return "unknown"
}

// Result is one probe's finding.
type Result struct {
	State State
	PIDs  []int // live members found (Alive)
	Why   string
}

// Probe looks once at everything that holds h.
func Probe(h Hold) Result {
	if h.Boot != "" {
		if b, err := BootID(); err != nil {
			return Result{State: Unknown, Why: "boot id unreadable: " + err.Error()}
		} else if b != h.Boot {
			return Result{State: Gone, Why: "another boot"}
		}
	}
	if h.Cgroup != "" {
		populated, _, err := cgroupState(h.Cgroup)
		if err != nil {
			return Result{State: Unknown, Why: "cgroup.events unreadable: " + err.Error()}
		}
		if populated {
			pids, _ := cgroupPIDs(h.Cgroup)
			return Result{State: Alive, PIDs: pids, Why: "cgroup populated"}
		}
		if h.InCgroup {
			// Everything was born inside and it is empty; the pane's process
			// was inside too, and is checked below only as a cheap witness.
			if st := paneState(h); st == Alive {
				return Result{State: Alive, PIDs: []int{h.PanePID}, Why: "pane process alive"}
			}
			return Result{State: Gone, Why: "cgroup empty"}
		}
	}
	if h.PanePID <= 0 || h.PaneStart == 0 {
		// Nothing was started from a pane whose process was gone at spawn
		// (the agent starts only after publication, which comes later).
		return Result{State: Gone, Why: "no pane process recorded"}
	}
	members, err := sessionMembers(h)
	if err != nil {
		return Result{State: Unknown, Why: err.Error()}
	}
	if len(members) > 0 {
		return Result{State: Alive, PIDs: members, Why: "session members alive"}
	}
	return Result{State: Gone, Why: "no process in the pane's session"}
}

// paneState: the pane's process itself, by pid and start time.
func paneState(h Hold) State {
	if h.PanePID <= 0 || h.PaneStart == 0 {
		return Gone
	}
	st, err := readStat(h.PanePID)
	switch {
	case errors.Is(err, os.ErrNotExist), errors.Is(err, unix.ESRCH):
		return Gone
	case err != nil:
		return Unknown
	case st.start != h.PaneStart || st.zombie():
		return Gone
	}
	return Alive
}

// sessionMembers lists the live (non-zombie) processes in the pane's session.
// When the pane's pid now names a process of another start time, the number was
// freed, so no member can remain (see the package comment).
func sessionMembers(h Hold) ([]int, error) {
	sid := h.PanePID
	if st, err := readStat(sid); err == nil && st.start != h.PaneStart {
		return nil, nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ESRCH) {
		return nil, fmt.Errorf("proctree: /proc/%d/stat: %w", sid, err)
	}
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("proctree: /proc unreadable: %w", err)
	}
	var out []int
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		st, err := readStat(pid)
		if err != nil {
			continue // gone since the listing
		}
		if st.session == sid && !st.zombie() {
			out = append(out, pid)
		}
	}
	return out, nil
}

type procStat struct {
	state   byte
	ppid    int
	session int
	start   uint64
	// exitCode is field 52 (exit_code, Linux 3.5): the wait status of an
	// exited task, 0 for one that runs or that the reader may not trace;
	// -1 when the kernel does not show the field.
	exitCode int
}

func (p procStat) zombie() bool { return p.state == 'Z' || p.state == 'X' }

// readStat parses /proc/<pid>/stat, counting fields after the last ')' (the
// command name may hold spaces and parentheses).
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("proctree: malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), f[3] field 6 (session), f[19] field 22 (starttime).
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("proctree: short /proc/%d/stat", pid)
	}
	ppid, err0 := strconv.Atoi(f[1])
	sid, err1 := strconv.Atoi(f[3])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err0 != nil || err1 != nil || err2 != nil {
		return procStat{}, fmt.Errorf("proctree: malformed /proc/%d/stat", pid)
	}
	st := procStat{state: f[0][0], ppid: ppid, session: sid, start: start, exitCode: -1}
	if len(f) >= 50 { // f[49] is field 52
		if v, err := strconv.Atoi(f[49]); err == nil {
			st.exitCode = v
		}
	}
	return st, nil
}

// ChildStartTime returns the start time (field 22 of /proc/PID/stat; a
// zombie's too) of pid, which must be parent's child: it names the process
// life, and is what a Hold records at spawn. A pid that is not parent's child
// any more (it exited and the number was reused) is an error.
func ChildStartTime(pid, parent int) (uint64, error) {
	st, err := readStat(pid)
	if err != nil {
		return 0, err
	}
	if st.ppid != parent {
		return 0, fmt.Errorf("proctree: pid %d is not a child of %d", pid, parent)
	}
	return st.start, nil
}

// BootIDFileEnv names the test seam for the boot id: when set, the boot id
// is read from that file instead of the kernel's (a test simulates a reboot
// by changing it). The fence reads the same variable.
const BootIDFileEnv = "SKC_TEST_BOOT_ID_FILE"

// BootID reads the kernel's boot id (or the file SKC_TEST_BOOT_ID_FILE names).
func BootID() (string, error) {
	path := "/proc/sys/kernel/random/boot_id"
	if p := os.Getenv(BootIDFileEnv); p != "" {
		path = p
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", errors.New("proctree: empty boot id")
	}
	return id, nil
}

// Signal sends sig to every live process that holds h. SIGKILL of a cgroup is
// cgroup.kill (atomic against forks); every other signal, and every session
// member, goes through a pidfd opened first and checked to still be the
// member found, so a pid reused in between is never hit. It returns how many
// processes it signalled.
func Signal(h Hold, sig unix.Signal) (int, error) {
	n := 0
	var errs []error
	if h.Cgroup != "" {
		if sig == unix.SIGKILL {
			if err := killCgroup(h.Cgroup); err != nil {
				errs = append(errs, fmt.Errorf("cgroup.kill: %w", err))
			} else {
				n++
			}
		} else {
			pids, err := cgroupPIDs(h.Cgroup)
			if err != nil {
				errs = append(errs, err)
			}
			for _, p := range pids {
				if signalIf(p, sig, func() bool { return inCgroup(p, h.Cgroup) }) {
					n++
				}
			}
		}
	}
	if !h.InCgroup && h.PanePID > 0 && h.PaneStart != 0 {
		members, err := sessionMembers(h)
		if err != nil {
			errs = append(errs, err)
		}
		for _, p := range members {
			p := p
			if signalIf(p, sig, func() bool {
				st, err := readStat(p)
				return err == nil && st.session == h.PanePID
			}) {
				n++
			}
		}
	}
	return n, errors.Join(errs...)
}

// signalIf opens a pidfd for pid, re-checks that it is still the process meant
// (still reports true), and signals it through the pidfd.
func signalIf(pid int, sig unix.Signal, still func() bool) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if !still() {
		return false
	}
	return unix.PidfdSendSignal(fd, sig, nil, 0) == nil
}
