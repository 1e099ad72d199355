// Package pgtest starts real PostgreSQL servers for the test suite: Debian's
// binaries (/usr/lib/postgresql/*/bin), a fresh data directory in a private
// directory tree, a unix socket in that tree only (no TCP listener), fsync
// off, and a stop by the server's own pid when the test ends.
//
// PostgreSQL refuses to run as root, and the suite usually runs as root (CI,
// the project's machines). As root the server runs as the `postgres` system
// user Debian's package creates: the tree is made by us, owned by that user,
// 0700, under the system temporary directory (t.TempDir() is 0700 root and
// would be unreachable for it), and removed after. As any other user the
// server runs as that user.
//
// When a server cannot be had (no binaries, no postgres user as root) the
// test is skipped with one line saying why; `make test` installs Debian's
// postgresql package so that CI runs these tests. Setting SKC_TEST_PG_BIN to
// a directory holding initdb and postgres makes a failure to start fail the
// test instead, so a run that asked for PostgreSQL cannot pass by skipping.
//
// The package imports nothing of ours.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvBin names a directory with initdb and postgres; set, a server that
// cannot start fails the test instead of skipping it.
const EnvBin = "SKC_TEST_PG_BIN"

// Superuser is the role initdb creates; local connections are trusted
// because the socket lives in a 0700 directory of the server's user.
const Superuser = "postgres"

// port is fixed: the socket's name carries it (.s.PGSQL.5432), and each
// server has a directory of its own, so servers never collide on it.
const port = 5432

// env describes how servers can be run here, found once per process.
type env struct {
	bin  string              // directory of initdb and postgres
	cred *syscall.Credential // nil: run as ourselves
	uid  int
	gid  int
	why  error // non-nil: no server can be started here
}

var (
	envOnce sync.Once
	found   env
)

func probe() env {
	envOnce.Do(func() { found = detect() })
	return found
}

func detect() env {
	bin, err := findBin()
	if err != nil {
		return env{why: err}
	}
	e := env{bin: bin, uid: os.Getuid(), gid: os.Getgid()}
	if os.Geteuid() != 0 {
		return e
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return env{why: fmt.Errorf("running as root, and PostgreSQL refuses root: no `postgres` system user to run it as (%v); install Debian's postgresql package", err)}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	e.uid, e.gid = uid, gid
	e.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	return e
}

// findBin returns $SKC_TEST_PG_BIN, else the newest Debian version directory
// under /usr/lib/postgresql holding initdb and postgres.
func findBin() (string, error) {
	if d := os.Getenv(EnvBin); d != "" {
		return d, hasBinaries(d)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if hasBinaries(d) == nil {
			return d, nil
		}
	}
	return "", errors.New("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/{initdb,postgres}); `make test` installs Debian's postgresql package")
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func hasBinaries(dir string) error {
	for _, name := range []string{"initdb", "postgres"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%s: no executable %s", dir, name)
		}
	}
	return nil
}

// Available reports why no server can be started here (nil: one can).
func Available() error { return probe().why }

// Need skips the test when no server can be started (failing it instead
// when SKC_TEST_PG_BIN asked for PostgreSQL).
func Need(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		skipOrFail(t, err)
	}
}

func skipOrFail(t testing.TB, err error) {
	t.Helper()
	if os.Getenv(EnvBin) != "" {
		t.Fatalf("%s=%s: cannot start PostgreSQL: %v", EnvBin, os.Getenv(EnvBin), err)
	}
	t.Skipf("SKIP PostgreSQL tests: %v", err)
}

// Server is one running (or stopped) PostgreSQL server of this process.
type Server struct {
	root string // the private tree: data/, the socket, the log
	env  env

	mu   sync.Mutex
	cmd  *exec.Cmd     // the postmaster while running
	done chan struct{} // closed when cmd has been waited for
	werr error
}

// Start initializes and starts a server of the test's own, stopped and
// removed when the test ends. It skips the test when none can be started.
func Start(t testing.TB) *Server {
	t.Helper()
	Need(t)
	s, err := New()
	if err != nil {
		skipOrFail(t, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return s
}

// New initializes and starts a server; Close stops and removes it. Use it
// from TestMain (with Shared) or where no testing.TB is at hand.
func New() (*Server, error) {
	e := probe()
	if e.why != nil {
		return nil, e.why
	}
	s := &Server{env: e}
	if err := s.makeRoot(); err != nil {
		return nil, err
	}
	if err := s.initdb(); err != nil {
		s.removeRoot()
		return nil, err
	}
	if err := s.Start(); err != nil {
		s.removeRoot()
		return nil, err
	}
	return s, nil
}

// makeRoot creates the private tree under the system temporary directory,
// 0700, owned by the server's user. A short path: the socket's full path
// must fit a sockaddr_un (107 bytes).
func (s *Server) makeRoot() error {
	base := os.TempDir()
	if len(base) > 60 {
		base = "/tmp"
	}
	root, err := os.MkdirTemp(base, "skc-pgtest-")
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	s.root = root
	if err := os.Chmod(root, 0o700); err != nil {
		s.removeRoot()
		return fmt.Errorf("pgtest: %w", err)
	}
	if s.env.cred != nil {
		if err := os.Chown(root, s.env.uid, s.env.gid); err != nil {
			s.removeRoot()
			return fmt.Errorf("pgtest: %w", err)
		}
	}
	return nil
}

func (s *Server) removeRoot() {
	if s.root != "" {
		_ = os.RemoveAll(s.root)
	}
}

// command runs a PostgreSQL binary as the server's user, with a plain
// environment (C locale: initdb and the server's messages do not depend on
// the caller's).
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.env.bin, name), args...)
	cmd.Dir = s.root
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "LANG=C", "TZ=UTC", "HOME=" + s.root}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.env.cred, Setpgid: true}
	return cmd
}

func (s *Server) initdb() error {
	cmd := s.command("initdb", "-D", s.DataDir(), "-U", Superuser, "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	return nil
}

// DataDir is the server's data directory.
func (s *Server) DataDir() string { return filepath.Join(s.root, "data") }

// SocketDir is the directory of the server's unix socket (libpq's host).
func (s *Server) SocketDir() string { return s.root }

// LogFile is where the server writes its log.
func (s *Server) LogFile() string { return filepath.Join(s.root, "server.log") }

// URL is a connection URL for database db as the superuser over the socket.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres:///%s?host=%s&port=%d&user=%s&sslmode=disable", db, s.root, port, Superuser)
}

// serverArgs: the socket in our tree only, no TCP; fsync and its kin off
// (a test server's data need not survive a power cut); enough connections
// for several daemons' pools at once.
func (s *Server) serverArgs() []string {
	return []string{
		"-D", s.DataDir(), "-p", strconv.Itoa(port), "-k", s.root,
		"-c", "listen_addresses=", "-c", "unix_socket_permissions=0700",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300", "-c", "shared_buffers=16MB",
		"-c", "logging_collector=off", "-c", "log_min_messages=warning",
	}
}

// Start starts the stopped server on its existing data directory and waits
// until it accepts connections (the first start is New's). A test stopping
// the database mid-run and starting it again uses Stop and Start.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("pgtest: server already running")
	}
	logf, err := os.OpenFile(s.LogFile(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	cmd := s.command("postgres", s.serverArgs()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Start()
	logf.Close()
	if err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	s.cmd, s.done, s.werr = cmd, make(chan struct{}), nil
	go func(done chan struct{}) {
		err := cmd.Wait()
		s.mu.Lock()
		s.werr = err
		s.mu.Unlock()
		close(done)
	}(s.done)
	return s.waitReady(s.done)
}

// waitReady polls a connection until the server answers, the postmaster
// exits, or a generous deadline passes (a loaded 2-core machine).
func (s *Server) waitReady(done chan struct{}) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			conn.Close(ctx)
			cancel()
			return nil
		}
		cancel()
		select {
		case <-done:
			return fmt.Errorf("pgtest: postgres exited before accepting connections: %v\n%s", s.werr, s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: postgres not ready after 60s: %v\n%s", err, s.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.LogFile())
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return strings.TrimSpace(string(b))
}

// Stop stops the server with a fast shutdown (SIGINT to the postmaster, by
// the pid we started: open transactions are rolled back, clients are cut
// off) and waits for it to exit. Stopping a stopped server does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		// An immediate shutdown, then the postmaster itself: never another
		// process than the one we started.
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	s.mu.Lock()
	s.cmd = nil
	s.mu.Unlock()
	return nil
}

// Close stops the server and removes its tree.
func (s *Server) Close() error {
	err := s.Stop()
	s.removeRoot()
	return err
}

// CreateDB creates a fresh, empty database and returns its URL; tests share
// one server and keep apart by database.
func (s *Server) CreateDB(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("pgtest: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgtest: create database %s: %w", name, err)
	}
	return s.URL(name), nil
}
