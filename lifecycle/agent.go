package lifecycle

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// agentExit is what the pane helper records when it cannot become its agent:
// the postmortem of an agent that never started.
type agentExit struct {
	Status  int // 127 when argv[0] or the cwd is missing, 126 when it cannot be executed, 129 when its terminal hung up first
	Started time.Time
	Ended   time.Time
	Err     error // why the agent could not be started
}

// execAgent replaces the pane helper with the agent: it changes to cwd,
// resolves argv[0] on the PATH of the agent's environment env and execs it in
// place, so the pane's process is the agent itself — its pid, its session,
// its process group (the terminal's foreground group, so an attached human's
// Ctrl-C reaches it), its cgroup entered by the helper — and no process of
// ours stays in the session. tmux then holds the agent's exit (the daemon sets
// remain-on-exit on every managed window before publication): pane_dead_status
// or pane_dead_signal, which end detection reads. execAgent returns only when
// the exec failed, with what the postmortem records.
//
// Signal handlers the helper installed (the wake) are reset by the kernel at
// exec; the helper ignores no signal, so the agent starts with the default
// dispositions, as it would from a shell.
func execAgent(argv, env []string, cwd string) agentExit {
	// env is agentEnv's: the request's PATH in it is the one argv[0] is
	// resolved on.
	ex := agentExit{Started: time.Now()}
	err := chdirAgent(cwd)
	var path string
	if err == nil {
		path, err = agentPath(argv, env)
	}
	if err == nil {
		hupDefault()
	}
	if err == nil && ttyHungUp(0) {
		err = dieOfHangup()
	}
	if err == nil {
		agentNofile(os.Getenv(tmuxctl.AgentNofileEnv))
	}
	if err == nil {
		err = syscall.Exec(path, argv, env)
	}
	ex.Ended, ex.Err, ex.Status = time.Now(), err, execStatus(err)
	return ex
}

// agentNofile gives the agent the open-files soft limit the tmux server
// was started with (v, tmuxctl.AgentNofileEnv: the server's own was raised
// for its panes' ptys, and a pane inherits it). Set explicitly, it is also
// what Go's exec passes on, instead of the limit the helper started with.
// A value that does not parse, or above the hard limit, changes nothing.
func agentNofile(v string) {
	n, err := strconv.ParseUint(v, 10, 64)
	var rl syscall.Rlimit
	if err != nil || n == 0 || syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) != nil || n > rl.Max {
		return
	}
	// syscall's, not x/sys's: it also tells Go's exec not to put back the
	// limit the helper started with.
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: rl.Max})
}

// errHungUp is a failed start whose terminal hung up first (a helper that
// ignores SIGHUP by inheritance, so raising it did not end it): 129, a
// shell's status for a death by SIGHUP.
var errHungUp = errors.New("the terminal hung up before the agent started")

// ttyHungUp reports whether fd is a terminal that was hung up: its tmux server
// died (or closed the pane) and the kernel swapped its file operations for
// ones that fail with EIO. The swap happens before the hangup's SIGHUP is
// sent, so a hangup whose signal reached the Go runtime's handler before
// hupDefault (a handler an exec can cut short) shows here; one after it is
// the kernel's to act on. A stdin that is no terminal (ENOTTY) is not hung up.
func ttyHungUp(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return errors.Is(err, unix.EIO)
}

// kSigaction is the kernel's struct sigaction as rt_sigaction(2) takes it on
// the architectures this runs on (amd64, arm64): handler, flags, restorer,
// mask. All zero is SIG_DFL with no flags.
type kSigaction struct{ handler, flags, restorer, mask uint64 }

// sigIgn is SIG_IGN's handler value.
const sigIgn = 1

// hupDefault gives SIGHUP the kernel's own default action, behind the Go
// runtime's back, for the last steps before the exec: the runtime's handler
// ends the process by SIGHUP too, but from a thread of its own, and an exec
// on another thread destroys that thread mid-way, so a hangup in the exec's
// window was lost and the agent outlived its server beside a dead terminal
// (a rare CI flake, and a real agent running with no pane). With SIG_DFL the
// kernel ends every thread at the signal's sending, before or after the
// exec (a default disposition survives it), so no window is left; a hangup
// from before this call is the terminal's EIO, which ttyHungUp reads after
// it. A SIGHUP ignored by inheritance (nohup) stays ignored, as a shell
// would leave it for its command.
func hupDefault() {
	var old kSigaction
	_, _, e := syscall.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(unix.SIGHUP), 0,
		uintptr(unsafe.Pointer(&old)), unsafe.Sizeof(old.mask), 0, 0)
	if e != 0 || old.handler == sigIgn {
		return
	}
	var dfl kSigaction
	_, _, _ = syscall.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(unix.SIGHUP),
		uintptr(unsafe.Pointer(&dfl)), 0, unsafe.Sizeof(dfl.mask), 0, 0)
}

// dieOfHangup ends the helper as its agent would have ended, by the hangup's
// SIGHUP (the helper never asks to be told of it, so the runtime's default
// ends the process by it), instead of starting an agent beside a dead
// terminal. It returns only if SIGHUP was ignored when the helper started.
func dieOfHangup() error {
	_ = syscall.Kill(os.Getpid(), syscall.SIGHUP)
	time.Sleep(time.Second) // the signal's delivery to this process; it ends here
	return errHungUp
}

// chdirAgent changes to the agent's cwd ("" keeps the pane's).
func chdirAgent(cwd string) error {
	if cwd == "" {
		return nil
	}
	return os.Chdir(cwd)
}

// agentPath resolves argv[0] after the chdir, as a shell would: a name with a
// slash as it is (relative to the cwd), any other on the agent's own PATH.
func agentPath(argv, env []string) (string, error) {
	if len(argv) == 0 || argv[0] == "" {
		return "", exec.ErrNotFound
	}
	if strings.Contains(argv[0], "/") {
		p := argv[0]
		if !filepath.IsAbs(p) {
			wd, err := os.Getwd()
			if err != nil {
				return "", err
			}
			p = filepath.Join(wd, p)
		}
		return p, nil
	}
	return lookPath(argv[0], env)
}

// execStatus is a shell's status for a command that could not start: 127 when
// it (or its cwd) does not exist, 126 when it exists but cannot be executed.
func execStatus(err error) int {
	if errors.Is(err, errHungUp) {
		return 128 + int(syscall.SIGHUP)
	}
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return 127
	}
	return 126
}

// agentEnv is the environment the agent gets: the pane's own (inherited, from
// tmux), then PWD saying the cwd it starts in, then the request's env; one
// entry per name, the last one winning (execve would pass duplicates on, and
// most programs would read the first), so the request's PWD, if it sets one,
// wins over ours and ours over the pane's stale one.
func agentEnv(inherited, spec []string, cwd string) []string {
	env := make([]string, 0, len(inherited)+len(spec)+1)
	for _, kv := range inherited {
		if _, ok := cutEnv(kv, tmuxctl.AgentNofileEnv); !ok { // ours, for the helper (agentNofile)
			env = append(env, kv)
		}
	}
	if cwd != "" {
		env = append(env, "PWD="+cwd)
	}
	env = append(env, spec...)
	seen := make(map[string]int, len(env))
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := seen[k]; ok {
			out[i] = kv
			continue
		}
		seen[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// lastEnv returns the last value of key in env.
func lastEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := cutEnv(env[i], key); ok {
			return v, true
		}
	}
	return "", false
}

// lookPath resolves name against the PATH found in env (the agent's environment),
// falling back to the helper's own PATH when env has none.
func lookPath(name string, env []string) (string, error) {
	if v, ok := lastEnv(env, "PATH"); ok {
		old := os.Getenv("PATH")
		_ = os.Setenv("PATH", v) // the helper is single-purpose; no other goroutine reads PATH
		p, err := exec.LookPath(name)
		_ = os.Setenv("PATH", old)
		return p, err
	}
	return exec.LookPath(name)
}

func cutEnv(kv, key string) (string, bool) {
	if len(kv) > len(key) && kv[:len(key)] == key && kv[len(key)] == '=' {
		return kv[len(key)+1:], true
	}
	return "", false
}
