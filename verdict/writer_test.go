package verdict

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

const waitLimit = 20 * time.Second // generous: conditions, not timings

var errInjected = errors.New("injected: no space left on device")

func testLog(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
}

func newTestWriter(t *testing.T, j Journal, path string) *Writer {
	t.Helper()
	w, err := NewWriter(j, path, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func rec(i int) Record {
	return Record{Action: ActionCreate, Outcome: OutcomeSuccess, Verdict: VerdictPublished,
		Reason: ReasonCreated, Evidence: map[string]any{"i": num(i)}}
}

func num(i int) any { return fmt.Sprint(i) }

func flush(t *testing.T, w *Writer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// fileSeqs reads the verdict file: every line must be whole JSON with the ECS
// fields; it returns the sequences in file order. torn lines (allowed only
// where a test made them) are counted, not parsed.
func fileSeqs(t *testing.T, path string, allowTorn int) []int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("file does not end with LF")
	}
	var seqs []int64
	torn := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := append(sc.Bytes(), '\n')
		r, err := ParseLine(line)
		if err != nil {
			torn++
			continue
		}
		assertECS(t, line)
		seqs = append(seqs, r.Sequence)
	}
	if torn != allowTorn {
		t.Fatalf("%d unparseable lines, want %d", torn, allowTorn)
	}
	return seqs
}

// assertContiguous checks seqs is exactly from..to in order.
func assertContiguous(t *testing.T, seqs []int64, from, to int64) {
	t.Helper()
	if int64(len(seqs)) != to-from+1 {
		t.Fatalf("got %d records (%v…), want %d..%d", len(seqs), head(seqs), from, to)
	}
	for i, s := range seqs {
		if s != from+int64(i) {
			t.Fatalf("record %d has sequence %d, want %d (%v)", i, s, from+int64(i), head(seqs))
		}
	}
}

func head(s []int64) []int64 { return s[:min(len(s), 20)] }

func TestEmitJournalsAndFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "verdicts.jsonl")
	j := newMemJournal()
	w := newTestWriter(t, j, path)
	defer w.Close()
	for i := 1; i <= 5; i++ {
		got, err := w.Emit(context.Background(), rec(i))
		if err != nil || got.Sequence != int64(i) || got.Timestamp.IsZero() {
			t.Fatalf("emit %d: %+v %v", i, got, err)
		}
	}
	// Emit returns after the file append: no flush needed.
	assertContiguous(t, fileSeqs(t, path, 0), 1, 5)
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	if len(j.all()) != 5 {
		t.Fatal("journal")
	}
}

func TestSequenceContinuityAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "verdicts.jsonl")
	jpath := filepath.Join(dir, "journal.jsonl")
	for run := 0; run < 3; run++ {
		j := openFileJournal(t, jpath) // what a restarted daemon finds in its database
		w := newTestWriter(t, j, path)
		for i := 0; i < 4; i++ {
			if _, err := w.Emit(context.Background(), rec(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	assertContiguous(t, fileSeqs(t, path, 0), 1, 12)
}

func TestCatchUpAfterCrash(t *testing.T) {
	// The previous daemon journaled 1..6 but died having filed only 1..3 (the
	// last one torn half-way).
	dir := t.TempDir()
	path := filepath.Join(dir, "verdicts.jsonl")
	j := newMemJournal()
	var buf []byte
	for i := 1; i <= 6; i++ {
		r, _ := j.AppendVerdict(context.Background(), normalize(rec(i)))
		if i <= 2 {
			buf = append(buf, r.Line()...)
		} else if i == 3 {
			buf = append(buf, r.Line()[:40]...)
		}
	}
	if err := os.WriteFile(path, buf, 0o600); err != nil {
		t.Fatal(err)
	}
	w := newTestWriter(t, j, path)
	defer w.Close()
	flush(t, w)
	if _, err := w.Emit(context.Background(), rec(7)); err != nil {
		t.Fatal(err)
	}
	assertContiguous(t, fileSeqs(t, path, 1), 1, 7)
}

func TestFileFailureRecovered(t *testing.T) {
	path := filepath.Join(t.TempDir(), "verdicts.jsonl")
	j := newMemJournal()
	w := newTestWriter(t, j, path)
	defer w.Close()
	emitN(t, w, 3)
	var failing atomic.Bool
	failing.Store(true)
	w.setFault(failWhile(failing.Load))
	emitN(t, w, 5) // journaled; the file append fails
	if got := fileSeqs(t, path, 0); len(got) != 3 {
		t.Fatalf("file has %v while failing", got)
	}
	failing.Store(false)
	emitN(t, w, 2) // the next record triggers the catch-up first
	flush(t, w)
	assertContiguous(t, fileSeqs(t, path, 0), 1, 10)
}

func TestPeriodicRetryWithoutNewRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "verdicts.jsonl")
	w := newTestWriter(t, newMemJournal(), path)
	defer w.Close()
	var failing atomic.Bool
	failing.Store(true)
	w.setFault(failWhile(failing.Load))
	emitN(t, w, 4)
	failing.Store(false)
	waitFor(t, func() bool { return len(fileSeqs(t, path, 0)) == 4 }) // no Emit, no Flush: the timer retries
	assertContiguous(t, fileSeqs(t, path, 0), 1, 4)
}

func TestPathIsDirectoryThenFixed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "verdicts.jsonl")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	w := newTestWriter(t, newMemJournal(), path) // not fatal: the journal still records
	defer w.Close()
	emitN(t, w, 3)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	flush(t, w)
	emitN(t, w, 1)
	assertContiguous(t, fileSeqs(t, path, 0), 1, 4)
}

func TestFiledInterleavedWithEmit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "verdicts.jsonl")
	j := newMemJournal()
	w := newTestWriter(t, j, path)
	defer w.Close()
	emitN(t, w, 2)
	// The fence journals 3 and 4 in its own transactions; 4's Filed arrives
	// first and 3's never does: the journal fills the gap.
	r3, _ := j.AppendVerdict(context.Background(), normalize(rec(3)))
	r4, _ := j.AppendVerdict(context.Background(), normalize(rec(4)))
	_ = r3
	w.Filed(r4)
	w.Filed(r4) // twice: harmless
	emitN(t, w, 1)
	flush(t, w)
	assertContiguous(t, fileSeqs(t, path, 0), 1, 5)
}

func TestJournalFailureRetried(t *testing.T) {
	path := filepath.Join(t.TempDir(), "verdicts.jsonl")
	j := newMemJournal()
	j.set(func(j *memJournal) { j.failN = 3 })
	w := newTestWriter(t, j, path)
	defer w.Close()
	r, err := w.Emit(context.Background(), rec(1))
	if err != nil && !errors.Is(err, ErrDeferred) {
		t.Fatal(err)
	}
	_ = r
	flush(t, w)
	assertContiguous(t, fileSeqs(t, path, 0), 1, 1)
}

func TestBudgetDefersAndRetries(t *testing.T) {
	old := budget
	budget = 10 * time.Millisecond
	defer func() { budget = old }()
	path := filepath.Join(t.TempDir(), "verdicts.jsonl")
	j := newMemJournal()
	gate := make(chan struct{})
	j.set(func(j *memJournal) { j.gate = gate })
	w := newTestWriter(t, j, path)
	defer w.Close()
	_, err := w.Emit(context.Background(), rec(1))
	if !errors.Is(err, ErrDeferred) || CodeOf(err) != CodeTimeout {
		t.Fatalf("want deferred, got %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := w.Emit(ctx, rec(2)); !errors.Is(err, ErrDeferred) {
		t.Fatalf("cancelled caller: %v", err)
	}
	close(gate)
	flush(t, w)
	assertContiguous(t, fileSeqs(t, path, 0), 1, 2)
}

func TestReopenAfterRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "verdicts.jsonl")
	j := newMemJournal()
	w := newTestWriter(t, j, path)
	emitN(t, w, 3)
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	emitN(t, w, 1) // still goes to the renamed file (open descriptor)
	if err := w.Reopen(); err != nil {
		t.Fatal(err)
	}
	emitN(t, w, 2)
	w.Close()
	assertContiguous(t, fileSeqs(t, path+".1", 0), 1, 4)
	assertContiguous(t, fileSeqs(t, path, 0), 5, 6)

	// A restart right after a rotation (empty new file) must not copy the whole
	// journal into the new file: the rotated copy tells where the file was.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	w = newTestWriter(t, j, path)
	emitN(t, w, 1)
	w.Close()
	assertContiguous(t, fileSeqs(t, path, 0), 7, 7)
}

func TestJournalReplaced(t *testing.T) {
	// The file is ahead of a fresh database: the new records are appended,
	// not skipped as duplicates.
	path := filepath.Join(t.TempDir(), "verdicts.jsonl")
	w := newTestWriter(t, newMemJournal(), path)
	emitN(t, w, 5)
	w.Close()
	w = newTestWriter(t, newMemJournal(), path)
	emitN(t, w, 2)
	w.Close()
	seqs := fileSeqs(t, path, 0)
	if fmt.Sprint(seqs) != "[1 2 3 4 5 1 2]" {
		t.Fatalf("%v", seqs)
	}
	// A new database that already grew past the file's last sequence is told
	// apart by the timestamp of that record.
	j := newMemJournal()
	for i := 0; i < 3; i++ {
		j.AppendVerdict(context.Background(), normalize(rec(i)))
	}
	w = newTestWriter(t, j, path)
	emitN(t, w, 1)
	w.Close()
	seqs = fileSeqs(t, path, 0)
	if fmt.Sprint(seqs) != "[1 2 3 4 5 1 2 1 2 3 4]" {
		t.Fatalf("%v", seqs)
	}
}

func TestConcurrentWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "verdicts.jsonl")
	j := newMemJournal()
	w := newTestWriter(t, j, path)
	defer w.Close()
	const goroutines, each = 16, 40
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				r := rec(i)
				r.Evidence["pad"] = string(bytes.Repeat([]byte{'a' + byte(g)}, 200*(i%7)))
				if g%4 == 0 { // a "fence" journaling on its own and handing over
					stored, err := j.AppendVerdict(context.Background(), normalize(r))
					if err != nil {
						t.Error(err)
					}
					w.Filed(stored)
					continue
				}
				if _, err := w.Emit(context.Background(), r); err != nil && !errors.Is(err, ErrDeferred) {
					t.Error(err)
				}
			}
		}(g)
	}
	wg.Wait()
	flush(t, w)
	assertContiguous(t, fileSeqs(t, path, 0), 1, goroutines*each)
}

func TestCloseIdempotentAndEmitAfterClose(t *testing.T) {
	w := newTestWriter(t, newMemJournal(), filepath.Join(t.TempDir(), "v.jsonl"))
	emitN(t, w, 1)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Emit(context.Background(), rec(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("%v", err)
	}
	ch, cancel := w.Subscribe(0)
	defer cancel()
	if _, ok := <-ch; ok {
		t.Fatal("subscription after close delivered")
	}
}

func TestNewWriterArgs(t *testing.T) {
	if _, err := NewWriter(nil, "x", zerolog.Nop()); err == nil {
		t.Fatal("nil journal")
	}
	if _, err := NewWriter(newMemJournal(), "", zerolog.Nop()); err == nil {
		t.Fatal("empty path")
	}
}

func emitN(t *testing.T, w *Writer, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := w.Emit(context.Background(), rec(i)); err != nil {
			t.Fatal(err)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestShortWriteLeavesTornLineThenRecovers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "verdicts.jsonl")
	w := newTestWriter(t, newMemJournal(), path)
	defer w.Close()
	emitN(t, w, 2)
	var once sync.Once
	w.setFault(func(fd int, b []byte) (int, error) {
		short := false
		once.Do(func() { short = true })
		if short { // half a record reaches the disk, then ENOSPC
			n, _ := unix.Write(fd, b[:len(b)/2])
			return n, unix.ENOSPC
		}
		return writeOnce(fd, b)
	})
	emitN(t, w, 3)
	flush(t, w)
	assertContiguous(t, fileSeqs(t, path, 1), 1, 5)
}

func TestFileFailureRecoveredAfterRestart(t *testing.T) {
	dir := t.TempDir()
	path, jpath := filepath.Join(dir, "verdicts.jsonl"), filepath.Join(dir, "journal.jsonl")
	w := newTestWriter(t, openFileJournal(t, jpath), path)
	emitN(t, w, 2)
	w.setFault(failWhile(func() bool { return true }))
	emitN(t, w, 3) // journaled only; Close cannot file them either
	w.Close()
	assertContiguous(t, fileSeqs(t, path, 0), 1, 2)
	w = newTestWriter(t, openFileJournal(t, jpath), path) // the restarted daemon
	defer w.Close()
	flush(t, w)
	emitN(t, w, 1)
	assertContiguous(t, fileSeqs(t, path, 0), 1, 6)
}

func BenchmarkEmit(b *testing.B) {
	path := filepath.Join(b.TempDir(), "verdicts.jsonl")
	w, err := NewWriter(newMemJournal(), path, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	r := exampleRecords()[0]
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := w.Emit(context.Background(), r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMarshal(b *testing.B) {
	r := exampleRecords()[0]
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = r.AppendJSON(make([]byte, 0, 512))
	}
}

func TestReopenFailsThenRecovers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "verdicts.jsonl")
	w := newTestWriter(t, newMemJournal(), path)
	defer w.Close()
	emitN(t, w, 2)
	os.Rename(path, path+".1")
	if err := os.Mkdir(path, 0o700); err != nil { // something else took the name
		t.Fatal(err)
	}
	if err := w.Reopen(); err == nil {
		t.Fatal("reopen onto a directory succeeded")
	}
	emitN(t, w, 3) // journaled; the file is retried
	os.Remove(path)
	flush(t, w)
	assertContiguous(t, fileSeqs(t, path+".1", 0), 1, 2)
	assertContiguous(t, fileSeqs(t, path, 0), 3, 5)
}

// TestReopenRefusesALinkInItsPlace: a symlink or a second hard link put in the
// log's place before a SIGHUP is refused as serve's start refuses it — the
// daemon wrote its verdicts wherever the link led (found outside-in) — and
// the records written meanwhile reach the file once it is the log's own again.
func TestReopenRefusesALinkInItsPlace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "verdicts.jsonl")
	target := filepath.Join(dir, "elsewhere")
	w := newTestWriter(t, newMemJournal(), path)
	defer w.Close()
	emitN(t, w, 2)
	os.Rename(path, path+".1")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if err := w.Reopen(); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("reopen onto a symlink: %v", err)
	}
	emitN(t, w, 1)
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Fatalf("the symlink's target was written: %v", err)
	}
	// The link replaces the symlink in one rename: the writer retries its
	// open on every write, and would make a file of its own in a gap.
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(target, path+".link"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".link", path); err != nil {
		t.Fatal(err)
	}
	if err := w.Reopen(); err == nil || !strings.Contains(err.Error(), "hard links") {
		t.Fatalf("reopen onto a second hard link: %v", err)
	}
	os.Remove(path)
	flush(t, w)
	assertContiguous(t, fileSeqs(t, path, 0), 3, 3)
}

// TestReopenOntoAFIFOReturns: a FIFO put in the log's place before a SIGHUP
// is refused at once; the open waited for a reader, and the daemon with it
// (deaf to SIGTERM until something read the FIFO; found outside-in).
func TestReopenOntoAFIFOReturns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "verdicts.jsonl")
	w := newTestWriter(t, newMemJournal(), path)
	defer w.Close()
	emitN(t, w, 1)
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w.Reopen(); err == nil {
		t.Fatal("reopen onto a FIFO succeeded")
	}
	os.Remove(path)
	emitN(t, w, 1)
	flush(t, w)
	assertContiguous(t, fileSeqs(t, path, 0), 2, 2)
}
