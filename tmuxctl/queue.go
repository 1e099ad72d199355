package tmuxctl

import "sync"

// queue is an unbounded FIFO drained into a channel by one goroutine, so a
// producer (the connection reader) never blocks on a slow consumer.
type queue[T any] struct {
	mu      sync.Mutex
	items   []T
	head    int
	closed  bool
	started bool
	outDone bool // out has been closed (by the pump, drained, or by stopPump's caller)
	wake    chan struct{}
	stop    chan struct{}
	out     chan T
	done    chan struct{}
}

func newQueue[T any]() *queue[T] {
	q := newIdleQueue[T](0)
	q.start()
	return q
}

// newIdleQueue returns a queue whose pump is not running yet: items are
// kept until start. tail is the capacity of out: what shut can still hand
// over to a consumer once the pump has stopped.
func newIdleQueue[T any](tail int) *queue[T] {
	return &queue[T]{wake: make(chan struct{}, 1), stop: make(chan struct{}),
		out: make(chan T, tail), done: make(chan struct{})}
}

func (q *queue[T]) start() {
	q.mu.Lock()
	q.started = true
	q.mu.Unlock()
	go q.run()
}

// push appends an item; it never blocks. Items pushed after finish are dropped.
func (q *queue[T]) push(v T) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.items = append(q.items, v)
	q.mu.Unlock()
	q.signal()
}

// finish says no more items come: out is closed once the queue is drained.
func (q *queue[T]) finish() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

// abort drops whatever is queued and closes out now; it waits for the
// pumping goroutine to end.
func (q *queue[T]) abort() {
	q.stopPump()
	q.mu.Lock()
	q.items, q.head = nil, 0
	q.mu.Unlock()
	q.closeOut()
}

// stopPump refuses further items and stops the pump (if it runs), waiting
// for it; idempotent.
func (q *queue[T]) stopPump() {
	q.mu.Lock()
	q.closed = true
	started := q.started
	select {
	case <-q.stop:
	default:
		close(q.stop)
	}
	q.mu.Unlock()
	if started {
		<-q.done
	}
}

// closeOut closes out unless the pump already did (it had drained a
// finished queue); only after stopPump.
func (q *queue[T]) closeOut() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.outDone {
		q.outDone = true
		close(q.out)
	}
}

// shut ends the queue without waiting for a consumer: no more items are
// accepted, the pump is stopped, the items it had not handed over are put
// into out's buffer as far as it has room (the rest are dropped, counted in
// the return value), and out is closed. When shut returns no goroutine of
// the queue is left, whether or not anybody ever reads out.
func (q *queue[T]) shut() (dropped int) {
	q.stopPump() // the pump put back the item it held
	q.mu.Lock()
	rest := q.items[q.head:]
	q.items, q.head = nil, 0
	done := q.outDone
	q.mu.Unlock()
	if done {
		return len(rest) // cannot happen: a closed out means the queue was drained
	}
	for i, v := range rest {
		select {
		case q.out <- v: // only this goroutine sends now: the pump has ended
		default:
			dropped = len(rest) - i
			q.closeOut()
			return dropped
		}
	}
	q.closeOut()
	return 0
}

func (q *queue[T]) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *queue[T]) next() (v T, ok, closed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
		return v, false, q.closed
	}
	v = q.items[q.head]
	var zero T
	q.items[q.head] = zero
	q.head++
	return v, true, false
}

// unshift puts v back at the head (the pump was stopped holding it).
func (q *queue[T]) unshift(v T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head > 0 {
		q.head--
		q.items[q.head] = v
		return
	}
	q.items = append([]T{v}, q.items[q.head:]...)
	q.head = 0
}

// run pumps items into out. Drained after finish, it closes out; stopped
// (abort, shut) it returns at once, and shut closes out itself.
func (q *queue[T]) run() {
	defer close(q.done)
	for {
		v, ok, closed := q.next()
		if !ok {
			if closed {
				q.closeOut()
				return
			}
			select {
			case <-q.wake:
				continue
			case <-q.stop:
				return
			}
		}
		select {
		case q.out <- v:
		case <-q.stop:
			q.unshift(v)
			return
		}
	}
}
