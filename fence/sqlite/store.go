// Package sqlite is the fence's embedded engine (DESIGN §5): the rules of
// package fence kept in one SQLite file per home, $SKC_HOME/fence.sqlite,
// which the daemon and its pane helpers open as separate processes.
//
// Every transition is one short BEGIN IMMEDIATE transaction on the handle's
// single writer connection; none is ever held across a tmux command or a
// spawn. Mutual exclusion outlives the transaction as row state, and a row is
// only ever displaced when its owner is proven dead (fence.Owner; lease expiry
// never authorizes takeover). SQLITE_BUSY beyond the busy timeout is
// identity_fence_contended — never "absent", never a write.
//
// Nothing in this package opens the database files outside SQLite: closing any
// descriptor of a file drops the process's POSIX locks on it. Open also turns
// on modernc.org/sqlite's OFD locking (process-wide) before the first
// connection, so even a stray close elsewhere cannot strip the fence's locks.
//
// The package is named after its storage; it imports modernc.org/sqlite as
// msqlite.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	msqlite "modernc.org/sqlite"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Store is an open fence database. It is safe for concurrent use; writes are
// funnelled through one connection.
type Store struct {
	path string
	shm  string // path's -shm file, checked before SQLite maps it (writable.go)
	// dev, ino: the database file this handle opened; a path that names
	// another file since (or none) is refused (writable.go).
	dev, ino uint64
	w        *sql.DB    // writer: one connection, BEGIN IMMEDIATE
	wr       writer     // that connection, held, with its prepared statements (writer.go)
	wq       writeQueue // writes waiting for it, run as one group (group.go)
	r        *sql.DB    // readers (WAL: never blocked by the writer)
	opt      fence.Options
	own      *fence.Owner     // this handle as a row owner: self, in-flight rows, liveness
	rc       *fence.ReadCache // show's reads, over a readSource (readcache.go)

	cache *fence.PubCache // the identities table in memory (cache.go)
}

var _ fence.Fence = (*Store)(nil)

// Open opens (creating when missing) the fence database at path. It refuses a
// directory or file that is a symlink, owned by another user, or writable by
// group or others; a file that is not a readable fence database is an error,
// never recreated.
//
// Permissions: a new directory is made 0700. A new database file is created by
// SQLite (never by us: no descriptor on it outside SQLite), then chmod-ed to
// 0600 by path before any journal file exists, so SQLite gives the -wal and
// -shm files the same 0600. In the instant between creation and chmod the
// 0700 directory is what keeps others out.
func Open(path string, opt fence.Options) (*Store, error) {
	if err := fence.CheckPath("path", path); err != nil {
		return nil, err
	}
	path = filepath.Clean(path)
	opt = opt.WithDefaults()
	if err := prepareFiles(path); err != nil {
		return nil, err
	}
	enableOFD()
	s := &Store{path: path, shm: path + "-shm", opt: opt, wr: newWriter(), own: fence.NewOwner(opt)}
	s.cache = fence.NewPubCache(s.Identities)
	if err := s.writable("open"); err != nil {
		return nil, err
	}
	var err error
	if s.w, err = sql.Open("sqlite", dsn(path, opt, true)); err != nil {
		return nil, unavailable(path, "open", err)
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetConnMaxIdleTime(0)
	if s.r, err = sql.Open("sqlite", dsn(path, opt, false)); err != nil {
		s.w.Close()
		return nil, unavailable(path, "open", err)
	}
	s.rc = fence.NewReadCache(&readSource{db: s.r})
	s.r.SetMaxOpenConns(4)
	s.r.SetMaxIdleConns(readerIdle)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := retryBusy(ctx, func() error { return s.w.PingContext(ctx) }); err != nil {
		s.Close()
		if isCorrupt(err) {
			return nil, unavailable(path, "open (not a fence database or corrupt; refusing to recreate it)", err)
		}
		return nil, unavailable(path, "open", err)
	}
	if err := migrate(ctx, s.w, path); err != nil {
		s.Close()
		if verdict.CodeOf(err) == verdict.CodeFenceSchemaNewer {
			return nil, err // not a fence we cannot reach: one we must not touch
		}
		return nil, unavailable(path, "migrate", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		s.Close()
		return nil, unavailable(path, "open", err)
	}
	s.dev, s.ino = uint64(st.Dev), st.Ino
	return s, nil
}

var ofdOnce sync.Once

// enableOFD switches modernc.org/sqlite to OFD locks before our first
// connection. Where the kernel lacks them the library keeps POSIX locks; where
// another package opened SQLite first the mode is fixed: both are reported by
// OFDLocking (see Store.OFD) rather than failing Open.
func enableOFD() {
	ofdOnce.Do(func() { _, _ = msqlite.OFDLocking(true) })
}

// OFD reports whether OFD locking is in effect for this process's database files.
func (s *Store) OFD() bool { return msqlite.OFDLockingEnabled() }

// readerIdle is how many idle reader connections the pool keeps (database/sql's
// default, made explicit because dropReaders sets it back).
const readerIdle = 2

// dsn builds the connection string: every option is in the DSN so each new
// pool connection is configured the same way.
func dsn(path string, opt fence.Options, writer bool) string {
	q := url.Values{}
	busy := opt.BusyTimeout
	if writer {
		// The writer waits for the write lock in beginImmediate, in steps of
		// tens of microseconds: SQLite's own busy handler sleeps 1 ms at
		// least, for a lock another writer (a pane helper) holds ~0.1 ms.
		busy = 0
	}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(busy.Milliseconds(), 10)+")")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(1)")
	if writer {
		q.Set("_txlock", "immediate")
	} else {
		q.Add("_pragma", "query_only(1)")
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Close closes the database. Reservations still in flight through this Store
// are forgotten (they become this process's abandoned attempts).
func (s *Store) Close() error {
	if s == nil {
		return nil // a failed Open's result, held as a fence.Fence
	}
	s.own.Forget()
	var errs []error
	s.rc.Drop() // its held reader connection goes back before the pool closes
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	if s.w != nil {
		errs = append(errs, s.wr.close(), s.w.Close())
	}
	return errors.Join(errs...)
}

// prepareFiles creates the directory 0700 when missing, checks the directory
// and any existing database files, and creates a new database file 0600.
func prepareFiles(path string) error {
	dir := filepath.Dir(path)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return unavailable(dir, "create directory", err)
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return unavailable(dir, "chmod directory", err)
		}
	}
	if err := checkPrivate(dir, true); err != nil {
		return err
	}
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		if err := checkPrivate(p, false); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return createFile(path)
}

// createFile lets SQLite create the empty database file, then makes it 0600
// before WAL mode creates the -wal and -shm files (SQLite copies the main
// file's mode to them).
func createFile(path string) error {
	q := url.Values{}
	q.Set("mode", "rwc")
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return unavailable(path, "create", err)
	}
	enableOFD()
	err = db.Ping()
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return unavailable(path, "create", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return unavailable(path, "chmod", err)
	}
	return checkPrivate(path, false)
}

// checkPrivate refuses a path that is a symlink, of the wrong kind, owned by
// another user, or writable by group or others. A missing path returns an
// error wrapping fs.ErrNotExist.
func checkPrivate(path string, dir bool) error {
	fi, err := os.Lstat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return unavailable(path, "stat", err)
	}
	kind := "file"
	if dir {
		kind = "directory"
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return refuse(path, "the fence %s %s is a symlink", kind, path)
	case dir && !fi.IsDir(), !dir && !fi.Mode().IsRegular():
		return refuse(path, "the fence path %s is not a %s", path, kind)
	case fi.Mode().Perm()&0o022 != 0:
		return refuse(path, "the fence %s %s is writable by group or others (mode %04o)", kind, path, fi.Mode().Perm())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return refuse(path, "the fence %s %s is owned by uid %d, not by us (uid %d)", kind, path, st.Uid, os.Getuid())
	}
	return nil
}

func refuse(path, format string, args ...any) error {
	return verdict.Errorf(verdict.CodeFenceUnavailable, map[string]any{"path": path}, format, args...)
}

func unavailable(path, op string, err error) error {
	return verdict.Errorf(verdict.CodeFenceUnavailable, map[string]any{"path": path}, "fence %s %s: %w", op, path, err)
}

func (s *Store) now() time.Time { return s.opt.Now().UTC() }

// queryer is what a transition runs its statements on (the writer's *sql.Conn).
type queryer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// writeAlone runs fn as one BEGIN IMMEDIATE transaction of its own on the
// writer connection, which the caller holds (write, group.go). BEGIN, COMMIT
// and ROLLBACK are issued by hand so a failed COMMIT is always rolled back
// before the connection is used again.
func (s *Store) writeAlone(ctx context.Context, op string, fn func(q queryer) error) error {
	conn, err := s.begin(ctx)
	if err != nil {
		return s.dbErr(op, err)
	}
	err = fn(stmtQueryer{w: &s.wr})
	if err == nil && testHookBeforeCommit != nil {
		testHookBeforeCommit(op)
	}
	if err == nil {
		// COMMIT is not cancelled with the caller: once the statements ran, a
		// half-way cancellation would only make the outcome ambiguous.
		_, err = conn.ExecContext(context.WithoutCancel(ctx), "COMMIT")
	}
	if err != nil {
		// A detached context: a caller that hangs up must not leave the
		// transaction open on the daemon's only writer connection.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, rerr := conn.ExecContext(rctx, "ROLLBACK"); rerr != nil {
			s.wr.discard() // its transaction state is unknown
		} else if isReadOnly(err) {
			s.wr.discard() // as in begin: fresh connections for the next write
			s.dropReaders()
		}
		return s.dbErr(op, err)
	}
	return nil
}

// testHookBeforeCommit, when set (tests only), runs inside every transition
// after its statements and before COMMIT: the crash tests SIGKILL a process there.
var testHookBeforeCommit func(op string)

// dbErr maps a database error to a coded one. Refusals raised by fn pass through.
func (s *Store) dbErr(op string, err error) error {
	var ve *verdict.Error
	if errors.As(err, &ve) {
		return err
	}
	if isBusy(err) {
		return verdict.Errorf(verdict.CodeIdentityFenceContended, map[string]any{"path": s.path, "op": op},
			"fence %s: database stayed busy beyond %v: %w", op, s.opt.BusyTimeout, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return verdict.Errorf(verdict.CodeTimeout, map[string]any{"op": op}, "fence %s: %w", op, err)
	}
	return verdict.Errorf(verdict.CodeFenceUnavailable, map[string]any{"path": s.path, "op": op}, "fence %s: %w", op, err)
}

// isBusy reports whether err is SQLITE_BUSY or SQLITE_LOCKED (any extended code).
func isBusy(err error) bool {
	var se *msqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqliteBusy, sqliteLocked:
		return true
	}
	return false
}

// isReadOnly reports whether err is SQLITE_READONLY (any extended code).
func isReadOnly(err error) bool {
	var se *msqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqliteReadOnly
}

// isCorrupt reports whether err says the file is not a database or is damaged.
func isCorrupt(err error) bool {
	var se *msqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code() & 0xff
	return c == sqliteCorrupt || c == sqliteNotADB
}

// retryBusy runs f until it is not busy or ctx ends: opening the fence is not
// a transition, and a helper process opening it while the daemon writes must
// not fail for that.
func retryBusy(ctx context.Context, f func() error) error {
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, 250*time.Millisecond) {
		err := f()
		if err == nil || !isBusy(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (after %v)", err, ctx.Err())
		case <-time.After(backoff):
		}
	}
}

// SQLite primary result codes (sqlite3.h).
const (
	sqliteBusy     = 5
	sqliteLocked   = 6
	sqliteReadOnly = 8
	sqliteCorrupt  = 11
	sqliteNotADB   = 26
)
