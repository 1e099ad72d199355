package verdict

import (
	"context"
	"time"
)

// run is the Writer's single worker: it journals queued Emit records, streams
// journaled records in sequence order to subscribers and the file, and catches
// the file up from the journal after a failure. Woken by kick, by a retry
// timer, and stopped by Close.
func (w *Writer) run() {
	defer close(w.dead)
	t := time.NewTimer(retryInterval)
	defer t.Stop()
	for {
		select {
		case <-w.wake:
		case <-t.C:
			// Also look for records journaled elsewhere whose Filed never came.
			w.mu.Lock()
			w.behind = true
			w.mu.Unlock()
		case <-w.quit:
			w.final()
			return
		}
		delay := w.step()
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(delay)
	}
}

// step does one round of work and returns when the next retry is due.
func (w *Writer) step() time.Duration {
	delay := retryInterval
	if !w.journalQueued(context.Background()) {
		delay = w.backoff.next()
	} else {
		w.backoff.reset()
	}
	w.advance()
	w.catchupFile()
	w.notifyFlushers()
	return delay
}

// final is the last round on Close, bounded by closeTimeout.
func (w *Writer) final() {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	for ctx.Err() == nil {
		ok := w.journalQueued(ctx)
		w.advance()
		w.catchupFile()
		if ok && w.settledRun() {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(minBackoff):
		}
	}
	w.mu.Lock()
	queue, waiting := w.queue, w.waiting
	w.queue, w.waiting = nil, map[int64]*job{}
	w.mu.Unlock()
	for _, jb := range queue {
		// Last resort: the journal never took it. Log it whole so it is not lost.
		w.log.Error().RawJSON(FieldRecord, jb.rec.AppendJSON(nil)).
			Msg("verdict not journaled before close")
		jb.finish(jb.rec, &Error{Code: CodeFenceUnavailable, Message: ErrClosed.Error(), Err: ErrClosed})
	}
	for _, jb := range waiting {
		jb.finish(jb.rec, nil) // journaled: durable
	}
	w.notifyFlushers()
}

// settledRun is settled for the worker itself (flushers are its concern).
func (w *Writer) settledRun() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue) == 0 && len(w.pending) == 0 && w.f.filed() >= w.streamSeq
}

// journalQueued appends queued Emit records to the journal in call order. It
// stops at the first failure (order matters) and reports whether the queue was
// drained. The call gets its own timeout under parent, detached from any
// caller: a caller that gave up after Budget must not abort a commit half-way.
func (w *Writer) journalQueued(parent context.Context) bool {
	for {
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.mu.Unlock()
			return true
		}
		jb := w.queue[0]
		w.mu.Unlock()

		ctx, cancel := context.WithTimeout(parent, journalTimeout)
		r, err := w.j.AppendVerdict(ctx, jb.rec)
		cancel()
		if err != nil {
			if !w.journalFailing {
				w.log.Error().Err(err).Str(FieldVerdict, jb.rec.Verdict).
					Msg("journal verdict failed; it stays queued and is retried")
			}
			w.journalFailing = true
			return false
		}
		if w.journalFailing {
			w.log.Info().Msg("journal verdict appends recovered")
			w.journalFailing = false
		}
		r = normalize(r)
		w.mu.Lock()
		w.queue = w.queue[1:]
		queued := w.addPendingLocked(r)
		if queued {
			w.waiting[r.Sequence] = jb
		}
		w.mu.Unlock()
		if !queued {
			jb.finish(r, nil)
		}
	}
}

// advance streams every record that is next in sequence order.
func (w *Writer) advance() {
	for {
		r, ok := w.takeNext()
		if !ok {
			return
		}
		w.stream(r)
	}
}

// takeNext returns the next record in sequence order: from pending when it is
// the next sequence; otherwise (a gap, or catching up after a start) from the
// journal, which is the authority on which sequences exist.
func (w *Writer) takeNext() (Record, bool) {
	w.mu.Lock()
	if r, ok := w.pending[w.streamSeq+1]; ok {
		delete(w.pending, r.Sequence)
		w.mu.Unlock()
		return r, true
	}
	need := len(w.pending) > 0 || w.behind
	after := w.streamSeq
	w.mu.Unlock()
	if !need {
		return Record{}, false
	}
	recs, err := w.fetch(after)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.log.Error().Err(err).Int64(FieldSequence, after).Msg("read verdict journal failed; retrying")
		return Record{}, false
	}
	for _, r := range recs {
		w.addPendingLocked(normalize(r))
	}
	if len(recs) < catchupBatch {
		w.behind = false
	}
	if len(w.pending) == 0 {
		return Record{}, false
	}
	r := w.pending[sortedKeys(w.pending)[0]]
	delete(w.pending, r.Sequence)
	return r, true
}

// fetch reads a batch of journal records after a sequence.
func (w *Writer) fetch(after int64) ([]Record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), journalTimeout)
	defer cancel()
	return w.j.VerdictsSince(ctx, after, catchupBatch)
}

// stream hands r, the next record in sequence order, to subscribers and to the
// file, then releases the Emit waiting for it.
func (w *Writer) stream(r Record) {
	w.mu.Lock()
	prev := w.streamSeq
	w.streamSeq = r.Sequence
	jb := w.waiting[r.Sequence]
	delete(w.waiting, r.Sequence)
	subs := make([]*subscription, 0, len(w.subs))
	for s := range w.subs {
		subs = append(subs, s)
	}
	w.mu.Unlock()
	for _, s := range subs {
		s.offer(r)
	}
	// Write directly only when the file is up to date; otherwise catchupFile
	// writes the backlog first, in order, from the journal.
	if w.f.filed() >= prev {
		w.fileResult(w.f.write(r))
	}
	if jb != nil {
		jb.finish(r, nil)
	}
}

// catchupFile re-appends, from the journal, the records streamed while the
// file was failing.
func (w *Writer) catchupFile() {
	for {
		w.mu.Lock()
		target := w.streamSeq
		w.mu.Unlock()
		filed := w.f.filed()
		if filed >= target {
			return
		}
		recs, err := w.fetch(filed)
		if err != nil || len(recs) == 0 {
			return
		}
		for _, r := range recs {
			if r.Sequence > target {
				return
			}
			if err := w.f.write(normalize(r)); err != nil {
				w.fileResult(err)
				return
			}
		}
		w.fileResult(nil)
	}
}

// fileResult logs a file failure once, and its recovery once.
func (w *Writer) fileResult(err error) {
	if err != nil && !w.fileFailing {
		w.log.Error().Err(err).Str(FieldPath, w.f.path).
			Msg("append to verdict file failed; records stay in the journal and are re-appended")
	}
	if err == nil && w.fileFailing {
		w.log.Info().Str(FieldPath, w.f.path).Int64(FieldSequence, w.f.filed()).
			Msg("verdict file appends recovered")
	}
	w.fileFailing = err != nil
}

// notifyFlushers wakes every Flush waiting for a round to complete.
func (w *Writer) notifyFlushers() {
	w.mu.Lock()
	fl := w.flushers
	w.flushers = nil
	w.mu.Unlock()
	for _, ch := range fl {
		close(ch)
	}
}

// finish completes an Emit.
func (jb *job) finish(r Record, err error) {
	jb.rec, jb.err = r, err
	close(jb.done)
}

// backoff is the journal retry delay: doubling from minBackoff to maxBackoff.
type backoff struct{ d time.Duration }

func (b *backoff) next() time.Duration {
	if b.d == 0 {
		b.d = minBackoff
	} else if b.d *= 2; b.d > maxBackoff {
		b.d = maxBackoff
	}
	return b.d
}

func (b *backoff) reset() { b.d = 0 }
