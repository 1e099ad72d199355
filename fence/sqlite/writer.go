package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"time"
)

// writer is the daemon's one write connection, held for the Store's whole life
// rather than taken from the pool per transaction, so that every statement of a
// transition is prepared once on it and reused: parsing and planning were about
// a third of a transition's CPU (BENCHMARKS.md, fence). sem serialises the
// transactions; waiting on it honours the caller's context, as waiting for the
// pool's one connection did. Writes queued while it is held run as one group
// (group.go).
type writer struct {
	sem   chan struct{}
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
}

func newWriter() writer { return writer{sem: make(chan struct{}, 1)} }

// connect returns the held connection, opening one from db when none is held
// (first use, or after a discard). Called with the writer locked.
func (w *writer) connect(ctx context.Context, db *sql.DB) (*sql.Conn, error) {
	if w.conn != nil {
		return w.conn, nil
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if err := openedWritable(conn); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = conn.Close()
		return nil, err
	}
	w.conn, w.stmts = conn, map[string]*sql.Stmt{}
	return conn, nil
}

// errOpenedReadOnly is why a new writer connection is refused (fence_unavailable).
var errOpenedReadOnly = errors.New("the database file could only be opened read-only")

// openedWritable refuses a connection that SQLite opened read-only: when the
// database file cannot be opened for writing, SQLite falls back to read-only
// and the connection stays so, refusing every write (BEGIN IMMEDIATE even
// succeeds on it) long after the file is writable again. Held as the writer,
// it would make the fence read-only until the process restarts.
func openedWritable(conn *sql.Conn) error {
	ro := false
	err := conn.Raw(func(dc any) error {
		c, ok := dc.(interface{ IsReadOnly(string) (bool, error) })
		if !ok {
			return nil
		}
		var err error
		ro, err = c.IsReadOnly("main")
		return err
	})
	if err == nil && ro {
		err = errOpenedReadOnly
	}
	return err
}

// release lets the next transaction have the writer.
func (w *writer) release() { <-w.sem }

// discard drops the held connection (closing it rolls back whatever it holds)
// and its statements; the next acquire opens a fresh one. Called with the
// writer acquired, when the connection's transaction state is unknown.
func (w *writer) discard() {
	if w.conn == nil {
		return
	}
	for _, st := range w.stmts {
		_ = st.Close()
	}
	_ = w.conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = w.conn.Close()
	w.conn, w.stmts = nil, nil
}

// close releases the held connection for good (Store.Close). It waits for a
// transaction in flight to finish.
func (w *writer) close() error {
	w.sem <- struct{}{}
	defer func() { <-w.sem }()
	if w.conn == nil {
		return nil
	}
	for _, st := range w.stmts {
		_ = st.Close()
	}
	err := w.conn.Close()
	w.conn, w.stmts = nil, nil
	return err
}

// stmtQueryer runs a transition's statements on the writer's connection, each
// prepared on first use and kept. detached (a write inside a group, group.go)
// runs them without the caller's cancellation: SQLite answers a statement
// interrupted inside a transaction by rolling the whole transaction back,
// which would take the group's other writes with it.
type stmtQueryer struct {
	w        *writer
	detached bool
}

func (q stmtQueryer) ctx(ctx context.Context) context.Context {
	if q.detached {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

func (q stmtQueryer) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if st := q.w.stmts[query]; st != nil {
		return st, nil
	}
	st, err := q.w.conn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	q.w.stmts[query] = st
	return st, nil
}

func (q stmtQueryer) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	ctx = q.ctx(ctx)
	st, err := q.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (q stmtQueryer) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	ctx = q.ctx(ctx)
	st, err := q.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

func (q stmtQueryer) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	ctx = q.ctx(ctx)
	st, err := q.stmt(ctx, query)
	if err != nil {
		// Unprepared, so the *sql.Row carries the same error to Scan.
		return q.w.conn.QueryRowContext(ctx, query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

// begin opens the write transaction on the writer's connection; the writer is
// locked. A connection that answers SQLITE_READONLY was opened, or attached to
// the process's shared -shm mapping, while the fence's files could not be
// written (SQLite then opens them read-only, and keeps it so): it would refuse
// every write for good, the files long writable again. So it is dropped, with
// the readers' idle connections that may hold the read-only mapping, and BEGIN
// is tried once more on fresh ones. Nothing ran yet, so the retry is safe.
func (s *Store) begin(ctx context.Context) (*sql.Conn, error) {
	for retried := false; ; retried = true {
		conn, err := s.wr.connect(ctx, s.w)
		if err != nil {
			return nil, err
		}
		if err = s.beginImmediate(ctx, conn); err == nil {
			return conn, nil
		}
		if !isBusy(err) {
			// A caller's context cancelled while BEGIN ran can leave the
			// transaction open although BEGIN reported the cancellation; on
			// the one writer connection every later write would then fail
			// "cannot start a transaction within a transaction". Discard the
			// connection (closing it rolls back whatever it holds). Busy is
			// the common failure and opens nothing: keep the connection.
			s.wr.discard()
		}
		if retried || !isReadOnly(err) {
			return nil, err
		}
		s.dropReaders()
	}
}

// dropReaders closes the readers' idle connections and the read cache's, so
// that the next ones open the files afresh (see begin).
func (s *Store) dropReaders() {
	s.rc.Drop()
	s.r.SetMaxIdleConns(0)
	s.r.SetMaxIdleConns(readerIdle)
}

// beginImmediate opens the write transaction, waiting for another process's
// write lock with short sleeps (50 µs doubling to 10 ms) up to the store's
// BusyTimeout. It replaces SQLite's busy handler on the writer connection,
// whose first sleep is a whole millisecond: in a create's six transactions one
// in six met a pane helper's ~0.1 ms write and lost a millisecond to it.
func (s *Store) beginImmediate(ctx context.Context, conn *sql.Conn) error {
	deadline := time.Now().Add(s.opt.BusyTimeout)
	for backoff := 50 * time.Microsecond; ; backoff = min(2*backoff, 10*time.Millisecond) {
		_, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE")
		if err == nil || !isBusy(err) || !time.Now().Add(backoff).Before(deadline) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}
