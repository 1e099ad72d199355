// Package home resolves where one supervisor instance keeps its state
// (SKC_HOME) and its sockets (the runtime directory), checks that nobody else
// can write there, and holds the single-instance lock.
//
// The rules are docs/contract.md's "Paths and environment" table: a flag wins over
// its environment variable, which wins over the default. Directories are
// created 0700; an existing directory that is a symlink, owned by another uid,
// or writable by group or others is refused, because whoever can write there
// can replace our sockets or our fence database.
package home

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Environment variable names (docs/contract.md).
const (
	EnvHome       = "SKC_HOME"
	EnvRuntimeDir = "SKC_RUNTIME_DIR"
	EnvTmux       = "SKC_TMUX"
	EnvTmuxConfig = "SKC_TMUX_CONFIG"
	EnvFence      = "SKC_FENCE"
)

// FenceSQLite is the SKC_FENCE value of the embedded fence, $SKC_HOME/fence.sqlite
// (the default); any other value is a PostgreSQL URL (postgres:// or postgresql://).
const FenceSQLite = "sqlite"

// File names inside the home and runtime directories.
const (
	FenceFile = "fence.sqlite"
	// FenceConfFile records, for the processes a daemon starts (the pane
	// helpers, which get only --home), which fence the daemon uses and as
	// which host. Absent: the embedded fence.
	FenceConfFile = "fence.conf"
	VerdictsFile  = "verdicts.jsonl"
	LockFile      = "supervisor.lock"
	APISocket     = "api.sock"
	TmuxSocket    = "tmux.sock"
)

// MaxSocketPath is the longest unix socket path the kernel accepts: sun_path
// is 108 bytes including the terminating NUL.
const MaxSocketPath = 107

// Overrides are the command-line flags --home, --runtime-dir, --tmux,
// --tmux-config and serve's --fence; an empty field means "not given".
type Overrides struct {
	Home       string
	RuntimeDir string
	Tmux       string
	TmuxConfig string
	Fence      string
}

// Paths is a fully resolved instance layout. Every path is absolute and clean.
type Paths struct {
	Home       string // SKC_HOME
	RuntimeDir string // sockets live here
	Tmux       string // tmux binary ("tmux" means: look it up on PATH)
	TmuxConfig string // -f for the supervised server; "" is tmux's default
	FenceURL   string // FenceSQLite, or a PostgreSQL URL (the fleet's fence)
}

// Env looks up one environment variable; os.Getenv in production, a map in
// tests.
type Env func(key string) string

// Resolve applies docs/contract.md's precedence (flag, then environment, then
// default). Relative paths are resolved against the working directory, as the
// CLI promises.
func Resolve(o Overrides, env Env) (Paths, error) {
	if env == nil {
		env = os.Getenv
	}
	var p Paths
	var err error
	homeSet := o.Home != "" || env(EnvHome) != ""
	if p.Home, err = pick(o.Home, env(EnvHome), defaultHome(env)); err != nil {
		return Paths{}, fieldError("home", err)
	}
	runtimeDefault := func() (string, error) {
		if homeSet {
			return p.Home, nil
		}
		return defaultRuntime(env)
	}
	if p.RuntimeDir, err = pick(o.RuntimeDir, env(EnvRuntimeDir), runtimeDefault); err != nil {
		return Paths{}, fieldError("runtime_dir", err)
	}
	p.Tmux = firstNonEmpty(o.Tmux, env(EnvTmux), "tmux")
	if p.TmuxConfig = firstNonEmpty(o.TmuxConfig, env(EnvTmuxConfig)); p.TmuxConfig != "" {
		if p.TmuxConfig, err = filepath.Abs(p.TmuxConfig); err != nil {
			return Paths{}, fieldError("tmux_config", err)
		}
	}
	for _, f := range []struct{ field, path string }{{"home", p.Home}, {"runtime_dir", p.RuntimeDir}, {"tmux_config", p.TmuxConfig}} {
		if strings.ContainsAny(f.path, "\x00\r\n") {
			// Refused before anything is made: such a path would be
			// created, then refused by a later check without its name.
			return Paths{}, fieldError(f.field, fmt.Errorf("%s %q contains NUL, CR or LF", f.field, f.path))
		}
	}
	p.FenceURL = firstNonEmpty(o.Fence, env(EnvFence), FenceSQLite)
	if err := checkFenceURL(p.FenceURL); err != nil {
		return Paths{}, fieldError("fence", err)
	}
	return p, nil
}

// checkFenceURL accepts "sqlite" or a PostgreSQL URL. The password of a URL
// belongs in PGPASSWORD or PGPASSFILE (libpq's), never in argv or the
// environment of every process: the PostgreSQL engine refuses one.
func checkFenceURL(u string) error {
	if u == FenceSQLite || strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		return nil
	}
	// The value is not repeated: a libpq key=value string given here may
	// carry a password, and this refusal lands in logs (found outside-in).
	return fmt.Errorf("the fence is neither %q nor a postgres:// or postgresql:// URL (a libpq key=value string is not taken; the value given is not repeated here, as it may hold a password)", FenceSQLite)
}

// FenceConf is the path of FenceConfFile in the home.
func (p Paths) FenceConf() string { return filepath.Join(p.Home, FenceConfFile) }

func pick(flag, envValue string, def func() (string, error)) (string, error) {
	v := firstNonEmpty(flag, envValue)
	if v == "" {
		d, err := def()
		if err != nil {
			return "", err
		}
		v = d
	}
	return filepath.Abs(v)
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// defaultHome is $XDG_STATE_HOME/skc, else ~/.local/state/skc. A relative
// XDG_STATE_HOME is ignored, as the XDG base directory spec requires; so is a
// relative or missing HOME (a cron job, a service unit): ~ is then the user's
// home from the password database. A relative HOME taken as written would put
// the fence — the one-agent-per-identity guarantee — wherever the daemon was
// started from.
func defaultHome(env Env) func() (string, error) {
	return func() (string, error) {
		if x := env("XDG_STATE_HOME"); filepath.IsAbs(x) {
			return filepath.Join(x, "skc"), nil
		}
		h := env("HOME")
		if !filepath.IsAbs(h) {
			u, err := user.Current()
			if err != nil || !filepath.IsAbs(u.HomeDir) {
				return "", fmt.Errorf("no home directory for the default SKC_HOME: $HOME is %s and the password database has none (%v); set SKC_HOME", homeState(h), err)
			}
			h = u.HomeDir
		}
		return filepath.Join(h, ".local", "state", "skc"), nil
	}
}

// homeState says what is wrong with $HOME h, for defaultHome's error.
func homeState(h string) string {
	if h == "" {
		return "not set"
	}
	return fmt.Sprintf("relative (%q)", h)
}

func defaultRuntime(env Env) (string, error) {
	if x := env("XDG_RUNTIME_DIR"); filepath.IsAbs(x) {
		return filepath.Join(x, "skc"), nil
	}
	return filepath.Join(os.TempDir(), "skc-"+strconv.Itoa(os.Getuid())), nil
}

// Fence is the path of the fence database.
func (p Paths) Fence() string { return filepath.Join(p.Home, FenceFile) }

// Verdicts is the path of the verdict JSON-lines file.
func (p Paths) Verdicts() string { return filepath.Join(p.Home, VerdictsFile) }

// Lock is the path of the single-instance lock file.
func (p Paths) Lock() string { return filepath.Join(p.Home, LockFile) }

// APISocket is the path of the API socket.
func (p Paths) APISocket() string { return filepath.Join(p.RuntimeDir, APISocket) }

// TmuxSocket is the path of the supervised tmux server's socket.
func (p Paths) TmuxSocket() string { return filepath.Join(p.RuntimeDir, TmuxSocket) }

// Prepare checks that both socket paths fit in a sockaddr_un (before creating
// anything, so a refused layout leaves no directories behind), creates the home
// and runtime directories (0700) when missing, refuses unsafe existing ones, and
// tightens existing ones to 0700 and the home's state files to 0600 (tighten).
// It is what `serve` runs before anything else.
func (p Paths) Prepare() error { return p.PrepareNoting(nil) }

// PrepareNoting is Prepare that tells note of every mode it tightened.
func (p Paths) PrepareNoting(note Note) error {
	if err := CheckSocketPath(p.APISocket()); err != nil {
		return err
	}
	if err := CheckSocketPath(p.TmuxSocket()); err != nil {
		return err
	}
	if err := EnsureDir(p.Home, "home"); err != nil {
		return err
	}
	if err := EnsureDir(p.RuntimeDir, "runtime_dir"); err != nil {
		return err
	}
	if err := tighten(p.Home, "home", stateFiles, note); err != nil {
		return err
	}
	return tighten(p.RuntimeDir, "runtime_dir", nil, note)
}

// CheckSocketPath refuses a socket path the kernel cannot bind, naming the path
// and its length, instead of letting bind fail with a bare EINVAL.
func CheckSocketPath(path string) error {
	if len(path) > MaxSocketPath {
		return verdict.Errorf(verdict.CodeInvalidRequest,
			map[string]any{"field": "runtime_dir", "path": path, "length": len(path), "max": MaxSocketPath},
			"socket path %s is %d bytes; a unix socket path must be at most %d bytes (set SKC_RUNTIME_DIR or --runtime-dir to a shorter directory)",
			path, len(path), MaxSocketPath)
	}
	return nil
}

// EnsureDir creates dir with mode 0700 (and missing parents) when it does not
// exist, then checks it with CheckDir. field names the setting in errors.
func EnsureDir(dir, field string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return dirError(field, dir, "cannot create it: %v", err)
		}
		// MkdirAll applies the umask; the contract says 0700 exactly.
		if err := os.Chmod(dir, 0o700); err != nil {
			return dirError(field, dir, "cannot chmod it 0700: %v", err)
		}
	}
	return CheckDir(dir, field)
}

// CheckDir refuses a directory that is a symlink, not a directory, owned by
// another uid, or writable by group or others.
func CheckDir(dir, field string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return dirError(field, dir, "%v", err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return dirError(field, dir, "it is a symlink; give the real directory")
	case !fi.IsDir():
		return dirError(field, dir, "it is not a directory")
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return dirError(field, dir, "cannot read its owner")
	}
	if int(st.Uid) != os.Geteuid() {
		return dirError(field, dir, "it is owned by uid %d, not by us (uid %d)", st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return dirError(field, dir, "it is writable by group or others (mode %04o); chmod 0700 it", fi.Mode().Perm())
	}
	return nil
}

func dirError(field, dir, format string, args ...any) error {
	return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": field, "path": dir},
		"%s %s refused: %s", field, dir, fmt.Sprintf(format, args...))
}

func fieldError(field string, err error) error {
	return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": field}, "%s: %w", field, err)
}
