package doctor

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	// The pure-Go SQLite driver the fence uses; registered as "sqlite".
	_ "modernc.org/sqlite"

	"github.com/skc-supervisor/skc-supervisor/home"
)

// roDSN opens path read-only: mode=ro never creates the database and never
// writes it; busy_timeout lets the check wait out a daemon's write transaction.
//
// The fence runs in WAL mode, and even a read-only connection creates the
// -wal and -shm files when they are missing (and, unable to checkpoint, leaves
// them behind). So when there is no -wal — no daemon has the database open and
// the last one shut down cleanly — the file is opened immutable=1, which
// touches nothing. With a -wal present (a live daemon, or one that crashed) the
// WAL content is part of the database and must be read: a plain read-only
// connection, which at most adds the -shm index a live daemon already has.
func roDSN(path string, busyMillis int64) string {
	q := url.Values{}
	q.Set("mode", "ro")
	if _, err := os.Lstat(path + "-wal"); errors.Is(err, fs.ErrNotExist) {
		q.Set("immutable", "1")
	}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyMillis))
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

func checkDatabase(ctx context.Context, cfg Config) []Result {
	if url, ok := fleetFence(cfg.Home); ok {
		return checkFleetFence(ctx, cfg, url)
	}
	p := filepath.Join(cfg.Home, home.FenceFile)
	fi, err := os.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return []Result{{Check: "database", Status: Skip, Message: p + " does not exist yet (serve creates it)"}}
	case err != nil:
		return []Result{{Check: "database", Status: Fail, Message: fmt.Sprintf("%s: %v", p, err),
			Fix: "make " + shq(p) + " readable by this user"}}
	case !fi.Mode().IsRegular():
		// Reported by checkFiles; opening a FIFO or following a symlink
		// here would only hang or read someone else's file.
		return []Result{{Check: "database", Status: Skip, Message: p + " is not a regular file (see file_mode)"}}
	}
	lines, err := integrityCheck(ctx, p, cfg)
	if err == nil && len(lines) == 1 && lines[0] == "ok" {
		return []Result{{Check: "database", Status: OK, Message: p + ": integrity_check ok"}}
	}
	msg := p + ": "
	if err != nil {
		msg += err.Error()
	} else {
		msg += "integrity_check: " + strings.Join(first(lines, 5), "; ")
	}
	return []Result{{Check: "database", Status: Fail, Message: msg,
		Fix: "stop the daemon, keep the damaged file (mv " + shq(p) + " " + shq(p+".damaged") +
			") and restore a backup, or salvage it with `sqlite3 " + shq(p+".damaged") +
			" .recover | sqlite3 " + shq(p) + "`; serve creates an empty fence when none exists, " +
			"which forgets every reservation and identity"}}
}

// integrityCheck runs PRAGMA integrity_check on a read-only connection.
func integrityCheck(ctx context.Context, path string, cfg Config) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	db, err := sql.Open("sqlite", roDSN(path, cfg.Timeout.Milliseconds()))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	rows, err := db.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		lines = append(lines, s)
	}
	return lines, rows.Err()
}

func first(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
