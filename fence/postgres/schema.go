package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skc-supervisor/skc-supervisor/fence"
)

// migrations are the forward schema steps of the PostgreSQL fence; the
// fence_schema row counts how many have been applied (SQLite keeps the count
// in PRAGMA user_version). Append only: a shipped step never changes, because
// databases in the field have already run it.
//
// Conventions, and why:
//   - Times are unix nanoseconds (UTC) in bigint, 0 meaning unset, as in the
//     SQLite engine: timestamptz keeps microseconds, and the fence compares
//     times it wrote (stop deadlines, restart due times) for equality.
//   - Text, not jsonb, for specs and verdict records: jsonb reorders keys, and
//     a verdict must read back byte for byte as it was shipped.
//   - Owner rows carry the host's identity (name, machine id, boot id): a row
//     of another host cannot be probed from here (its liveness is unknown,
//     whatever its lease says), and a row of this host from an earlier boot
//     is dead.
//   - verdicts.sequence is a bigserial: the fleet-wide order. Every write
//     transaction appends its verdicts after it has taken the fence_version
//     row lock (Store.write), so sequence values commit in increasing order
//     and a reader tailing "sequence > last" never skips one that commits late.
//   - fence_version is the caches' change signal (SQLite's data_version): one
//     row, bumped by every write transaction, read with one indexed SELECT;
//     identity_versions is the same per host, bumped by the writes that
//     change that host's identities (the identities cache's signal).
//     A version row rather than LISTEN/NOTIFY: a notification is delivered
//     after the commit, asynchronously, and lost while the listener is
//     disconnected (a failover, a restart of the database), so a cache that
//     trusted silence could serve a row another host has already changed; a
//     read of the version is exact at the moment it is taken.
var migrations = []string{
	// 1: the initial schema (the SQLite engine's schema 5, with hosts).
	`
CREATE TABLE hosts (
	name          text   PRIMARY KEY,
	machine_id    text   NOT NULL,
	boot_id       text   NOT NULL,
	seen_at       bigint NOT NULL,
	forgotten_at  bigint NOT NULL DEFAULT 0
);
CREATE TABLE reservations (
	state_dir          text     NOT NULL,
	session_id         text     NOT NULL,
	reservation_id     text     NOT NULL UNIQUE,
	state_file         text     NOT NULL,
	spec_json          text     NOT NULL,
	owner_host         text     NOT NULL,
	owner_machine_id   text     NOT NULL,
	owner_boot_id      text     NOT NULL,
	owner_pid          integer  NOT NULL,
	owner_incarnation  text     NOT NULL,
	phase              smallint NOT NULL CHECK (phase BETWEEN 1 AND 5),
	generation         bigint   NOT NULL CHECK (generation > 0),
	attempt_name       text     NOT NULL DEFAULT '',
	tmux_id            text     NOT NULL DEFAULT '',
	pane_pid           integer  NOT NULL DEFAULT 0,
	pane_start         bigint   NOT NULL DEFAULT 0,
	server_pid         integer  NOT NULL DEFAULT 0,
	server_start       bigint   NOT NULL DEFAULT 0,
	helper_pid         integer  NOT NULL DEFAULT 0,
	cgroup             text     NOT NULL DEFAULT '',
	abandoned          boolean  NOT NULL DEFAULT false,
	claimed_at         bigint   NOT NULL,
	updated_at         bigint   NOT NULL,
	lease_until        bigint   NOT NULL,
	PRIMARY KEY (state_dir, session_id)
);
CREATE INDEX reservations_host ON reservations (owner_host);
-- The highest generation ever reserved or published per identity, so a
-- generation is never handed out twice even when a reservation is released
-- before it publishes.
CREATE TABLE generations (
	state_dir   text   NOT NULL,
	session_id  text   NOT NULL,
	last        bigint NOT NULL,
	PRIMARY KEY (state_dir, session_id)
);
CREATE TABLE identities (
	state_dir        text     NOT NULL,
	session_id       text     NOT NULL,
	generation       bigint   NOT NULL CHECK (generation > 0),
	reservation_id   text     NOT NULL,
	host             text     NOT NULL,
	machine_id       text     NOT NULL,
	boot_id          text     NOT NULL DEFAULT '',
	session_name     text     NOT NULL,
	tmux_id          text     NOT NULL,
	server_pid       integer  NOT NULL,
	server_start     bigint   NOT NULL,
	state_file       text     NOT NULL,
	label            text     NOT NULL,
	published_at     bigint   NOT NULL,
	ended            boolean  NOT NULL DEFAULT false,
	ended_at         bigint   NOT NULL DEFAULT 0,
	pane_pid         integer  NOT NULL DEFAULT 0,
	pane_start       bigint   NOT NULL DEFAULT 0,
	cgroup           text     NOT NULL DEFAULT '',
	stop_timeout_ms  bigint   NOT NULL DEFAULT 10000,
	stop_since       bigint   NOT NULL DEFAULT 0,
	stop_deadline    bigint   NOT NULL DEFAULT 0,
	stop_reason      text     NOT NULL DEFAULT '',
	stop_killed      boolean  NOT NULL DEFAULT false,
	spec_json        text     NOT NULL DEFAULT '',
	restart_state    text     NOT NULL DEFAULT '',
	restart_due      bigint   NOT NULL DEFAULT 0,
	restart_reason   text     NOT NULL DEFAULT '',
	restarts         integer  NOT NULL DEFAULT 0,
	failures         integer  NOT NULL DEFAULT 0,
	starts_json      text     NOT NULL DEFAULT '',
	PRIMARY KEY (state_dir, session_id)
);
CREATE INDEX identities_reservation ON identities (reservation_id);
CREATE INDEX identities_host ON identities (host);
-- End detection: the not-ended generation in one tmux session of one
-- server life of one host.
CREATE INDEX identities_tmux ON identities (host, server_pid, server_start, tmux_id) WHERE NOT ended;
CREATE INDEX identities_restart_due ON identities (host, restart_due) WHERE restart_state = 'exited';
-- The spec of each reservation outlives its row's release, so the pane
-- helper can read it whether it starts before or after publication.
CREATE TABLE specs (
	reservation_id  text   PRIMARY KEY,
	state_dir       text   NOT NULL,
	session_id      text   NOT NULL,
	generation      bigint NOT NULL,
	spec_json       text   NOT NULL
);
CREATE TABLE postmortems (
	reservation_id     text    PRIMARY KEY,
	host               text    NOT NULL,
	state_dir          text    NOT NULL,
	session_id         text    NOT NULL,
	generation         bigint  NOT NULL,
	helper_pid         integer NOT NULL,
	helper_incarnation text    NOT NULL,
	agent_pid          integer NOT NULL DEFAULT 0,
	exit_status        integer,
	signal             text    NOT NULL DEFAULT '',
	started_at         bigint  NOT NULL,
	ended_at           bigint  NOT NULL DEFAULT 0,
	cgroup             text    NOT NULL DEFAULT ''
);
CREATE INDEX postmortems_identity ON postmortems (state_dir, session_id, generation);
CREATE TABLE verdicts (
	sequence    bigserial PRIMARY KEY,
	host        text      NOT NULL,
	state_dir   text      NOT NULL DEFAULT '',
	session_id  text      NOT NULL DEFAULT '',
	record      text      NOT NULL
);
CREATE INDEX verdicts_identity ON verdicts (state_dir, session_id, sequence);
CREATE INDEX verdicts_host ON verdicts (host, sequence);
CREATE TABLE fence_version (
	only_row  boolean PRIMARY KEY DEFAULT true CHECK (only_row),
	version   bigint  NOT NULL
);
INSERT INTO fence_version (only_row, version) VALUES (true, 0);
-- Per host: moved by every write that changes that host's identities rows,
-- the signal of the daemon's identities cache (which holds its host's rows
-- only), so another host's creates do not invalidate it.
CREATE TABLE identity_versions (
	host     text   PRIMARY KEY,
	version  bigint NOT NULL
);
`,
}

// SchemaVersion is the schema version this binary writes and understands.
var SchemaVersion = len(migrations)

// migrationLock is the advisory lock key that serialises migrations of one
// database across the fleet ("skcfence" in ASCII): daemons started together
// against a new database apply every step exactly once.
const migrationLock int64 = 0x736b6366656e6365

// migrate applies the missing steps, each in its own transaction with its
// version bump (PostgreSQL's DDL is transactional: a step is all or nothing).
// A database already at SchemaVersion is recognised with a plain read, so
// opening the fence takes no lock in the common case.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if v, ok, err := readVersion(ctx, pool); err == nil && ok && v == len(migrations) {
		return nil
	}
	for {
		done, err := migrateStep(ctx, pool)
		if err != nil || done {
			return err
		}
	}
}

// readVersion reads the schema version; ok is false while the database has
// no fence_schema table (a new database).
func readVersion(ctx context.Context, q querier) (v int, ok bool, err error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('fence_schema') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return 0, false, err
	}
	err = q.QueryRow(ctx, `SELECT version FROM fence_schema`).Scan(&v)
	return v, err == nil, err
}

func migrateStep(ctx context.Context, pool *pgxpool.Pool) (done bool, err error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	// Waiting here is waiting for another daemon's migration step: the
	// session's short lock_timeout (the fence's busy timeout) does not apply.
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = 0`); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS fence_schema (
		only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
		version  integer NOT NULL)`); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO fence_schema (only_row, version) VALUES (true, 0)
		ON CONFLICT (only_row) DO NOTHING`); err != nil {
		return false, err
	}
	var v int
	if err := tx.QueryRow(ctx, `SELECT version FROM fence_schema`).Scan(&v); err != nil {
		return false, err
	}
	switch {
	case v > len(migrations):
		return false, fence.SchemaNewer("the database", v, len(migrations))
	case v == len(migrations):
		return true, tx.Commit(ctx)
	}
	if _, err := tx.Exec(ctx, migrations[v]); err != nil {
		return false, fmt.Errorf("migration %d: %w", v+1, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE fence_schema SET version = $1`, v+1); err != nil {
		return false, err
	}
	return false, tx.Commit(ctx)
}
