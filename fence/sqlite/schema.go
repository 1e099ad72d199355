package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/skc-supervisor/skc-supervisor/fence"
)

// migrations are the forward schema steps; PRAGMA user_version counts how
// many have been applied. Append only: a shipped step never changes, because
// databases in the field have already run it.
var migrations = []string{
	// 1: the initial schema. Times are unix nanoseconds (UTC); 0 means unset.
	`
CREATE TABLE reservations (
	state_dir          TEXT    NOT NULL,
	session_id         TEXT    NOT NULL,
	reservation_id     TEXT    NOT NULL UNIQUE,
	state_file         TEXT    NOT NULL,
	spec_json          TEXT    NOT NULL,
	owner_pid          INTEGER NOT NULL,
	owner_incarnation  TEXT    NOT NULL,
	phase              INTEGER NOT NULL CHECK (phase BETWEEN 1 AND 5),
	generation         INTEGER NOT NULL CHECK (generation > 0),
	attempt_name       TEXT    NOT NULL DEFAULT '',
	tmux_id            TEXT    NOT NULL DEFAULT '',
	pane_pid           INTEGER NOT NULL DEFAULT 0,
	server_pid         INTEGER NOT NULL DEFAULT 0,
	server_start       INTEGER NOT NULL DEFAULT 0,
	helper_pid         INTEGER NOT NULL DEFAULT 0,
	abandoned          INTEGER NOT NULL DEFAULT 0,
	claimed_at         INTEGER NOT NULL,
	updated_at         INTEGER NOT NULL,
	lease_until        INTEGER NOT NULL,
	PRIMARY KEY (state_dir, session_id)
);
-- The highest generation ever reserved or published per identity, so a
-- generation is never handed out twice even when a reservation is released
-- before it publishes.
CREATE TABLE generations (
	state_dir   TEXT    NOT NULL,
	session_id  TEXT    NOT NULL,
	last        INTEGER NOT NULL,
	PRIMARY KEY (state_dir, session_id)
);
CREATE TABLE identities (
	state_dir       TEXT    NOT NULL,
	session_id      TEXT    NOT NULL,
	generation      INTEGER NOT NULL CHECK (generation > 0),
	reservation_id  TEXT    NOT NULL,
	session_name    TEXT    NOT NULL,
	tmux_id         TEXT    NOT NULL,
	server_pid      INTEGER NOT NULL,
	server_start    INTEGER NOT NULL,
	state_file      TEXT    NOT NULL,
	label           TEXT    NOT NULL,
	published_at    INTEGER NOT NULL,
	ended           INTEGER NOT NULL DEFAULT 0,
	ended_at        INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (state_dir, session_id)
);
CREATE INDEX identities_reservation ON identities (reservation_id);
CREATE TABLE postmortems (
	reservation_id     TEXT    PRIMARY KEY,
	state_dir          TEXT    NOT NULL,
	session_id         TEXT    NOT NULL,
	generation         INTEGER NOT NULL,
	helper_pid         INTEGER NOT NULL,
	helper_incarnation TEXT    NOT NULL,
	agent_pid          INTEGER NOT NULL DEFAULT 0,
	exit_status        INTEGER,
	signal             TEXT    NOT NULL DEFAULT '',
	utime_ns           INTEGER NOT NULL DEFAULT 0,
	stime_ns           INTEGER NOT NULL DEFAULT 0,
	maxrss_kb          INTEGER NOT NULL DEFAULT 0,
	started_at         INTEGER NOT NULL,
	ended_at           INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX postmortems_identity ON postmortems (state_dir, session_id, generation);
CREATE TABLE verdicts (
	sequence  INTEGER PRIMARY KEY,
	record    TEXT    NOT NULL
);
`,
	// 2: indexes for the hot paths at thousands of sessions. End detection finds
	// the not-ended generation living in a tmux session of one server life
	// (PublishedByTmux); Show reads one identity's verdicts (VerdictsFor), so
	// verdicts carry their identity in columns, backfilled from the records.
	`
CREATE INDEX identities_tmux ON identities (server_pid, server_start, tmux_id) WHERE ended = 0;
ALTER TABLE verdicts ADD COLUMN state_dir  TEXT NOT NULL DEFAULT '';
ALTER TABLE verdicts ADD COLUMN session_id TEXT NOT NULL DEFAULT '';
UPDATE verdicts SET
	state_dir  = COALESCE(json_extract(record, '$.skc.identity.state_dir'), ''),
	session_id = COALESCE(json_extract(record, '$.skc.identity.session_id'), '');
CREATE INDEX verdicts_identity ON verdicts (state_dir, session_id, sequence);
`,
	// 3: the spec of each reservation outlives its row's release, so the pane
	// helper can read it whether it starts before or after publication; it is
	// deleted when the generation ends, or with a row released unpublished.
	`
CREATE TABLE specs (
	reservation_id  TEXT    PRIMARY KEY,
	state_dir       TEXT    NOT NULL,
	session_id      TEXT    NOT NULL,
	generation      INTEGER NOT NULL,
	spec_json       TEXT    NOT NULL
);
INSERT INTO specs (reservation_id, state_dir, session_id, generation, spec_json)
	SELECT reservation_id, state_dir, session_id, generation, spec_json FROM reservations;
`,
	// 4: a generation ends only when its processes are proven gone. What holds
	// them is recorded at spawn (the pane's pid and start time, the cgroup made
	// for it) and copied to the published record with the boot id, so a
	// restarted daemon can finish a stop; the stop itself (since, deadline,
	// reason, SIGKILL sent) is durable too, and the grace period
	// (stop_timeout_ms, from the spec) is kept with the identity. Rows from
	// before have no hold: their processes are judged by the helper's
	// postmortem record (lifecycle), which names the pane's process too.
	`
ALTER TABLE reservations ADD COLUMN pane_start INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reservations ADD COLUMN cgroup TEXT NOT NULL DEFAULT '';
ALTER TABLE identities ADD COLUMN pane_pid INTEGER NOT NULL DEFAULT 0;
ALTER TABLE identities ADD COLUMN pane_start INTEGER NOT NULL DEFAULT 0;
ALTER TABLE identities ADD COLUMN boot_id TEXT NOT NULL DEFAULT '';
ALTER TABLE identities ADD COLUMN cgroup TEXT NOT NULL DEFAULT '';
ALTER TABLE identities ADD COLUMN stop_timeout_ms INTEGER NOT NULL DEFAULT 10000;
ALTER TABLE identities ADD COLUMN stop_since INTEGER NOT NULL DEFAULT 0;
ALTER TABLE identities ADD COLUMN stop_deadline INTEGER NOT NULL DEFAULT 0;
ALTER TABLE identities ADD COLUMN stop_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE identities ADD COLUMN stop_killed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE postmortems ADD COLUMN cgroup TEXT NOT NULL DEFAULT '';
`,
	// 5: the restart policy. The spec a generation was started with is kept
	// with the identity (the specs table loses it when the generation ends,
	// and the next start needs it), with what follows the end: the restart
	// state, when the next start is due (a delay outlives the daemon), its
	// reason, the number of restarts, the consecutive failures (backoff) and
	// the recent start times (the start limit). Rows from before have no
	// spec: they never restart, as before.
	`
ALTER TABLE identities ADD COLUMN spec_json TEXT NOT NULL DEFAULT '';
ALTER TABLE identities ADD COLUMN restart_state TEXT NOT NULL DEFAULT '';
ALTER TABLE identities ADD COLUMN restart_due INTEGER NOT NULL DEFAULT 0;
ALTER TABLE identities ADD COLUMN restart_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE identities ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE identities ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE identities ADD COLUMN starts_json TEXT NOT NULL DEFAULT '';
CREATE INDEX identities_restart_due ON identities (restart_due) WHERE restart_state = 'exited';
`,
	// 6: hosts (contract "Beyond one host"). A reservation row records its
	// owner's host — name, machine id, boot id — so that an owner on another
	// host is never probed by pid here (its liveness is unknown) and one of
	// this host's earlier boots is dead; a published generation records the
	// host it runs on. Rows from before are this host's, as they always were.
	`
ALTER TABLE reservations ADD COLUMN host TEXT NOT NULL DEFAULT '';
ALTER TABLE reservations ADD COLUMN host_machine_id TEXT NOT NULL DEFAULT '';
ALTER TABLE reservations ADD COLUMN host_boot_id TEXT NOT NULL DEFAULT '';
ALTER TABLE identities ADD COLUMN host TEXT NOT NULL DEFAULT '';
ALTER TABLE identities ADD COLUMN host_machine_id TEXT NOT NULL DEFAULT '';
`,
}

// SchemaVersion is the user_version this binary writes and understands.
var SchemaVersion = len(migrations)

// migrate applies the missing steps, each in its own IMMEDIATE transaction.
// The version is read inside the transaction, so two processes opening a new
// file at once apply every step exactly once.
// A database already at SchemaVersion is recognised with a plain read, so a
// process opening the fence (the pane helper) never queues for the write lock
// behind a busy daemon; a busy step is retried until ctx ends.
func migrate(ctx context.Context, db *sql.DB, path string) error {
	var v int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err == nil && v == len(migrations) {
		return nil
	}
	for {
		var done bool
		err := retryBusy(ctx, func() (err error) {
			done, err = migrateStep(ctx, db, path)
			return err
		})
		if err != nil || done {
			return err
		}
	}
}

func migrateStep(ctx context.Context, db *sql.DB, path string) (done bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var v int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return false, err
	}
	switch {
	case v > len(migrations):
		return false, fence.SchemaNewer(path, v, len(migrations))
	case v == len(migrations):
		return true, tx.Commit()
	}
	if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
		return false, fmt.Errorf("fence: migration %d: %w", v+1, err)
	}
	// PRAGMA takes no bound parameters; v+1 is our own integer.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v+1)); err != nil {
		return false, err
	}
	return false, tx.Commit()
}
