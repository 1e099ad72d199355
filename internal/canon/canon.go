// Package canon is the one rule by which the API and the fence key a path,
// so the two layers agree on what names an identity's state_dir.
package canon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// UnresolvedError says p is, or passes through, a symlink that does not
// resolve (its target missing, or a loop). Such a path is refused rather than
// keyed: keyed by its own path now and by its target once that resolves, one
// directory would be two identities — two agents for one identity.
type UnresolvedError struct {
	Link string // the symlink that does not resolve
	Err  error  // what resolving it said
}

// Error names the link and why it does not resolve.
func (e *UnresolvedError) Error() string {
	return fmt.Sprintf("%s is a symlink that does not resolve (%v)", e.Link, e.Err)
}

// Path returns the key of the absolute path p: cleaned lexically first (so
// ".." means the same before and after a directory is created), then its
// longest existing prefix resolved to its realpath and the rest appended.
// A path under an ancestor that cannot be read keeps its lexical form: that
// is the best key there is. An *UnresolvedError when p is or passes through
// a symlink that does not resolve.
func Path(p string) (string, error) {
	clean := filepath.Clean(p)
	rest := ""
	dir := clean
	for {
		real, err := filepath.EvalSymlinks(dir)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if fi, lerr := os.Lstat(dir); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return "", &UnresolvedError{Link: dir, Err: err}
		}
		if !errors.Is(err, fs.ErrNotExist) || dir == filepath.Dir(dir) {
			// A loop further up (lstat says ELOOP, EvalSymlinks "too
			// many links") is refused as above; anything else unreadable
			// keeps the lexical form.
			if link, lerr := unresolvedAncestor(dir); link != "" {
				return "", &UnresolvedError{Link: link, Err: lerr}
			}
			return clean, nil
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = filepath.Dir(dir)
	}
}

// unresolvedAncestor is the outermost ancestor of dir (dir included) that is
// a symlink EvalSymlinks cannot resolve, with its error; "" when there is
// none (an ancestor that cannot be read is not one).
func unresolvedAncestor(dir string) (string, error) {
	var chain []string
	for d := dir; ; d = filepath.Dir(d) {
		chain = append(chain, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for i := len(chain) - 1; i >= 0; i-- {
		fi, err := os.Lstat(chain[i])
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		if _, err := filepath.EvalSymlinks(chain[i]); err != nil {
			return chain[i], err
		}
	}
	return "", nil
}
