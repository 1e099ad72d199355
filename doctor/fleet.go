package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5"

	"github.com/skc-supervisor/skc-supervisor/fence/postgres"
	"github.com/skc-supervisor/skc-supervisor/home"
)

// fleetFence returns the PostgreSQL connection string the home's daemon uses,
// from the record it keeps for its pane helpers (home.FenceConfFile): present
// only while the home's fence is a fleet's. ok false: the embedded SQLite
// fence (or a record that cannot be read, which checkFiles reports).
func fleetFence(homeDir string) (string, bool) {
	c, ok, err := home.ReadFenceConf(homeDir)
	if !ok || err != nil || c.Fence == home.FenceSQLite {
		return "", false
	}
	return c.Fence, true
}

// checkFleetFence is the database check of a home whose fence is PostgreSQL:
// the database answers, and its schema is one this binary can use. It only
// reads (doctor never migrates): a plain connection and two SELECTs.
func checkFleetFence(ctx context.Context, cfg Config, url string) []Result {
	name := postgres.Describe(url)
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	v, ok, err := fleetSchema(ctx, url)
	switch {
	case err != nil:
		return []Result{{Check: "database", Status: Fail, Message: fmt.Sprintf("%s: %v", name, err),
			Fix: "start the PostgreSQL server or fix its address, or the password in PGPASSFILE " +
				"(~/.pgpass: the daemon and its pane helpers read it); while it does not answer, " +
				"creates are refused fence_unavailable"}}
	case !ok:
		return []Result{{Check: "database", Status: Skip, Message: name + ": no fence schema yet (serve creates it)"}}
	case v > postgres.SchemaVersion:
		return []Result{{Check: "database", Status: Fail,
			Message: fmt.Sprintf("%s: schema version %d is newer than this binary's %d", name, v, postgres.SchemaVersion),
			Fix:     "run the newer skc-supervisor that migrated it (serve refuses it: fence_schema_newer)"}}
	}
	return []Result{{Check: "database", Status: OK, Message: fmt.Sprintf("%s: answers, schema version %d", name, v)}}
}

// fleetSchema reads the fence schema's version; ok false when the database
// has no fence schema yet.
func fleetSchema(ctx context.Context, url string) (v int, ok bool, err error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('fence_schema') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return 0, false, err
	}
	err = conn.QueryRow(ctx, `SELECT version FROM fence_schema`).Scan(&v)
	return v, err == nil, err
}

// homeFiles are the files of the home checkFiles looks at: the fence's —
// the SQLite file, or, while the home's fence is PostgreSQL, only the record
// of it (the SQLite file is then not the daemon's) — the verdict log and the
// instance lock. The record is 0600 like the rest.
func homeFiles(homeDir string) []string {
	var names []string
	if _, ok := fleetFence(homeDir); !ok {
		names = append(names, home.FenceFile)
	}
	if _, err := os.Lstat(filepath.Join(homeDir, home.FenceConfFile)); !errors.Is(err, fs.ErrNotExist) {
		names = append(names, home.FenceConfFile)
	}
	return append(names, home.VerdictsFile, home.LockFile)
}
