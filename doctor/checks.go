package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"github.com/skc-supervisor/skc-supervisor/home"
)

var versionRE = regexp.MustCompile(`(\d+)\.(\d+)`)

func checkTmux(ctx context.Context, cfg Config) []Result {
	name := cfg.TmuxPath
	if name == "" {
		name = "tmux"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return []Result{{Check: "tmux", Status: Fail,
			Message: fmt.Sprintf("tmux not found (%s): %v", name, err),
			Fix:     "install tmux (Debian: apt-get install tmux), or point SKC_TMUX / --tmux at the binary"}}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "-V").Output()
	v := strings.TrimSpace(string(out))
	if err != nil {
		return []Result{{Check: "tmux", Status: Fail,
			Message: fmt.Sprintf("%s -V failed: %v", path, err),
			Fix:     "check that " + shq(path) + " is a working tmux binary (run it with -V)"}}
	}
	return []Result{tmuxVersion(path, v)}
}

// tmuxVersion judges `tmux -V` output: "tmux 3.3a", "tmux next-3.5", "tmux 3.4".
func tmuxVersion(path, v string) Result {
	m := versionRE.FindStringSubmatch(v)
	floor := fmt.Sprintf("%d.%d", MinTmux[0], MinTmux[1])
	if m == nil {
		return Result{Check: "tmux", Status: Warn,
			Message: fmt.Sprintf("%s reports %q: version unknown (need %s or newer)", path, v, floor),
			Fix:     "use a released tmux " + floor + " or newer, or ignore this for a source build you trust"}
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	if major < MinTmux[0] || (major == MinTmux[0] && minor < MinTmux[1]) {
		return Result{Check: "tmux", Status: Fail,
			Message: fmt.Sprintf("%s is %q, older than %s", path, v, floor),
			Fix:     "install tmux " + floor + " or newer (Debian 12 ships 3.3a) and point SKC_TMUX at it"}
	}
	return Result{Check: "tmux", Status: OK, Message: fmt.Sprintf("%s (%s)", v, path)}
}

func checkTmuxConfig(_ context.Context, cfg Config) []Result {
	if cfg.TmuxConfig == "" {
		return []Result{{Check: "tmux_config", Status: OK, Message: "not set: the supervised server reads tmux's default config"}}
	}
	f, err := os.Open(cfg.TmuxConfig)
	if err == nil {
		var fi os.FileInfo
		if fi, err = f.Stat(); err == nil && fi.IsDir() {
			err = errors.New("it is a directory")
		}
		f.Close()
	}
	if err != nil {
		return []Result{{Check: "tmux_config", Status: Fail,
			Message: fmt.Sprintf("%s cannot be read: %v", cfg.TmuxConfig, err),
			Fix:     "create the file, or unset SKC_TMUX_CONFIG / --tmux-config"}}
	}
	return []Result{{Check: "tmux_config", Status: OK, Message: cfg.TmuxConfig}}
}

func checkSocketPaths(_ context.Context, cfg Config) []Result {
	var out []Result
	for _, name := range []string{home.APISocket, home.TmuxSocket} {
		p := filepath.Join(cfg.RuntimeDir, name)
		if len(p) > home.MaxSocketPath {
			out = append(out, Result{Check: "socket_path", Status: Fail,
				Message: fmt.Sprintf("%s is %d bytes; a unix socket path is at most %d", p, len(p), home.MaxSocketPath),
				Fix:     "set SKC_RUNTIME_DIR (or --runtime-dir) to a shorter directory, e.g. /tmp/skc-" + strconv.Itoa(os.Getuid())})
			continue
		}
		out = append(out, Result{Check: "socket_path", Status: OK,
			Message: fmt.Sprintf("%s (%d of %d bytes)", p, len(p), home.MaxSocketPath)})
	}
	return out
}

func checkDirs(_ context.Context, cfg Config) []Result {
	out := []Result{checkDir("home_dir", cfg.Home)}
	if filepath.Clean(cfg.RuntimeDir) != filepath.Clean(cfg.Home) {
		out = append(out, checkDir("runtime_dir", cfg.RuntimeDir))
	}
	return out
}

// checkDir wants what serve creates: a real directory, ours, mode 0700.
// serve refuses group/other-writable ones; other extra bits are a warning
// because the state inside is private (docs/contract.md: directories 0700).
func checkDir(check, dir string) Result {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Result{Check: check, Status: Skip, Message: dir + " does not exist yet (serve creates it 0700)"}
	case err != nil:
		return Result{Check: check, Status: Fail, Message: fmt.Sprintf("%s: %v", dir, err),
			Fix: "make " + shq(dir) + " accessible to this user"}
	case fi.Mode()&fs.ModeSymlink != 0:
		return Result{Check: check, Status: Fail, Message: dir + " is a symlink; serve refuses it",
			Fix: "point the setting at the real directory (" + shq(resolve(dir)) + ")"}
	case !fi.IsDir():
		return Result{Check: check, Status: Fail, Message: dir + " is not a directory",
			Fix: "move it away, or choose another directory"}
	}
	return ownerAndMode(check, dir, fi, 0o700, "chmod 0700 "+shq(dir))
}

// ownerAndMode checks that fi belongs to us and has no permission bits
// beyond want.
func ownerAndMode(check, path string, fi fs.FileInfo, want fs.FileMode, fix string) Result {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return Result{Check: check, Status: Fail,
			Message: fmt.Sprintf("%s is owned by uid %d, not by us (uid %d)", path, st.Uid, os.Geteuid()),
			Fix:     "use a directory of your own, or chown it: chown " + strconv.Itoa(os.Geteuid()) + " " + shq(path)}
	}
	perm := fi.Mode().Perm()
	switch {
	case perm&0o022 != 0:
		return Result{Check: check, Status: Fail,
			Message: fmt.Sprintf("%s is writable by group or others (mode %04o)", path, perm), Fix: fix}
	case perm&^want != 0:
		return Result{Check: check, Status: Warn,
			Message: fmt.Sprintf("%s has mode %04o; want %04o", path, perm, want), Fix: fix}
	}
	return Result{Check: check, Status: OK, Message: fmt.Sprintf("%s (mode %04o)", path, perm)}
}

func resolve(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

func checkFiles(_ context.Context, cfg Config) []Result {
	var out []Result
	for _, name := range homeFiles(cfg.Home) {
		p := filepath.Join(cfg.Home, name)
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			out = append(out, Result{Check: "file_mode", Status: Skip, Message: p + " does not exist yet"})
		case err != nil:
			out = append(out, Result{Check: "file_mode", Status: Fail, Message: fmt.Sprintf("%s: %v", p, err),
				Fix: "make " + shq(p) + " readable by this user"})
		case !fi.Mode().IsRegular():
			out = append(out, Result{Check: "file_mode", Status: Fail,
				Message: fmt.Sprintf("%s is not a regular file (%s)", p, fi.Mode().Type()),
				Fix:     "stop the daemon and move " + shq(p) + " away; serve recreates what it needs"})
		default:
			out = append(out, ownerAndMode("file_mode", p, fi, 0o600, "chmod 0600 "+shq(p)))
		}
	}
	return out
}

func checkPty(_ context.Context, cfg Config) []Result {
	dir := cfg.PtyDir
	if dir == "" {
		dir = "/proc/sys/kernel/pty"
	}
	nr, err1 := readInt(filepath.Join(dir, "nr"))
	limit, err2 := readInt(filepath.Join(dir, "max"))
	if err := errors.Join(err1, err2); err != nil || limit <= 0 {
		return []Result{{Check: "pty", Status: Skip, Message: fmt.Sprintf("pty counters unavailable: %v", err)}}
	}
	msg := fmt.Sprintf("%d of %d ptys in use (%d%%); each session pane holds one", nr, limit, nr*100/limit)
	if nr*100 > limit*80 {
		return []Result{{Check: "pty", Status: Warn, Message: msg,
			Fix: "end unused sessions, or raise the limit as root: sysctl -w kernel.pty.max=" + strconv.Itoa(limit*2)}}
	}
	return []Result{{Check: "pty", Status: OK, Message: msg}}
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
