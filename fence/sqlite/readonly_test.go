package sqlite

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/fencetest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestReadOnlyFence: the fence's files become immutable (chattr +i: what a
// read-only disk looks like to the process, even to root) under a process that
// has them open and mapped. Its reads and writes must answer fence_unavailable
// and the process must live on; once the files are writable again the same
// Store works.
//
// The process is a helper, like the daemon a separate process from the one
// that runs chattr: a fault it cannot survive shows as its death rather than
// the test binary's. Its last commit comes right before the files are frozen,
// so its first read must write a fresh read mark into the -shm mapping — the
// store that, on a frozen page, raises SIGBUS (see writable.go).
func TestReadOnlyFence(t *testing.T) {
	unavailable := "reader " + verdict.CodeFenceUnavailable + " cache " + verdict.CodeFenceUnavailable +
		" writer " + verdict.CodeFenceUnavailable
	runReadOnly(t, "", func(round int, got string) bool { return got == unavailable })
}

// TestReadOnlyFenceFault is TestReadOnlyFence with writable's check turned
// off, so that SQLite really writes into the frozen -shm mapping and takes
// the SIGBUS: modernc.org/sqlite's SEH emulation must turn it into
// SQLITE_IOERR_IN_PAGE (fence_unavailable). This is the path a file frozen
// between the check and SQLite's access takes. Not under the race detector,
// where the fault lands in ThreadSanitizer's C code and kills the process
// whatever the library does (writable.go).
func TestReadOnlyFenceFault(t *testing.T) {
	if raceBuild {
		t.Skip("a fault in the -shm mapping is fatal under the race detector (writable.go)")
	}
	// Reads may still succeed (SQLite falls back to a read-only mapping); a
	// write never does.
	un := verdict.CodeFenceUnavailable
	allowed := map[string]bool{}
	for _, r := range []string{"ok", un} {
		for _, c := range []string{"ok", un} {
			allowed["reader "+r+" cache "+c+" writer "+un] = true
		}
	}
	runReadOnly(t, "FENCE_NO_WRITABLE_CHECK=1", func(round int, got string) bool {
		t.Logf("round %d: %s", round, got)
		return allowed[got]
	})
}

// runReadOnly freezes the files of a helper's open fence, has it read and write
// twice (frozen says whether each round's answer is right), thaws them and
// checks that the same Store reads and writes again.
func runReadOnly(t *testing.T, env string, frozen func(round int, got string) bool) {
	chattr, err := exec.LookPath("chattr")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and chattr (e2fsprogs) to make files immutable")
	}
	path, dir := procWorld(t)
	c := startChild(t, "readonly", "FENCE_DB="+path, "FENCE_STATE_DIR="+dir, env)
	if got := c.Recv(t); got != "ready" {
		t.Fatalf("child said %q", got)
	}
	var files []string
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if _, err := os.Stat(p); err == nil {
			files = append(files, p)
		}
	}
	if len(files) != 3 {
		t.Fatalf("want the database, -wal and -shm files, have %v", files)
	}
	immutable := func(on bool) error {
		flag := map[bool]string{true: "+i", false: "-i"}[on]
		out, err := exec.Command(chattr, append([]string{flag}, files...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("chattr %s: %v: %s", flag, err, out)
		}
		return nil
	}
	if err := immutable(true); err != nil {
		t.Skipf("this filesystem cannot make files immutable: %v", err)
	}
	t.Cleanup(func() { _ = immutable(false) }) // or TempDir cannot remove them

	for round := 1; round <= 2; round++ { // twice: a refusal leaves nothing behind
		c.Send(t, "ops frozen")
		if got := c.Recv(t); !frozen(round, got) {
			t.Fatalf("round %d on frozen files: %q", round, got)
		}
	}
	if err := immutable(false); err != nil {
		t.Fatal(err)
	}
	c.Send(t, "ops thawed")
	if got := c.Recv(t); got != "reader ok cache ok writer ok" {
		t.Fatalf("after the files are writable again: %q", got)
	}
	c.Send(t, "quit")
	if err := c.Cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	checkIntegrity(t, path)
}

// helperReadOnly opens the fence, commits (so that the next read needs a fresh
// read mark), says "ready", then for each "ops SID" line runs one read on the
// reader pool, one through the read cache and one Reserve+Release on the
// writer, and answers "reader R cache C writer W" (ok or the error code).
func helperReadOnly() int {
	if os.Getenv("FENCE_NO_WRITABLE_CHECK") != "" {
		testSkipWritable = true
	}
	s, err := Open(os.Getenv("FENCE_DB"), fence.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	dir := os.Getenv("FENCE_STATE_DIR")
	if err := readOnlyCycle(s, dir, "warm"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || f[0] != "ops" {
			return 0
		}
		_, rerr := s.Reservations(ctx)
		_, cerr := s.CachedIdentityReads(ctx, fence.Identity{StateDir: dir, SessionID: "warm"}, 10)
		werr := readOnlyCycle(s, dir, f[1])
		fmt.Printf("reader %s cache %s writer %s\n", okOr(rerr), okOr(cerr), okOr(werr))
		if werr != nil && verdict.CodeOf(werr) == "" {
			fmt.Fprintln(os.Stderr, "writer:", werr)
		}
	}
	return 0
}

// readOnlyCycle reserves sid and releases it again.
func readOnlyCycle(s *Store, dir, sid string) error {
	res, err := s.Reserve(ctx, fence.Identity{StateDir: dir, SessionID: sid}, fencetest.SpecFor(dir, sid))
	if err != nil {
		return err
	}
	if res.Outcome != fence.Reserved {
		return fmt.Errorf("reserve %s: %s", sid, res.Outcome)
	}
	return s.Release(ctx, res.Reservation.ID)
}

func okOr(err error) string {
	if err == nil {
		return "ok"
	}
	if code := verdict.CodeOf(err); code != "" {
		return code
	}
	return "uncoded"
}
