package pgtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// One server per test binary, started on first use and stopped by Main:
// initdb and a start cost about a second, a fresh database a few tens of ms.
var shared struct {
	sync.Mutex
	main bool // Main is running the tests: someone will stop the server
	s    *Server
	err  error
	n    atomic.Int64
}

// Main runs the package's tests and then stops and removes the shared
// server, if one was started. A package using DB calls it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
func Main(m *testing.M) int {
	shared.Lock()
	shared.main = true
	shared.Unlock()
	code := m.Run()
	shared.Lock()
	defer shared.Unlock()
	if shared.s != nil {
		if err := shared.s.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
		shared.s = nil
	}
	return code
}

// SharedServer returns the test binary's shared server, starting it on
// first use; it skips the test when no server can be started. Tests must
// not stop it (one that stops the database takes its own with Start).
func SharedServer(t testing.TB) *Server {
	t.Helper()
	Need(t)
	shared.Lock()
	defer shared.Unlock()
	if !shared.main {
		t.Fatal("pgtest: the shared server needs TestMain to call pgtest.Main (it stops the server)")
	}
	if shared.s == nil && shared.err == nil {
		shared.s, shared.err = New()
	}
	if shared.err != nil {
		skipOrFail(t, shared.err)
	}
	return shared.s
}

// DB creates a fresh database on the shared server for this test and
// returns its URL. Databases are not dropped: the server's tree goes as a
// whole when the tests end.
func DB(t testing.TB) string {
	t.Helper()
	s := SharedServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url, err := s.CreateDB(ctx, dbName(t.Name(), shared.n.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// dbName makes a database name from a test name: lower-case letters, digits
// and underscores, a serial for uniqueness, within PostgreSQL's 63 bytes.
func dbName(test string, n int64) string {
	var b strings.Builder
	for _, r := range strings.ToLower(test) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > 40 {
		name = name[:40]
	}
	return fmt.Sprintf("t%d_%s", n, name)
}
