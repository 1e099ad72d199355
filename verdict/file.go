package verdict

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// file is verdicts.jsonl: an O_APPEND file written with one write(2) per
// record, and the sequence of the last record known to be in it.
type file struct {
	path string

	mu     sync.Mutex
	f      *os.File
	fd     int
	seq    int64                               // highest sequence written to the file (from its tail at open)
	tailTS time.Time                           // @timestamp of the tail record found at the last open
	needLF bool                                // the file ends in a torn line: start the next write with LF
	fault  func(fd int, b []byte) (int, error) // tests: replaces the write(2)
}

func newFile(path string) *file { return &file{path: path, fd: -1} }

// open opens (creating 0600) the file and reads the sequence of its last
// complete line. When the file holds no complete record (new, or just rotated
// by logrotate's create), the rotated copy path.1 is consulted, so a restart
// right after a rotation does not copy the whole journal into the new file.
func (fl *file) open() (int64, error) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.openLocked()
}

func (fl *file) openLocked() (int64, error) {
	if fl.f != nil {
		return fl.seq, nil
	}
	// O_NOFOLLOW and the checks below hold a reopen (SIGHUP, after a
	// rotation) to what serve's start checks of the home's files: a symlink
	// or a second hard link put in the file's place would have the daemon
	// write its verdicts wherever they lead.
	// O_NONBLOCK: a FIFO put there must not hold the open (and the daemon
	// with it, deaf to SIGTERM) until something reads it; Fd below makes
	// the descriptor blocking again, as the writes expect.
	f, err := os.OpenFile(fl.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if errors.Is(err, syscall.ELOOP) {
		return fl.seq, fmt.Errorf("verdict: %s is a symlink; the verdict log must be a file of its own", fl.path)
	}
	if err != nil {
		return fl.seq, err
	}
	st, err := f.Stat()
	if err == nil {
		err = ownFile(fl.path, st)
	}
	if err != nil {
		f.Close()
		return fl.seq, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		_ = f.Chmod(0o600) // verdicts name paths and pids: owner only
	}
	tail, torn, err := tailRecord(fl.path)
	if err != nil {
		f.Close()
		return fl.seq, err
	}
	if tail.Sequence == 0 {
		if old, _, err := tailRecord(fl.path + ".1"); err == nil {
			tail = old
		}
	}
	fl.f, fl.fd, fl.needLF = f, int(f.Fd()), torn
	if tail.Sequence > fl.seq {
		fl.seq, fl.tailTS = tail.Sequence, tail.Timestamp
	}
	return fl.seq, nil
}

// ownFile refuses what open found at the path unless it is a regular file
// of ours with no other name.
func ownFile(path string, st os.FileInfo) error {
	if !st.Mode().IsRegular() {
		return fmt.Errorf("verdict: %s is not a regular file", path)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Nlink > 1 {
		return fmt.Errorf("verdict: %s has %d hard links; the verdict log must be a file of its own", path, sys.Nlink)
	}
	return nil
}

// reopen closes the file and opens the path again (SIGHUP after logrotate).
func (fl *file) reopen() error {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.f != nil {
		fl.f.Close()
		fl.f, fl.fd = nil, -1
	}
	_, err := fl.openLocked()
	return err
}

// close closes the file; a later write would reopen it.
func (fl *file) close() error {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.f == nil {
		return nil
	}
	err := fl.f.Close()
	fl.f, fl.fd = nil, -1
	return err
}

// tail returns the sequence and timestamp of the file's tail record.
func (fl *file) tail() (int64, time.Time) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.seq, fl.tailTS
}

// filed returns the highest sequence in the file.
func (fl *file) filed() int64 {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.seq
}

// setSeq lowers or raises the watermark (a journal that was replaced).
func (fl *file) setSeq(seq int64) {
	fl.mu.Lock()
	fl.seq = seq
	fl.mu.Unlock()
}

// errShortWrite reports a write(2) that wrote part of a record.
var errShortWrite = errors.New("short write")

// write appends r as one line with a single write(2). A record at or below the
// watermark is skipped (never duplicated). A failed or short write leaves the
// watermark unchanged, so the record is written again later; a partial line
// left behind is ended with LF by the next write rather than glued to it.
func (fl *file) write(r Record) error {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if r.Sequence <= fl.seq {
		return nil
	}
	if _, err := fl.openLocked(); err != nil {
		return err
	}
	if r.Sequence <= fl.seq { // the reopened file already had it
		return nil
	}
	buf := make([]byte, 0, 512)
	if fl.needLF {
		buf = append(buf, '\n')
	}
	buf = r.AppendJSON(buf)
	buf = append(buf, '\n')
	write := writeOnce
	if fl.fault != nil {
		write = fl.fault
	}
	n, err := write(fl.fd, buf)
	if n > 0 && n < len(buf) {
		fl.needLF = true
	}
	if err == nil && n < len(buf) {
		err = errShortWrite
	}
	if err != nil {
		return fmt.Errorf("append verdict %d to %s: %w", r.Sequence, fl.path, err)
	}
	fl.needLF = false
	fl.seq = r.Sequence
	return nil
}

// writeOnce is one write(2), repeated only when interrupted before writing
// anything: a second write for the rest of a record could interleave with
// another appender, so a short write is reported instead.
func writeOnce(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR && n <= 0 {
			continue
		}
		if n < 0 {
			n = 0
		}
		return n, err
	}
}

// tailRecord returns the last complete line of path that parses as a record
// with a sequence, and whether the file ends in a torn line (no final LF). A
// missing or empty file gives a zero Record. It reads backwards in chunks up
// to tailScanLimit bytes, so a long file costs one small read.
func tailRecord(path string) (Record, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Record{}, false, err
	}
	size := st.Size()
	if size == 0 || !st.Mode().IsRegular() {
		return Record{}, false, nil
	}
	var last [1]byte
	if _, err := f.ReadAt(last[:], size-1); err != nil {
		return Record{}, false, err
	}
	torn := last[0] != '\n'
	r, err := scanBackwards(f, size)
	return r, torn, err
}

// scanBackwards looks for the last complete, parseable line before size.
func scanBackwards(f io.ReaderAt, size int64) (Record, error) {
	const chunk = 64 << 10
	var tail []byte // bytes after the last LF seen so far (partial line)
	end := size
	for end > 0 && size-end < tailScanLimit {
		start := end - chunk
		if start < 0 {
			start = 0
		}
		buf := make([]byte, end-start, int(end-start)+len(tail))
		if _, err := f.ReadAt(buf, start); err != nil && err != io.EOF {
			return Record{}, err
		}
		buf = append(buf, tail...)
		// Every complete line in buf ends with LF; the first segment may be
		// partial unless start == 0.
		lines := bytes.Split(buf, []byte{'\n'})
		tail = lines[0]
		first, last := 1, len(lines)-1
		if start == 0 {
			first = 0
		}
		if end == size {
			// What follows the file's final LF is empty or a torn line.
			last--
		}
		for i := last; i >= first; i-- {
			if r, err := ParseLine(lines[i]); err == nil && r.Sequence > 0 {
				return r, nil
			}
		}
		if start == 0 {
			break
		}
		end = start
	}
	return Record{}, nil
}
