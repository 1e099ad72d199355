package lifecycle

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// agentExit is what the pane helper learned about its agent: the facts a postmortem
// records.
type agentExit struct {
	PID     int    // the agent's pid, 0 when it never started
	Status  *int   // exit status; nil when killed by a signal
	Signal  string // e.g. "SIGKILL"; "" when it exited
	Code    int    // the helper's own exit code: status, 128+signal, or 127
	Started time.Time
	Ended   time.Time
	Rusage  *syscall.Rusage
	Err     error // why the agent could not be started, if it could not
}

// forwarded are the signals the helper passes on to its agent. Signals a terminal
// generates (Ctrl-C, Ctrl-\, resize) go to the foreground process group, which is the
// agent's own group, so the helper only sees those sent to it explicitly and
// forwarding them never doubles one.
var forwarded = []os.Signal{
	syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGWINCH,
	syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
}

// runAgent starts argv in cwd with env, as the helper's child in the same pty, and
// waits for it. When stdin is a terminal the agent gets its own process group and is
// made the terminal's foreground group, so an attached human's Ctrl-C reaches the
// agent alone (the helper must survive to write the postmortem).
func runAgent(argv, env []string, cwd string) agentExit {
	ex := agentExit{Started: time.Now()}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	cmd, err := agentCommand(argv, env, cwd)
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		ex.Ended = time.Now()
		ex.Err = err
		st := 127
		if !errors.Is(err, exec.ErrNotFound) && !errors.Is(err, os.ErrNotExist) {
			st = 126
		}
		ex.Status, ex.Code = &st, st
		return ex
	}
	ex.PID = cmd.Process.Pid
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	werr := cmd.Wait()
	close(done)
	ex.Ended = time.Now()
	fillExit(&ex, cmd.ProcessState, werr)
	return ex
}

// agentCommand builds the agent's exec.Cmd. argv[0] is resolved on the agent's own
// PATH (from env) so a request's PATH applies, as a shell would do it.
func agentCommand(argv, env []string, cwd string) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, exec.ErrNotFound
	}
	path, err := lookPath(argv[0], env)
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Dir: cwd,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	if isTerminal(0) {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Foreground: true, Ctty: 0}
	}
	return cmd, nil
}

func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// lookPath resolves name against the PATH found in env (the agent's environment),
// falling back to the helper's own PATH when env has none.
func lookPath(name string, env []string) (string, error) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := cutEnv(env[i], "PATH"); ok {
			old := os.Getenv("PATH")
			_ = os.Setenv("PATH", v) // the helper is single-purpose; no other goroutine reads PATH
			p, err := exec.LookPath(name)
			_ = os.Setenv("PATH", old)
			return p, err
		}
	}
	return exec.LookPath(name)
}

func cutEnv(kv, key string) (string, bool) {
	if len(kv) > len(key) && kv[:len(key)] == key && kv[len(key)] == '=' {
		return kv[len(key)+1:], true
	}
	return "", false
}

func fillExit(ex *agentExit, ps *os.ProcessState, werr error) {
	if ps == nil {
		st := 126
		ex.Status, ex.Code, ex.Err = &st, st, werr
		return
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		ex.Rusage = ru
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		ex.Signal = unix.SignalName(ws.Signal())
		ex.Code = 128 + int(ws.Signal())
		return
	}
	st := ps.ExitCode()
	ex.Status, ex.Code = &st, st
}
