package pgtest

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func query(t *testing.T, url, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var s string
	if err := conn.QueryRow(ctx, sql).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestServer: a server of the test's own answers on its socket, with the
// settings the harness promises, not as root, and is gone after Stop.
func TestServer(t *testing.T) {
	s := Start(t)
	url := s.URL("postgres")
	if got := query(t, url, "SHOW fsync"); got != "off" {
		t.Errorf("fsync = %q, want off", got)
	}
	if got := query(t, url, "SHOW listen_addresses"); got != "" {
		t.Errorf("listen_addresses = %q, want empty (socket only)", got)
	}
	fi, err := os.Stat(s.DataDir())
	if err != nil {
		t.Fatal(err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; uid == 0 {
		t.Errorf("data directory owned by root: the server must not run as root")
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, url); err == nil {
		conn.Close(ctx)
		t.Fatal("connected to a stopped server")
	}
	// Started again on the same data directory: what was written is there.
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if got := query(t, url, "SELECT 'back'"); got != "back" {
		t.Errorf("got %q after restart", got)
	}
	root := s.root
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Close left %s behind (%v)", root, err)
	}
}

// TestDB: databases of the shared server are fresh and apart.
func TestDB(t *testing.T) {
	a, b := DB(t), DB(t)
	if a == b {
		t.Fatalf("two DB calls gave one database %s", a)
	}
	if got := query(t, a, "SELECT current_database()"); got == "" {
		t.Fatal("no database name")
	}
}

func TestDBName(t *testing.T) {
	if got := dbName("TestX/sub-test é", 7); got != "t7_testx_sub_test__" {
		t.Errorf("dbName = %q", got)
	}
}

// TestFindBinSaysWhy: a directory without the binaries is refused with a
// reason naming what is missing (the skip line shows it).
func TestFindBinSaysWhy(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvBin, dir)
	if _, err := findBin(); err == nil || !strings.Contains(err.Error(), "no executable initdb") {
		t.Fatalf("findBin with an empty %s: %v", EnvBin, err)
	}
}
