package tmuxctl

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
)

// proc is the `tmux -C` client process on plain pipes.
type proc struct {
	cmd     *exec.Cmd
	stdin   *os.File // our write end of the client's stdin
	stdout  *os.File // our read end of the client's stdout
	stderr  *limitedBuffer
	exited  chan struct{} // closed after Wait returned
	waitErr error
}

// controlArgs is the argv of the control client (docs/tmux-facts.md §4, §9, §11): create
// or attach the dedicated control session in one step, with no %output and
// no influence on window sizes, running a harmless long-lived pane command.
func controlArgs(cfg *Config) []string {
	args := []string{"-S", cfg.Socket}
	if cfg.ConfigFile != "" {
		args = append(args, "-f", cfg.ConfigFile)
	}
	return append(args, "-u", "-C", "new-session", "-A", "-s", cfg.ControlSession,
		"-x", "80", "-y", "24", "-f", "no-output,ignore-size", "cat")
}

// clientEnv is our environment without TMUX/TMUX_PANE (a daemon started from
// inside tmux must not look nested to its own server), plus cfg.Env.
// ServerEnviron is the environment a tmux server of ours is started with
// (clientEnv: without TMUX, TMUX_PANE and PGPASSWORD), for a server started
// by another way than a control client (a systemd scope).
func ServerEnviron() []string { return clientEnv(nil) }

func clientEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		// PGPASSWORD is the daemon's alone (a fleet's password): a server
		// started by this client would hand it to every agent.
		if strings.HasPrefix(kv, "TMUX=") || strings.HasPrefix(kv, "TMUX_PANE=") || strings.HasPrefix(kv, "PGPASSWORD=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// startProc starts a control client (argv: controlArgs or followArgs) in its own process group with
// Pdeathsig SIGKILL, so that it dies with the supervisor (a live client
// nobody reads wedges kill-server, docs/tmux-facts.md §4).
//
// Linux delivers Pdeathsig when the *thread* that forked the child exits,
// not the process. Go may retire OS threads, so the fork happens on a
// goroutine locked to its OS thread that stays locked, blocked in Wait, for
// the child's whole life: that thread cannot exit before the child does
// unless the whole process dies, which is exactly when the signal must fire.
func startProc(cfg *Config, argv []string) (*proc, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	p := &proc{stdin: inW, stdout: outR, stderr: &limitedBuffer{max: 64 << 10},
		exited: make(chan struct{})}
	cmd := exec.Command(cfg.Tmux, argv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, p.stderr
	cmd.Env = clientEnv(cfg.Env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p.cmd = cmd
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			runtime.UnlockOSThread()
			started <- err
			return
		}
		started <- nil
		p.waitErr = cmd.Wait()
		runtime.UnlockOSThread()
		close(p.exited)
	}()
	err = <-started
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("tmuxctl: start %s: %w", cfg.Tmux, err)
	}
	return p, nil
}

// pid is the client's process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// kill sends SIGKILL to the client by pid (never by name).
func (p *proc) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
}

// limitedBuffer keeps the first max bytes of the client's stderr (startup
// errors such as "error connecting to …" or "tcgetattr failed").
type limitedBuffer struct {
	mu  sync.Mutex
	b   []byte
	max int
}

// Write keeps what fits and reports everything written, so the client never
// blocks or fails on stderr.
func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.max - len(l.b); room > 0 {
		if len(p) < room {
			room = len(p)
		}
		l.b = append(l.b, p[:room]...)
	}
	return len(p), nil
}

// String is the kept stderr text, trimmed.
func (l *limitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.TrimSpace(string(l.b))
}
