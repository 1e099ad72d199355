// Package postgres is the fence's PostgreSQL engine: the fleet's fence, shared
// by every daemon that names the same database (contract "Beyond one host").
// The rules (validation, phases, liveness, what a row means) are the fence
// package's; this package stores them in PostgreSQL.
//
// Concurrency: every transition is one short READ COMMITTED transaction that
// first takes a transaction-scoped advisory lock on its identity (the
// equivalent of SQLite's BEGIN IMMEDIATE, narrowed to one identity: creates of
// different identities never wait for each other), then reads the rows it
// decides on FOR UPDATE, then writes; the primary keys are the backstop (a
// unique violation is identity_fence_contended, never a second row). Locks
// are waited for at most the busy timeout (lock_timeout); beyond it the
// answer is identity_fence_contended. No transaction is ever held across a
// tmux command or a spawn, and idle_in_transaction_session_timeout ends one
// whose client vanished without closing its socket.
//
// SERIALIZABLE would also be safe, but every write bumps the one
// fence_version row, and under SERIALIZABLE two concurrent bumps abort one
// transaction (40001) where READ COMMITTED makes the second wait for one
// commit: the row is updated last, so it is held for one round trip.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Config is what the PostgreSQL engine needs beyond fence.Options (whose
// Host names this daemon in the fleet: every row and verdict this handle
// writes carries it).
type Config struct {
	// MaxConns bounds the pool (default 8).
	MaxConns int32
}

// Store is an open PostgreSQL fence. It is safe for concurrent use.
type Store struct {
	url  string // for messages only: never carries a password (see Open)
	pool *pgxpool.Pool
	opt  fence.Options
	cfg  Config
	host fence.Host
	own  *fence.Owner // this handle as a row owner: self, in-flight rows, liveness

	cache *pubCache        // the identities of this host in memory (cache.go)
	rc    *fence.ReadCache // show's reads (readcache.go)
	last  lastReads        // show's last answers, for when the database is unreachable
	watch *watcher         // the version rows' local copies (watch.go)
	key   string           // the watcher's key: the connection string

	connCfg   *pgx.ConnConfig // for connections of its own: the host name's lock (hostlock.go)
	hostConn  *pgx.Conn       // holds the host name's lock, after RegisterHost
	hostStop  chan struct{}
	hostDone  chan struct{}
	localName *net.UnixListener // holds the host name on this machine (hostlock.go)

	closeOnce sync.Once
}

var _ fence.Fence = (*Store)(nil)

// Open connects to the fence database named by url (a postgres:// URL or a
// libpq key=value string; passwords come from PGPASSWORD or PGPASSFILE, as
// libpq's) and brings its schema to SchemaVersion. A database with a newer
// schema is refused. Open fails with fence_unavailable when the database
// cannot be reached within ctx (or 30 s): a daemon must not start on a fence
// it cannot read.
func Open(url string, opt fence.Options, c Config) (*Store, error) {
	opt = opt.WithDefaults()
	if c.MaxConns <= 0 {
		c.MaxConns = 8
	}
	own := fence.NewOwner(opt)
	host, err := localHost(own, opt)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "fence"},
			"fence: not a PostgreSQL connection string: %v", err)
	}
	if passwordIn(url) {
		return nil, verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "fence"},
			"fence: the connection string carries a password; pass it by PGPASSWORD or PGPASSFILE, never in argv")
	}
	configure(cfg, opt, c)
	s := &Store{url: redact(cfg), opt: opt, cfg: c, host: host, own: own, connCfg: cfg.ConnConfig.Copy()}
	s.cache = newPubCache(s)
	s.rc = fence.NewReadCache(readSource{s})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, s.unavailable("open", err)
	}
	if err := migrate(ctx, s.pool); err != nil {
		s.pool.Close()
		if verdict.CodeOf(err) == verdict.CodeFenceSchemaNewer {
			return nil, err // not a fence we cannot reach: one we must not touch
		}
		return nil, s.unavailable("migrate", err)
	}
	// Started after the migration: the channel's payloads name its tables.
	s.key = url
	s.watch = acquireWatcher(url, cfg.ConnConfig.Copy())
	return s, nil
}

// configure sets what every connection of the pool runs with. The pool
// replaces a connection that broke (the database restarted, failed over) by
// a new one on the next use: that is how the fence recovers by itself.
func configure(cfg *pgxpool.Config, opt fence.Options, c Config) {
	cfg.MaxConns = c.MaxConns
	cfg.MinConns = 0
	cfg.HealthCheckPeriod = 5 * time.Second
	cfg.MaxConnIdleTime = time.Minute
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > 5*time.Second {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	rp := cfg.ConnConfig.RuntimeParams
	if rp["application_name"] == "" {
		rp["application_name"] = "skc-supervisor"
	}
	rp["lock_timeout"] = strconv.FormatInt(opt.BusyTimeout.Milliseconds(), 10)
	// A client that vanished mid-transaction (a partition; a SIGKILL closes
	// its socket and PostgreSQL rolls back at once) must not hold an
	// identity's locks for long. Transitions take milliseconds.
	rp["idle_in_transaction_session_timeout"] = "30000"
	rp["TimeZone"] = "UTC"
}

// redact names the database for messages: host, port, database, user.
func redact(cfg *pgxpool.Config) string {
	c := cfg.ConnConfig
	return fmt.Sprintf("postgres://%s@%s/%s", c.User, net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port))), c.Database)
}

// URL is the database's address for messages (no password is ever kept).
func (s *Store) URL() string { return s.url }

// Close stops this Store's use of the watcher (the last Store of the
// database stops it) and closes the pool. Reservations still in flight through this Store
// are forgotten (they become this process's abandoned attempts). It is
// idempotent.
func (s *Store) Close() error {
	s.own.Forget()
	s.rc.Drop()
	s.closeOnce.Do(func() {
		s.unlockHostName()
		releaseWatcher(s.key, s.watch)
		s.pool.Close()
	})
	return nil
}

// Host is this handle's host identity.
func (s *Store) Host() fence.Host { return s.host }

func (s *Store) now() time.Time { return s.opt.Now().UTC() }

// Version is the fence's change counter: it moves with every committed write
// of any daemon of the fleet, so a cache that saw version v is exact while
// Version still answers v.
func (s *Store) Version(ctx context.Context) (int64, error) {
	var v int64
	if err := s.pool.QueryRow(ctx, `SELECT version FROM fence_version`).Scan(&v); err != nil {
		return 0, s.dbErr("version", err)
	}
	return v, nil
}

// dbErr maps a database error to a coded one. Refusals raised by fn pass through.
func (s *Store) dbErr(op string, err error) error {
	var ve *verdict.Error
	if errors.As(err, &ve) {
		return err
	}
	details := map[string]any{"fence": s.url, "op": op}
	if code := pgCode(err); contended(code) {
		details["sqlstate"] = code
		return verdict.Errorf(verdict.CodeIdentityFenceContended, details,
			"fence %s: the identity stayed locked by another writer beyond %v: %w", op, s.opt.BusyTimeout, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return verdict.Errorf(verdict.CodeTimeout, map[string]any{"op": op}, "fence %s: %w", op, err)
	}
	return s.unavailable(op, err)
}

func (s *Store) unavailable(op string, err error) error {
	return verdict.Errorf(verdict.CodeFenceUnavailable, map[string]any{"fence": s.url, "op": op},
		"fence %s %s: %w", op, s.url, err)
}

// pgCode is the SQLSTATE of a server error, "" for any other error.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// contended reports the SQLSTATEs that mean "another writer": a lock not
// had within lock_timeout (55P03), a deadlock broken by the server (40P01),
// a serialization failure (40001), and a unique violation (23505: a
// concurrent insert won the row the locks should have serialised; the
// constraint refused the second row, as it must).
func contended(code string) bool {
	switch code {
	case "55P03", "40P01", "40001", "23505":
		return true
	}
	return false
}

// Unavailable reports whether err means the database cannot be reached or
// is not serving (connection failures, an administrator's shutdown, a
// server starting or in recovery): what a failover looks like to a client.
func Unavailable(err error) bool {
	code := pgCode(err)
	switch {
	case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "57P"), strings.HasPrefix(code, "53"):
		return true
	case code != "":
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.SafeToRetry(err)
}

// errRolledBack: the server answered COMMIT with ROLLBACK (the transaction had
// failed): nothing was written.
var errRolledBack = errors.New("the transaction was rolled back")
