package tmuxctl

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"
)

// TestQueueShutWithoutReader: shut ends the pump and closes out with nobody
// reading; what fits in the tail stays readable in order, the rest is
// counted as dropped.
func TestQueueShutWithoutReader(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	q := newIdleQueue[int](4)
	q.start()
	for i := 0; i < 10; i++ {
		q.push(i)
	}
	if dropped := q.shut(); dropped != 6 {
		t.Fatalf("dropped %d, want 6", dropped)
	}
	q.push(99) // after shut: ignored, never panics
	var got []int
	for v := range q.out {
		got = append(got, v)
	}
	if len(got) != 4 || got[0] != 0 || got[3] != 3 {
		t.Fatalf("kept %v, want [0 1 2 3]", got)
	}
}

// TestQueueShutKeepsOrderAfterPartialRead: the item the pump held when it
// was stopped is put back, so a reader sees no gap and no reordering.
func TestQueueShutKeepsOrderAfterPartialRead(t *testing.T) {
	q := newIdleQueue[int](8)
	q.start()
	for i := 0; i < 20; i++ {
		q.push(i)
	}
	for want := 0; want < 5; want++ {
		if v := <-q.out; v != want {
			t.Fatalf("got %d, want %d", v, want)
		}
	}
	q.shut()
	want := 5
	for v := range q.out {
		if v != want {
			t.Fatalf("after shut got %d, want %d", v, want)
		}
		want++
	}
	if want < 8 {
		t.Fatalf("only %d items readable after shut", want-5)
	}
}

// TestQueueShutIdleAndAbort: shut on a never-started queue closes out; abort
// still closes out when the pump was stopped holding an item.
func TestQueueShutIdleAndAbort(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	q := newIdleQueue[int](0)
	q.push(1)
	if dropped := q.shut(); dropped != 1 {
		t.Fatalf("dropped %d", dropped)
	}
	if _, ok := <-q.out; ok {
		t.Fatal("out not closed")
	}
	a := newQueue[int]()
	a.push(1)
	a.push(2)
	a.abort()
	a.abort() // idempotent
	for range a.out {
	}
}

// TestClientEventsCloseWithoutReader: nobody ever reads Events(); once Run
// has returned, no goroutine of the client is left (the pump does not wait
// for a reader), and the stream is closed with the oldest events that fit
// in its buffer.
func TestClientEventsCloseWithoutReader(t *testing.T) {
	cfg := testConfig(t)
	before := goleak.IgnoreCurrent()
	c := NewClient(cfg)
	// A tail of 2 is smaller than the events queued below, so the pump is
	// blocked on a full channel when Run returns, and events are dropped.
	c.events = newIdleQueue[Event](2)
	ctx, cancel := context.WithCancel(bg())
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(ctx) }()
	if _, err := c.WaitConnected(bg()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ { // some notifications to queue up unread
		if _, err := c.Command(bg(), "new-window", "-d", "-t", "skc-control"); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	// No pump left, before anybody has read a single event.
	goleak.VerifyNone(t, before)
	var evs []Event
	for ev := range c.Events() {
		evs = append(evs, ev)
	}
	if len(evs) != 2 || evs[0].Kind != Connected {
		t.Fatalf("events %+v, want the first two (Connected, …)", evs)
	}
	noChildrenLeft(t)
}

// TestClientEventsTailKeepsLastDisconnected: with the default tail, a
// consumer that stopped reading when Run's ctx ended still finds the final
// Disconnected in the closed stream.
func TestClientEventsTailKeepsLastDisconnected(t *testing.T) {
	c := NewClient(testConfig(t))
	ctx, cancel := context.WithCancel(bg())
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(ctx) }()
	if _, err := c.WaitConnected(bg()); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	var last Event
	for ev := range c.Events() {
		last = ev
	}
	if last.Kind != Disconnected || !errors.Is(last.Err, ErrClosed) {
		t.Fatalf("last event %+v", last)
	}
	noChildrenLeft(t)
}
