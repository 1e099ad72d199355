package verdict

import (
	"context"
	"sync"
	"time"
)

// subscription is one Subscribe: a goroutine that catches up from the journal,
// then relays live records, falling back to the journal whenever it missed some.
type subscription struct {
	w      *Writer
	live   chan Record // fed by the worker without blocking
	lagged chan struct{}
	out    chan Record
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
}

// Subscribe returns a channel that delivers every record with a sequence
// greater than after, oldest first, with no gap and no duplicate: first from
// the journal, then live as records are streamed. A slow reader never blocks
// Emit: its live buffer is bounded, and when it overflows the subscription
// reads what it missed from the journal. The returned func ends the
// subscription and closes the channel; Close ends all of them.
func (w *Writer) Subscribe(after int64) (<-chan Record, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &subscription{
		w: w, live: make(chan Record, subscriberQueue), lagged: make(chan struct{}, 1),
		out: make(chan Record, 64), ctx: ctx, cancel: cancel,
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		cancel()
		close(s.out)
		return s.out, func() {}
	}
	w.subs[s] = struct{}{} // before catching up, so nothing streamed meanwhile is missed
	w.wg.Add(1)
	w.mu.Unlock()
	go s.run(after)
	return s.out, s.stop
}

// offer hands a live record over without blocking; a full buffer marks the
// subscription as lagged, and it catches up from the journal.
func (s *subscription) offer(r Record) {
	select {
	case s.live <- r:
	default:
		select {
		case s.lagged <- struct{}{}:
		default:
		}
	}
}

// stop ends the subscription (idempotent).
func (s *subscription) stop() {
	s.once.Do(func() {
		s.cancel()
		s.w.mu.Lock()
		delete(s.w.subs, s)
		s.w.mu.Unlock()
	})
}

func (s *subscription) run(after int64) {
	defer s.w.wg.Done()
	defer close(s.out)
	last := after
	if !s.catchup(&last) {
		return
	}
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.lagged:
			if !s.catchup(&last) {
				return
			}
		case r := <-s.live:
			if r.Sequence <= last {
				continue
			}
			if r.Sequence > last+1 && !s.catchup(&last) { // a gap: ask the journal
				return
			}
			if r.Sequence > last && !s.deliver(r, &last) {
				return
			}
		}
	}
}

// catchup delivers journal records after *last until the journal has no more.
// Journal errors are retried until the subscription ends.
func (s *subscription) catchup(last *int64) bool {
	delay := minBackoff
	for {
		ctx, cancel := context.WithTimeout(s.ctx, journalTimeout)
		recs, err := s.w.j.VerdictsSince(ctx, *last, catchupBatch)
		cancel()
		if err != nil {
			select {
			case <-s.ctx.Done():
				return false
			case <-time.After(delay):
			}
			delay = min(delay*2, maxBackoff)
			continue
		}
		for _, r := range recs {
			if r.Sequence > *last && !s.deliver(normalize(r), last) {
				return false
			}
		}
		if len(recs) < catchupBatch {
			return true
		}
	}
}

// deliver sends r to the reader, waiting as long as the reader needs.
func (s *subscription) deliver(r Record, last *int64) bool {
	select {
	case s.out <- r:
		*last = r.Sequence
		return true
	case <-s.ctx.Done():
		return false
	}
}
