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
	SpawnHelperMissing      = "helper_missing"
)

// checkHelper refuses a start whose pane command cannot run: the pane helper
// is this daemon's own binary, by the path it was started from, and a binary
// removed or replaced by something unexecutable under a running daemon (a
// `make clean`, an upgrade half done) made tmux start nothing — the create
// failed tag_failed naming a session tmux no longer had (found outside-in).
func (m *Manager) checkHelper() error {
	if err := unix.Access(m.cfg.HelperPath, unix.X_OK); err != nil {
		return spawnRefused(SpawnHelperMissing, "helper", m.cfg.HelperPath,
			"the pane helper %s (this daemon's own binary) cannot be run: %s; restart the daemon from an installed binary",
			m.cfg.HelperPath, errorText(err))
	}
	return nil
}

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
//
// A resume_argv is checked too, at the create (a restart runs it, and a
// typo found only after the first crash costs every start of the burst);
// in a restart (restart: the spec's argv is the resume_argv) a refusal
// names resume_argv.
func checkCommand(spec fence.Spec, path string, restart bool) error {
	field := "argv"
	if restart && len(spec.ResumeArgv) > 0 {
		field = "resume_argv"
	}
	if err := checkStart(spec, spec.Argv, field, path); err != nil || restart || len(spec.ResumeArgv) == 0 {
		return err
	}
	return checkStart(spec, spec.ResumeArgv, "resume_argv", path)
}

// checkStart is checkCommand for one command line, argv, of spec (its cwd
// and environment); field names it in a refusal.
func checkStart(spec fence.Spec, argv []string, field, path string) error {
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
	if len(argv) == 0 {
		return nil // Validate refuses it before; nothing to check here
	}
	name := argv[0]
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(spec.Cwd, p)
		}
		switch executable(p) {
		case errMissing:
			return spawnRefused(SpawnExecutableNotFound, field, name, "cannot start %q: no such file", name)
		case errNotExec:
			return spawnRefused(SpawnNotExecutable, field, name, "cannot start %q: not an executable file", name)
		}
		return checkInterpreter(name, p, field)
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
			return checkInterpreter(name, p, field)
		case errNotExec:
			notExec = cmp.Or(notExec, p)
		}
	}
	if notExec != "" {
		return spawnRefused(SpawnNotExecutable, field, name, "cannot start %q: %s is not executable", name, notExec)
	}
	return spawnRefused(SpawnExecutableNotFound, field, name, "cannot start %q: not found on the agent's PATH", name)
}

// checkInterpreter refuses a script (name, found at p) whose "#!" line names
// an absolute interpreter that is missing or not executable: the kernel's
// exec then fails exactly as for a missing argv[0] (ENOENT, EACCES), after
// publication. Anything it cannot read for sure (an unreadable file, a
// relative interpreter) is left to the exec.
func checkInterpreter(name, p, field string) error {
	if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
		return nil // never open a FIFO or a device: it could block
	}
	f, err := os.Open(p)
	if err != nil {
		return nil
	}
	defer f.Close()
	head := make([]byte, 256) // the kernel reads no more of a #! line
	n, _ := f.Read(head)
	line, _, _ := strings.Cut(string(head[:n]), "\n")
	rest, ok := strings.CutPrefix(line, "#!")
	// As the kernel reads it: blanks, then the interpreter up to the next
	// blank — a CR of a CRLF file is part of the name, and fails as such.
	interp, _, _ := strings.Cut(strings.TrimLeft(rest, " \t"), " ")
	interp, _, _ = strings.Cut(interp, "\t")
	if !ok || !filepath.IsAbs(interp) {
		return nil
	}
	switch executable(interp) {
	case errMissing:
		return spawnRefused(SpawnExecutableNotFound, field, name,
			"cannot start %q: its interpreter %q (#! line) does not exist", name, interp)
	case errNotExec:
		return spawnRefused(SpawnNotExecutable, field, name,
			"cannot start %q: its interpreter %q (#! line) is not executable", name, interp)
	}
	return nil
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
