package tmuxctl

import "sync"

// queue is an unbounded FIFO drained into a channel by one goroutine, so a
// producer (the connection reader) never blocks on a slow consumer.
type queue[T any] struct {
	mu     sync.Mutex
	items  []T
	head   int
	closed bool
	wake   chan struct{}
	stop   chan struct{}
	out    chan T
	done   chan struct{}
}

func newQueue[T any]() *queue[T] {
	q := newIdleQueue[T]()
	q.start()
	return q
}

// newIdleQueue returns a queue whose pump is not running yet: items are
// kept until start.
func newIdleQueue[T any]() *queue[T] {
	return &queue[T]{wake: make(chan struct{}, 1), stop: make(chan struct{}),
		out: make(chan T), done: make(chan struct{})}
}

func (q *queue[T]) start() { go q.run() }

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
	q.finish()
	select {
	case <-q.stop:
	default:
		close(q.stop)
	}
	<-q.done
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

func (q *queue[T]) run() {
	defer close(q.done)
	defer close(q.out)
	for {
		v, ok, closed := q.next()
		if !ok {
			if closed {
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
			return
		}
	}
}
