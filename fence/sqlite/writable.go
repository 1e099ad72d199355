package sqlite

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Why every read and write first asks whether the fence's -shm file can be written.
//
// In WAL mode SQLite keeps the wal-index in the -shm file, mapped shared into
// every connection, and writes it on reads too: a read transaction that finds
// no read mark at the current end of the WAL stores one (walTryBeginRead). When
// the files become immutable (chattr +i) or their filesystem read-only under a
// running process, the kernel write-protects the mapped pages (ext4 writes them
// back as the flag is set) and the next store into the mapping takes SIGBUS.
//
// modernc.org/sqlite (v1.62.0) emulates SQLite's Windows SEH for this: with
// debug.SetPanicOnFault armed around wal.c's mapped accesses, the fault becomes
// a Go panic that it recovers as SQLITE_IOERR_IN_PAGE, and the process lives
// on. Under the race detector that cannot work: sync/atomic operations are
// executed by ThreadSanitizer's C code on the system stack
// (__tsan_go_atomic32_store), and a fault there is not turned into a panic the
// runtime can unwind ("unexpected return pc for runtime.sigpanic", then
// "fatal error: unsafe.Slice: len out of range" from its own traceback
// printer). Read marks are stored with AtomicStore, so a -race daemon died on
// the first fence read or write after its files were frozen, whenever that
// read needed a new mark (a commit since the last read). A newer library does
// not help: libc v1.81.2 implements the atomics the same way.
//
// So the fence answers fence_unavailable before SQLite touches the mapping:
// access(2) with W_OK on the -shm file fails EPERM when it is immutable and
// EROFS on a read-only filesystem. The -shm file is the only one mapped (the
// database file is read and written with pread/pwrite, mmap_size being 0), so
// it is the one whose state decides whether SQLite can fault; a frozen database
// or -wal file alone makes SQLite fail cleanly (SQLITE_READONLY, SQLITE_IOERR).
// One path lookup per operation (BenchmarkWritable) buys that, and the operator
// gets the actual cause instead of "disk I/O error". A file frozen between this
// check and SQLite's access still faults: in a normal build the SEH emulation
// answers SQLITE_IOERR_IN_PAGE (fence_unavailable too, TestReadOnlyFenceFault);
// only a -race build can die in that window.
//
// Other access errors pass: EACCES (a mode change) does not stop SQLite, which
// writes through the descriptor it already has, nor does a missing -shm file
// (SQLite creates it).

// testSkipWritable turns the check off (tests only): TestReadOnlyFenceFault
// lets SQLite meet the frozen mapping itself.
var testSkipWritable bool

// writable refuses op with fence_unavailable when the fence's -shm file is
// immutable or on a read-only filesystem. Called before every operation that
// reaches SQLite.
func (s *Store) writable(op string) error {
	if testSkipWritable {
		return nil
	}
	err := unix.Access(s.shm, unix.W_OK)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EROFS) {
		return verdict.Errorf(verdict.CodeFenceUnavailable, map[string]any{"path": s.shm, "op": op},
			"fence %s: %s cannot be written (immutable, or on a read-only filesystem): %w", op, s.shm, err)
	}
	return s.samePath(op)
}

// samePath refuses op with fence_unavailable when the database's path no
// longer names the file this handle opened: removed (or replaced) under a
// running daemon, its writes went on into the unlinked file while every pane
// helper, opening the path, found an empty fence of its own, created there —
// creates answered published for agents whose helpers gave up (exit 75), and
// a new reader connection of this handle would have read the other file.
// One stat per operation, beside writable's access.
func (s *Store) samePath(op string) error {
	if s.ino == 0 {
		return nil // Open's own steps, before it recorded the file
	}
	var st unix.Stat_t
	err := unix.Stat(s.path, &st)
	if err == nil && uint64(st.Dev) == s.dev && st.Ino == s.ino {
		return nil
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return nil // unreadable (a mode change): SQLite, which holds its descriptors, decides
	}
	return verdict.Errorf(verdict.CodeFenceUnavailable, map[string]any{"path": s.path, "op": op},
		"fence %s: %s was removed or replaced while this process had it open; restart the daemon (what it recorded since is in the file it opened)", op, s.path)
}
