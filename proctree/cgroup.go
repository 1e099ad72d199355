package proctree

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Where a cgroup v2 hierarchy may be mounted: pure v2 hosts mount it at
// /sys/fs/cgroup, hybrid ones (systemd's "unified" layout) at
// /sys/fs/cgroup/unified. The mount is recognised by its filesystem magic,
// never by its path alone.
var cgroupMounts = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}

// DetectCgroupBase finds a cgroup v2 directory in which this process may make
// one cgroup per generation, and makes it: <mount>/<our own cgroup>/skc-<8 hex
// of key>. It is our own cgroup's child because that is the subtree a systemd
// user is delegated (and the only one a non-root user can write), and the
// pane processes, forked by a tmux server this daemon started, come from the
// same subtree, so a helper may move itself into it (moving needs write access
// to the common ancestor's cgroup.procs). The answer is "" with the reason when
// there is no usable hierarchy, it is not writable, or the kernel has no
// cgroup.kill (before 5.14): callers then fall back to the pane's session.
// Writability is tried, never assumed.
func DetectCgroupBase(key string) (string, error) {
	base, err := BaseFor(key)
	if err != nil {
		return "", err
	}
	if err := os.Mkdir(base, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("proctree: cgroup %s: %w", base, err)
	}
	// A probe child proves we can make the per-generation cgroups and that
	// they have cgroup.kill and cgroup.events.
	probe := filepath.Join(base, "probe-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil {
		return "", fmt.Errorf("proctree: cgroup %s: %w", probe, err)
	}
	defer unix.Rmdir(probe)
	for _, f := range []string{"cgroup.kill", "cgroup.events", "cgroup.procs"} {
		if _, err := os.Stat(filepath.Join(probe, f)); err != nil {
			return "", fmt.Errorf("proctree: cgroup without %s (kernel before 5.14?): %w", f, err)
		}
	}
	return base, nil
}

// BaseFor is where DetectCgroupBase puts the cgroups of key's daemon, without
// making anything: <mount>/<our own cgroup>/skc-<8 hex of key>.
func BaseFor(key string) (string, error) {
	mnt, err := v2Mount()
	if err != nil {
		return "", err
	}
	rel, err := ownCgroup()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(mnt, rel, "skc-"+hex.EncodeToString(sum[:4])), nil
}

// RemoveBaseTree removes base's empty generation cgroups, then base itself
// when that left it empty (best effort: for tests and tidy uninstalls; a
// cgroup that still holds a process stays).
func RemoveBaseTree(base string) {
	ents, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() {
			_ = unix.Rmdir(filepath.Join(base, e.Name()))
		}
	}
	_ = unix.Rmdir(base)
}

// v2Mount returns the first candidate that is a cgroup2 filesystem.
func v2Mount() (string, error) {
	for _, m := range cgroupMounts {
		var st unix.Statfs_t
		if err := unix.Statfs(m, &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return m, nil
		}
	}
	return "", errors.New("proctree: no cgroup v2 hierarchy mounted")
}

// ownCgroup returns this process's cgroup v2 path (the "0::" line of
// /proc/self/cgroup).
func ownCgroup() (string, error) {
	return cgroupOf(os.Getpid())
}

func cgroupOf(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return rest, nil
		}
	}
	return "", errors.New("proctree: no cgroup v2 membership")
}

// GenerationCgroup is the cgroup of one generation under base (a reservation
// id is 32 hex characters, safe as a directory name).
func GenerationCgroup(base, resID string) string {
	if base == "" {
		return ""
	}
	return filepath.Join(base, "gen-"+resID)
}

// EnterCgroup makes dir (EEXIST is fine) and moves the calling process into
// it, so every process it starts afterwards is born inside. On failure the
// directory is removed again (when empty), so an absent or empty cgroup never
// claims to hold a process it does not hold.
func EnterCgroup(dir string) error {
	return PlaceInCgroup(dir, 0)
}

// PlaceInCgroup is EnterCgroup for the process pid (0: the caller): the
// daemon places a claimed warm-pool standby in its generation's cgroup before
// it hands the standby its reservation, so the agent the standby execs is
// born inside. The kernel's rules for the move are the writer's credentials
// against the cgroups' files, the same whichever of the two processes (same
// user) writes.
func PlaceInCgroup(dir string, pid int) error {
	if dir == "" {
		return errors.New("proctree: no cgroup")
	}
	if pid < 0 {
		return fmt.Errorf("proctree: invalid pid %d", pid)
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := writeExisting(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
		_ = unix.Rmdir(dir)
		return err
	}
	return nil
}

// InCgroup reports whether pid is in the cgroup dir (its /proc/PID/cgroup
// says so): the daemon checks a claimed standby is where it placed it before
// it records that cgroup as holding the generation.
func InCgroup(pid int, dir string) bool {
	return inCgroup(pid, dir)
}

// cgroupState reads cgroup.events: populated or not. A cgroup that does not
// exist holds nothing (it is removed only once empty: rmdir of a populated
// cgroup fails with EBUSY). Any other failure to read is unknown — never
// "empty" (containerd's isCgroupEmpty counts an unreadable file as empty).
func cgroupState(dir string) (populated bool, exists bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if errors.Is(err, fs.ErrNotExist) {
		return false, false, nil
	}
	if err != nil {
		return false, true, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			return v != "0", true, nil
		}
	}
	return false, true, fmt.Errorf("proctree: %s/cgroup.events has no populated line", dir)
}

// cgroupPIDs lists the processes in dir (not in its children: we make none).
func cgroupPIDs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids, nil
}

// inCgroup reports whether pid's cgroup v2 path is dir's (relative to mnt).
func inCgroup(pid int, dir string) bool {
	rel, err := cgroupOf(pid)
	if err != nil {
		return false
	}
	return strings.HasSuffix(dir, rel) && rel != "/"
}

// killCgroup writes cgroup.kill: SIGKILL to every process in it and its
// descendants, atomically with respect to forks (kernel 5.14+).
func killCgroup(dir string) error {
	err := writeExisting(filepath.Join(dir, "cgroup.kill"), "1")
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(dir); errors.Is(serr, fs.ErrNotExist) {
			return nil // the cgroup is gone: nothing to kill
		}
	}
	return err
}

// writeExisting writes s to a cgroup interface file, which must exist: never
// create a plain file where a cgroup was expected.
func writeExisting(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// RemoveCgroup removes a generation's cgroup once it is empty; a cgroup that is
// already gone is fine.
func RemoveCgroup(dir string) error {
	if dir == "" {
		return nil
	}
	err := unix.Rmdir(dir)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// RemoveBase removes the daemon's cgroup base when it holds no generation's
// cgroup any more (best effort, at shutdown).
func RemoveBase(base string) {
	if base != "" {
		_ = unix.Rmdir(base)
	}
}

// ProbeCgroups answers, without making anything, whether this process could hold
// generations in cgroups (what DetectCgroupBase would find): the cgroup v2
// directory to use and, when none, why not. For `doctor`, which only reads.
func ProbeCgroups() (string, error) {
	mnt, err := v2Mount()
	if err != nil {
		return "", err
	}
	rel, err := ownCgroup()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(mnt, rel)
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return "", fmt.Errorf("proctree: %s is not writable: %w", dir, err)
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err == nil && !kernelAtLeast(unix.ByteSliceToString(uts.Release[:]), 5, 14) {
		return "", fmt.Errorf("proctree: kernel %s has no cgroup.kill (5.14+)", unix.ByteSliceToString(uts.Release[:]))
	}
	return dir, nil
}

// kernelAtLeast compares a release string ("6.1.0-18-amd64") with maj.min.
func kernelAtLeast(release string, maj, min int) bool {
	var a, b int
	if _, err := fmt.Sscanf(release, "%d.%d", &a, &b); err != nil {
		return true // unknown format: let the daemon's own probe decide
	}
	return a > maj || (a == maj && b >= min)
}
