// Package scope starts the supervised tmux server in its own transient systemd
// scope when the daemon runs as a systemd service, so the server and every
// agent pane live outside the daemon's cgroup.
//
// Why: with the unit's KillMode=process, stopping or restarting the unit kills
// only the daemon and the tmux server survives — but it would still live in the
// unit's cgroup, be counted in its TasksMax/MemoryMax, appear under it in
// `systemctl status`, and be killed by a later `systemctl kill` or a
// KillMode change. `systemd-run --scope` moves the tmux client into a new
// scope unit before exec'ing it; the server it forks (docs/tmux-facts.md §4: the
// `tmux` client forks the server, which daemonises) is born there.
//
// A scope only moves cgroups: process attributes such as no_new_privs,
// namespaces, rlimits and the umask are still inherited from the daemon, which
// is why the unit in contrib/systemd adds no sandboxing (see its comments).
//
// Wiring (tmuxctl owner / lead): before the first Dial, when the server is not
// running (`tmux -S SOCK display -p '#{pid}'` fails), call Start with the same
// socket, config and control-session name the control client uses; then Dial
// as usual (`new-session -A` attaches to the session Start created). Start
// falls back to the plain command when the scope cannot be created, so its
// error is worth a log line but never fatal.
package scope

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// UnitPrefix starts the name of every scope this package creates.
const UnitPrefix = "skc-tmux-"

// Runner wraps commands in `systemd-run --scope`. The zero value is disabled:
// Wrap returns the command unchanged.
type Runner struct {
	// SystemdRun is the absolute path of systemd-run; "" disables the Runner.
	SystemdRun string
	// User selects the per-user service manager (--user); false means the
	// system manager, which only root may ask for a scope.
	User bool
}

// Env is what Detect looks at; tests fill it, production uses HostEnv.
type Env struct {
	Getenv   func(string) string
	LookPath func(string) (string, error)
	Cgroup   func() ([]byte, error) // contents of /proc/self/cgroup
	Euid     int
}

// HostEnv is the real process environment.
func HostEnv() Env {
	return Env{
		Getenv:   os.Getenv,
		LookPath: exec.LookPath,
		Cgroup:   func() ([]byte, error) { return os.ReadFile("/proc/self/cgroup") },
		Euid:     os.Geteuid(),
	}
}

// Detect returns an enabled Runner when this process is a systemd service
// (INVOCATION_ID is set by systemd for every unit it starts) and systemd-run is
// on PATH; the manager (user or system) is read from our own cgroup path.
// Call it before anything scrubs the service's environment.
func Detect(e Env) (Runner, bool) {
	if e.Getenv("INVOCATION_ID") == "" {
		return Runner{}, false
	}
	bin, err := e.LookPath("systemd-run")
	if err != nil {
		return Runner{}, false
	}
	cg, err := e.Cgroup()
	if err != nil {
		return Runner{}, false
	}
	if underUserManager(cg) {
		return Runner{SystemdRun: bin, User: true}, true
	}
	if e.Euid == 0 {
		return Runner{SystemdRun: bin}, true
	}
	// A system service running as a user cannot create system scopes, and
	// its user manager (if any) is not reachable without XDG_RUNTIME_DIR.
	return Runner{}, false
}

// underUserManager reports whether the unified-hierarchy cgroup path ("0::…")
// passes through a user manager's "user@UID.service".
func underUserManager(cgroup []byte) bool {
	sc := bufio.NewScanner(bytes.NewReader(cgroup))
	for sc.Scan() {
		path, ok := strings.CutPrefix(sc.Text(), "0::")
		if !ok {
			continue
		}
		for _, part := range strings.Split(path, "/") {
			if strings.HasPrefix(part, "user@") && strings.HasSuffix(part, ".service") {
				return true
			}
		}
	}
	return false
}

// Enabled reports whether Wrap adds systemd-run.
func (r Runner) Enabled() bool { return r.SystemdRun != "" }

// UnitName is the scope unit for the tmux server on socket: one name per
// socket path, so two supervisor instances (two homes) never collide, and a
// human can find it with `systemctl --user status 'skc-tmux-*'`.
func UnitName(socket string) string {
	sum := sha256.Sum256([]byte(socket))
	return UnitPrefix + hex.EncodeToString(sum[:8]) + ".scope"
}

// Wrap returns argv prefixed so that it runs in the transient scope unit; argv
// itself unchanged when the Runner is disabled. Every element is a separate
// argument: nothing is interpreted by a shell.
func (r Runner) Wrap(unit, description string, argv []string) []string {
	if !r.Enabled() {
		return append([]string(nil), argv...)
	}
	out := []string{r.SystemdRun}
	if r.User {
		out = append(out, "--user")
	}
	// --collect: unload the scope even if it ends "failed" (a SIGKILLed
	// server), so the same name can be used for the next server life.
	out = append(out, "--scope", "--quiet", "--collect",
		"--unit="+unit, "--description="+description, "--")
	return append(out, argv...)
}

// Bootstrap is the tmux command that starts the supervised server with the
// control session already in it.
type Bootstrap struct {
	Tmux    string   // binary; "" → "tmux"
	Socket  string   // -S, required
	Config  string   // -f; "" → tmux's default
	Session string   // control session name, e.g. "skc-control"
	Args    []string // more new-session arguments after -s SESSION (size, command)
}

// Argv is the plain command: tmux -S SOCK [-f CONF] new-session -d -s SESSION ARGS…
func (b Bootstrap) Argv() []string {
	tmux := b.Tmux
	if tmux == "" {
		tmux = "tmux"
	}
	argv := []string{tmux, "-S", b.Socket}
	if b.Config != "" {
		argv = append(argv, "-f", b.Config)
	}
	argv = append(argv, "new-session", "-d", "-s", b.Session)
	return append(argv, b.Args...)
}

// Command is the command that starts the server: Argv, wrapped in the
// socket's scope when r is enabled.
func (r Runner) Command(b Bootstrap) []string {
	return r.Wrap(UnitName(b.Socket), "skc-supervisor tmux server "+b.Socket, b.Argv())
}

// ControlBootstrap is the Bootstrap matching tmuxctl's control client
// (tmuxctl/doc.go): the same session name, size and harmless pane command, so
// the client's `new-session -A` attaches to it as if it had created it.
func ControlBootstrap(tmux, socket, config, session string) Bootstrap {
	return Bootstrap{Tmux: tmux, Socket: socket, Config: config, Session: session,
		Args: []string{"-x", "80", "-y", "24", "cat"}}
}

// Start runs r.Command(b) and waits for it (the tmux client returns once the
// server is up and the session exists). When the scoped command fails — no
// user bus, an old systemd, a name still in use — it runs the plain command,
// so the server starts either way; scoped says which one worked. env is the
// environment for tmux (nil → this process's), without TMUX and TMUX_PANE as
// tmuxctl does for its client; the server copies it into every pane.
func Start(ctx context.Context, r Runner, b Bootstrap, env []string) (scoped bool, err error) {
	if b.Socket == "" || b.Session == "" {
		return false, errors.New("scope: bootstrap needs a socket and a session name")
	}
	env = serverEnv(env)
	var scopeErr error
	if r.Enabled() {
		if scopeErr = run(ctx, r.Command(b), env); scopeErr == nil {
			return true, nil
		}
	}
	if err := run(ctx, b.Argv(), env); err != nil {
		return false, errors.Join(scopeErr, err)
	}
	return false, scopeErr
}

// serverEnv drops TMUX and TMUX_PANE: a daemon started from inside tmux must
// not hand its own server a "nested" environment.
func serverEnv(env []string) []string {
	if env == nil {
		env = os.Environ()
	}
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if strings.HasPrefix(kv, "TMUX=") || strings.HasPrefix(kv, "TMUX_PANE=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func run(ctx context.Context, argv []string, env []string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("scope: %s: %w: %s", argv[0], err, strings.TrimSpace(string(out)))
	}
	return nil
}
