package lifecycle

import (
	"cmp"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Reasons of a spawn_failed refusal by checkCommand (details.reason).
const (
	SpawnExecutableNotFound = "executable_not_found"
	SpawnNotExecutable      = "not_executable"
	SpawnCwdMissing         = "cwd_missing"
)

// checkCommand refuses, before anything is started, a command that cannot
// start: a cwd that is missing or not a directory, or an argv[0] that is not
// found or not executable. Without it such a create was published and its
// session died within milliseconds, leaving only an ended verdict with status
// 127 — a user learnt that the command was wrong from an exit status.
//
// argv[0] is resolved as the pane helper resolves it (agentPath): a name
// with a slash relative to the cwd, any other name on the PATH of the agent's
// environment — the request's PATH when it sets one, else path (the daemon's,
// which the supervised tmux server's environment is made from). The check is
// advisory for what changes afterwards (a file removed between the check and
// the start still ends the generation with status 127), never a guess: it
// refuses only what the helper would certainly fail on now.
func checkCommand(spec fence.Spec, path string) error {
	if spec.Cwd != "" {
		st, err := os.Stat(spec.Cwd)
		if err != nil || !st.IsDir() {
			why := "is not a directory"
			if err != nil {
				why = "cannot be used: " + errorText(err)
			}
			return spawnRefused(SpawnCwdMissing, "cwd", spec.Cwd, "cwd %q %s", spec.Cwd, why)
		}
	}
	if len(spec.Argv) == 0 {
		return nil // Validate refuses it before; nothing to check here
	}
	name := spec.Argv[0]
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(spec.Cwd, p)
		}
		switch executable(p) {
		case errMissing:
			return spawnRefused(SpawnExecutableNotFound, "argv", name, "cannot start %q: no such file", name)
		case errNotExec:
			return spawnRefused(SpawnNotExecutable, "argv", name, "cannot start %q: not an executable file", name)
		}
		return nil
	}
	for i := len(spec.Env) - 1; i >= 0; i-- {
		if v, ok := cutEnv(spec.Env[i], "PATH"); ok {
			path = v
			break
		}
	}
	notExec := ""
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(spec.Cwd, dir)
		}
		switch p := filepath.Join(dir, name); executable(p) {
		case nil:
			return nil
		case errNotExec:
			notExec = cmp.Or(notExec, p)
		}
	}
	if notExec != "" {
		return spawnRefused(SpawnNotExecutable, "argv", name, "cannot start %q: %s is not executable", name, notExec)
	}
	return spawnRefused(SpawnExecutableNotFound, "argv", name, "cannot start %q: not found on the agent's PATH", name)
}

var (
	errMissing = errors.New("missing")
	errNotExec = errors.New("not executable")
)

// executable: nil for a file this user may execute, errMissing when nothing is
// at p, errNotExec for a directory or a file without execute permission.
func executable(p string) error {
	st, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ENOTDIR):
		return errMissing
	case err != nil, st.IsDir(), unix.Access(p, unix.X_OK) != nil:
		return errNotExec
	}
	return nil
}

func spawnRefused(reason, field, value, format string, args ...any) error {
	return verdict.Errorf(verdict.CodeSpawnFailed, map[string]any{"reason": reason, "field": field, field: value},
		format, args...)
}

func errorText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
