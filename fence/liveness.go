package fence

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// An incarnation names one process life: "<boot_id>/<pidns>/<starttime>/<pidfs>".
//   - boot_id (/proc/sys/kernel/random/boot_id): a pid from another boot is dead;
//   - pidns: the inode of the recording process's pid namespace, because a pid
//     number means nothing in another namespace (liveness is then unknown);
//   - starttime: field 22 of /proc/<pid>/stat, in clock ticks since boot, which
//     tells a reused pid from the owner;
//   - pidfs: the inode of a pidfd on kernels with pidfs (unique per process for
//     the life of the boot), "" where unavailable; a finer tie-breaker only.
//
// The format is stored in the fence; parseIncarnation must keep reading old rows.

type incarnation struct {
	boot, pidns, pidfs string
	start              uint64
}

func (in incarnation) String() string {
	return fmt.Sprintf("%s/%s/%d/%s", in.boot, in.pidns, in.start, in.pidfs)
}

func parseIncarnation(s string) (incarnation, bool) {
	f := strings.Split(s, "/")
	if len(f) != 4 || f[0] == "" {
		return incarnation{}, false
	}
	start, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		return incarnation{}, false
	}
	return incarnation{boot: f[0], pidns: f[1], start: start, pidfs: f[3]}, true
}

var bootOnce struct {
	sync.Once
	id  string
	err error
}

// bootID reads the kernel's boot id once: it cannot change while we run.
// SKC_TEST_BOOT_ID_FILE (proctree.BootIDFileEnv; fence imports only
// verdict) names a file to read it from instead: the seam a test uses to
// simulate a reboot, read at the process's first use.
func bootID() (string, error) {
	bootOnce.Do(func() {
		path := "/proc/sys/kernel/random/boot_id"
		if p := os.Getenv("SKC_TEST_BOOT_ID_FILE"); p != "" {
			path = p
		}
		b, err := os.ReadFile(path)
		bootOnce.id = strings.TrimSpace(string(b))
		bootOnce.err = err
		if err == nil && bootOnce.id == "" {
			bootOnce.err = errors.New("fence: empty boot id")
		}
	})
	return bootOnce.id, bootOnce.err
}

// selfPidNS returns the inode of our pid namespace, "" when unreadable.
func selfPidNS() string {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return ""
	}
	return strconv.FormatUint(st.Ino, 10)
}

type procStat struct {
	state byte
	start uint64
}

// readStat parses /proc/<pid>/stat. The command name (field 2) may contain
// spaces and parentheses, so fields are counted after the last ')'.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("fence: malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field 22 (starttime) is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("fence: short /proc/%d/stat", pid)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("fence: /proc/%d/stat starttime: %w", pid, err)
	}
	return procStat{state: f[0][0], start: start}, nil
}

// pidfsInode returns the inode of a pidfd for pid, "" when the kernel has no
// pidfd_open or the process is gone. The fd is a pidfd, never a database file.
func pidfsInode(pid int) string {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return ""
	}
	return strconv.FormatUint(st.Ino, 10)
}

// Incarnation returns the incarnation string of pid as seen from this process.
// It fails when the boot id or the process's start time cannot be read: an
// owner whose incarnation is unknown must not take a reservation.
func Incarnation(pid int) (string, error) {
	return incarnationOf(pid, nil)
}

// IncarnationOf is Incarnation for a process the caller knows by its start
// time (/proc/PID/stat's field 22, read earlier): it fails when pid now names
// another process life. The daemon records a claimed standby's start with it,
// on the standby's behalf (lifecycle's warm pool).
func IncarnationOf(pid int, start uint64) (string, error) {
	return incarnationOf(pid, &start)
}

func incarnationOf(pid int, want *uint64) (string, error) {
	if pid <= 0 {
		return "", fmt.Errorf("fence: invalid pid %d", pid)
	}
	boot, err := bootID()
	if err != nil {
		return "", fmt.Errorf("fence: boot id: %w", err)
	}
	st, err := readStat(pid)
	if err != nil {
		return "", err
	}
	if st.state == 'Z' || st.state == 'X' {
		return "", fmt.Errorf("fence: pid %d is a zombie", pid)
	}
	if want != nil && st.start != *want {
		return "", fmt.Errorf("fence: pid %d is another process than the one started at %d", pid, *want)
	}
	in := incarnation{boot: boot, pidns: selfPidNS(), start: st.start, pidfs: pidfsInode(pid)}
	// Re-read: if the pid was reused between the two reads, the pidfs inode
	// belongs to another process than the start time.
	if again, err := readStat(pid); err != nil || again.start != st.start {
		return "", fmt.Errorf("fence: pid %d changed while reading its incarnation", pid)
	}
	return in.String(), nil
}

// Liveness answers whether the process life named by (pid, incarnation) is
// alive, proven dead, or unknown (DESIGN §5):
//   - another boot → dead; another pid namespace → unknown;
//   - kill(pid, 0): ESRCH → dead, EPERM → a live process of another user,
//     any other error → unknown;
//   - a zombie (state Z or X) → dead; a different start time or pidfs inode
//     (a reused pid) → dead.
func Liveness(pid int, incarnationStr string) Live {
	rec, ok := parseIncarnation(incarnationStr)
	if !ok || pid <= 0 {
		return LiveUnknown
	}
	boot, err := bootID()
	if err != nil {
		return LiveUnknown
	}
	if rec.boot != boot {
		return Dead
	}
	if rec.pidns != "" && rec.pidns != selfPidNS() {
		return LiveUnknown
	}
	killErr := unix.Kill(pid, 0)
	switch {
	case errors.Is(killErr, unix.ESRCH):
		return Dead
	case killErr != nil && !errors.Is(killErr, unix.EPERM):
		return LiveUnknown
	}
	st, err := readStat(pid)
	if err != nil {
		if errors.Is(unix.Kill(pid, 0), unix.ESRCH) {
			return Dead // it exited between the two looks
		}
		if errors.Is(killErr, unix.EPERM) {
			return Alive // another user's live process we cannot inspect: blocks
		}
		return LiveUnknown
	}
	if st.state == 'Z' || st.state == 'X' || st.start != rec.start {
		return Dead
	}
	if rec.pidfs != "" {
		if cur := pidfsInode(pid); cur != "" && cur != rec.pidfs {
			return Dead
		}
	}
	return Alive
}
