package verdict

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Journal is the durable, sequenced home of verdicts. Every fence engine implements it:
// the sequence is assigned in the database, increases by one per verdict and
// survives restarts. The file verdicts.jsonl is a copy the Writer keeps in step
// with the journal.
type Journal interface {
	// AppendVerdict stores r, assigns its Sequence and returns the stored record.
	AppendVerdict(ctx context.Context, r Record) (Record, error)
	// VerdictsSince returns up to limit records with Sequence > after, oldest first.
	VerdictsSince(ctx context.Context, after int64, limit int) ([]Record, error)
}

// Budget is how long Emit keeps its caller waiting. Past it the caller gets
// ErrDeferred and the record is still journaled and filed in the background.
const Budget = 250 * time.Millisecond

// Tunables. Variables rather than constants so tests can shorten them.
var (
	retryInterval   = 2 * time.Second       // periodic retry of a failed append
	journalTimeout  = 5 * time.Second       // one background journal call
	catchupBatch    = 256                   // records per VerdictsSince call
	subscriberQueue = 256                   // live records buffered per subscriber
	closeTimeout    = 2 * time.Second       // final flush in Close
	maxBackoff      = 5 * time.Second       // journal retry backoff ceiling
	minBackoff      = 20 * time.Millisecond // first journal retry delay
	budget          = Budget                // Emit's wait
	tailScanLimit   = int64(8 << 20)        // bytes read backwards for the last sequence
)

// ErrDeferred is returned (wrapped in an *Error with CodeTimeout) by Emit when the
// record was not journaled and filed within Budget. The Writer still owns the
// record and will write it: callers must not emit it again.
var ErrDeferred = errors.New("verdict: write deferred past its budget; it will be retried")

// ErrClosed is returned by Emit after Close.
var ErrClosed = errors.New("verdict: writer closed")

// job is one Emit waiting for its record to be journaled and filed.
type job struct {
	rec  Record
	done chan struct{} // closed once rec is journaled and streamed (file attempted)
	err  error         // set before done is closed
}

// Writer journals verdicts and appends them to verdicts.jsonl, in sequence
// order, one write(2) per record, never losing or duplicating one. A single
// goroutine (run) owns the journal appends of Emit and the file; callers only
// queue work and wait at most Budget.
type Writer struct {
	j   Journal
	log zerolog.Logger
	f   *file

	mu        sync.Mutex
	queue     []*job           // Emit records not yet journaled, in call order
	pending   map[int64]Record // journaled, not yet streamed
	waiting   map[int64]*job   // journaled Emit jobs waiting for their stream
	streamSeq int64            // highest sequence streamed (subscribers, file)
	behind    bool             // the journal may hold records past streamSeq
	subs      map[*subscription]struct{}
	closed    bool
	flushers  []chan struct{}

	backoff        backoff // journal retry delay (run only)
	fileFailing    bool    // the last file append failed (run only)
	journalFailing bool    // the last journal append failed (run only)

	wake chan struct{}
	quit chan struct{}
	dead chan struct{}
	wg   sync.WaitGroup // subscriber goroutines
}

// NewWriter returns a Writer that appends to the file at path (created 0600).
// It reads the sequence of the file's last complete line and catches the file
// up from the journal in the background. A file that cannot be opened is not
// fatal: verdicts stay in the journal and the open is retried, so the daemon
// keeps recording decisions.
func NewWriter(j Journal, path string, log zerolog.Logger) (*Writer, error) {
	if j == nil {
		return nil, errors.New("verdict: NewWriter: nil journal")
	}
	if path == "" {
		return nil, errors.New("verdict: NewWriter: empty path")
	}
	w := &Writer{
		j: j, log: log.With().Str(FieldComponent, "verdict").Logger(),
		f:       newFile(path),
		pending: make(map[int64]Record), waiting: make(map[int64]*job),
		subs:   make(map[*subscription]struct{}),
		behind: true,
		wake:   make(chan struct{}, 1), quit: make(chan struct{}), dead: make(chan struct{}),
	}
	if _, err := w.f.open(); err != nil {
		w.log.Error().Err(err).Str(FieldPath, path).Msg("verdict file unavailable; verdicts stay in the journal and the open is retried")
	}
	w.streamSeq = w.checkJournal()
	go w.run()
	w.kick()
	return w, nil
}

// checkJournal verifies that the journal holds the file's last record (same
// sequence, same timestamp). If it does not, the database was replaced
// (restored, recreated) and its sequences restarted: the file watermark is
// reset so the new records are appended rather than skipped as duplicates. A
// journal error keeps the file's watermark: the common case is a consistent
// pair.
func (w *Writer) checkJournal() int64 {
	last, ts := w.f.tail()
	if last <= 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), journalTimeout)
	defer cancel()
	recs, err := w.j.VerdictsSince(ctx, last-1, 1)
	if err != nil || (len(recs) == 1 && recs[0].Sequence == last &&
		(ts.IsZero() || recs[0].Timestamp.Equal(ts))) {
		return last
	}
	w.log.Warn().Int64(FieldSequence, last).Str(FieldPath, w.f.path).
		Msg("verdict file is ahead of the journal (database replaced?); appending the journal's records after it")
	w.f.setSeq(0)
	return 0
}

// Emit journals r (the journal assigns its sequence), appends it to the file
// and returns the stored record. It waits at most Budget (or until ctx is
// done): past that it returns r with an *Error (CodeTimeout) wrapping
// ErrDeferred, and the Writer still journals and files r. A file append that
// fails is not an error for the caller: the record is in the journal and the
// file is caught up later.
func (w *Writer) Emit(ctx context.Context, r Record) (Record, error) {
	r = normalize(r)
	if err := r.Validate(); err != nil {
		// Written all the same: a verdict with an odd word beats a lost one.
		w.log.Warn().Err(err).Str(FieldVerdict, r.Verdict).Msg("verdict outside the vocabulary")
	}
	jb := &job{rec: r, done: make(chan struct{})}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return r, &Error{Code: CodeInternal, Message: ErrClosed.Error(), Err: ErrClosed}
	}
	w.queue = append(w.queue, jb)
	w.mu.Unlock()
	w.kick()

	timer := time.NewTimer(budget)
	defer timer.Stop()
	select {
	case <-jb.done:
		return jb.rec, jb.err
	case <-timer.C:
	case <-ctx.Done():
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-jb.done: // finished while we were deciding
		return jb.rec, jb.err
	default:
	}
	return r, &Error{Code: CodeTimeout, Message: ErrDeferred.Error(), Err: ErrDeferred,
		Details: map[string]any{"budget_ms": budget.Milliseconds()}}
}

// Filed hands the Writer a record another transaction already journaled (the
// fence's Publish and MarkEnded store their verdict atomically with the state
// change). It never blocks; the record is streamed and filed in sequence order.
// Calling it twice, or for a record the Writer already caught up from the
// journal, is harmless.
func (w *Writer) Filed(r Record) {
	if r.Sequence <= 0 {
		w.log.Error().Str(FieldVerdict, r.Verdict).Msg("Filed: record without a sequence ignored; it is not journaled")
		return
	}
	r = normalize(r)
	w.mu.Lock()
	w.addPendingLocked(r)
	w.mu.Unlock()
	w.kick()
}

// Reopen closes and reopens the file (SIGHUP, after logrotate moved it). The
// sequence watermark is kept in memory, so nothing is written twice and
// anything not yet filed goes to the new file.
func (w *Writer) Reopen() error {
	err := w.f.reopen()
	if err != nil {
		w.log.Error().Err(err).Str(FieldPath, w.f.path).Msg("reopen verdict file")
	}
	w.kick()
	return err
}

// Flush waits until every record emitted or filed so far is journaled and
// written to the file, retrying failed appends now, or until ctx is done.
func (w *Writer) Flush(ctx context.Context) error {
	for {
		ch := make(chan struct{})
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return ErrClosed
		}
		w.behind = true
		w.flushers = append(w.flushers, ch)
		w.mu.Unlock()
		w.kick()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		if w.settled() {
			return nil
		}
		select { // not settled: the file or journal is failing; wait a retry
		case <-time.After(minBackoff):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// settled reports whether nothing is queued, pending or unfiled.
func (w *Writer) settled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue) == 0 && len(w.pending) == 0 && !w.behind && w.f.filed() >= w.streamSeq
}

// Close stops the Writer: it makes a last attempt (bounded by a few seconds)
// to journal and file what is queued, ends every subscription and closes the
// file. Records still not journaled are logged in full so an operator can
// recover them.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		<-w.dead
		return nil
	}
	w.closed = true
	subs := w.subs
	w.subs = map[*subscription]struct{}{}
	w.mu.Unlock()
	close(w.quit)
	<-w.dead
	for s := range subs {
		s.stop()
	}
	w.wg.Wait()
	return w.f.close()
}

// Sequence returns the highest sequence streamed so far.
func (w *Writer) Sequence() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.streamSeq
}

// kick wakes run without blocking.
func (w *Writer) kick() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// normalize fills what every record must carry: a UTC timestamp without a
// monotonic reading (so it round-trips), and an evidence map.
func normalize(r Record) Record {
	if r.Timestamp.IsZero() {
		r.Timestamp = time.Now()
	}
	r.Timestamp = r.Timestamp.UTC()
	return r
}

// addPendingLocked queues a journaled record for streaming. A sequence at or
// below the stream watermark was already streamed (Filed after a catch-up read
// it from the journal): it is dropped, which is what keeps the file free of
// duplicates.
func (w *Writer) addPendingLocked(r Record) bool {
	if r.Sequence <= w.streamSeq {
		return false
	}
	w.pending[r.Sequence] = r
	return true
}

// sortedKeys returns m's keys in increasing order.
func sortedKeys(m map[int64]Record) []int64 {
	keys := make([]int64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool { return keys[a] < keys[b] })
	return keys
}
