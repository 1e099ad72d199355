package home

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// stateFiles are the files serve keeps in the home. The fence holds every
// agent's argv and environment (API tokens among them) and the verdicts name
// paths and pids: owner only, whatever mode an older version, a restore from
// backup or a hand copy left them with.
var stateFiles = []string{
	FenceFile, FenceFile + "-wal", FenceFile + "-shm", FenceFile + "-journal",
	VerdictsFile, LockFile,
}

// tighten makes an existing home or runtime directory 0700 and the home's
// existing state files 0600. A state file that is a symlink, has more than one
// hard link (another name for it may sit in a directory others can read), or
// is not a regular file is refused, not followed or tightened: its other name
// would keep its contents readable, or the chmod would land elsewhere.
//
// note, when not nil, is told of every mode changed, so that serve can say so:
// a chmod of a directory the user pointed SKC_HOME at should not be silent.
func tighten(dir, field string, files []string, note Note) error {
	if err := chmodIfNot(dir, 0o700, note); err != nil {
		return dirError(field, dir, "cannot chmod it 0700: %v", err)
	}
	for _, name := range files {
		p := filepath.Join(dir, name)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fileError(p, "unreadable", "%v", err)
		}
		if err := checkStateFile(p, fi); err != nil {
			return err
		}
		if err := chmodIfNot(p, 0o600, note); err != nil {
			return fileError(p, "chmod", "cannot chmod it 0600: %v", err)
		}
	}
	return nil
}

func checkStateFile(p string, fi fs.FileInfo) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fileError(p, "symlink", "it is a symlink; the state files must be the home's own")
	case !fi.Mode().IsRegular():
		return fileError(p, "not_regular", "it is not a regular file")
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileError(p, "unreadable", "cannot read its owner and links")
	}
	if int(st.Uid) != os.Geteuid() {
		return fileError(p, "owner", "it is owned by uid %d, not by us (uid %d)", st.Uid, os.Geteuid())
	}
	if st.Nlink > 1 {
		return fileError(p, "hard_links", "it has %d hard links; another name for it could keep it readable (copy it instead of linking)", st.Nlink)
	}
	return nil
}

// Note is told of a mode Prepare changed: the path, its old and its new mode.
type Note func(path string, from, to fs.FileMode)

func chmodIfNot(p string, mode fs.FileMode, note Note) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	if fi.Mode().Perm() == mode {
		return nil
	}
	if err := os.Chmod(p, mode); err != nil {
		return err
	}
	if note != nil {
		note(p, fi.Mode().Perm(), mode)
	}
	return nil
}

// fileError is a refused state file: invalid_request (serve exits 2) with
// details.field "home", details.path and details.reason (symlink, hard_links,
// owner, not_regular, unreadable, chmod).
func fileError(p, reason, format string, args ...any) error {
	e := verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "home", "path": p, "reason": reason},
		format, args...)
	e.Message = "home file " + p + " refused: " + e.Message
	return e
}
