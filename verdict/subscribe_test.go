package verdict

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// collect reads n records from ch, checking order and continuity from first.
func collect(t *testing.T, ch <-chan Record, first int64, n int, slow bool) {
	t.Helper()
	if err := collectErr(ch, first, n, slow); err != nil {
		t.Fatal(err)
	}
}

// collectErr is collect for goroutines (which must not call t.Fatal).
func collectErr(ch <-chan Record, first int64, n int, slow bool) error {
	timeout := time.NewTimer(waitLimit)
	defer timeout.Stop()
	want := first
	for i := 0; i < n; i++ {
		select {
		case r, ok := <-ch:
			if !ok {
				return fmt.Errorf("closed after %d records", i)
			}
			if r.Sequence != want {
				return fmt.Errorf("got sequence %d, want %d", r.Sequence, want)
			}
			want++
			if slow && i%50 == 0 {
				time.Sleep(2 * time.Millisecond) // be slow so the live buffer overflows
			}
		case <-timeout.C:
			return fmt.Errorf("only %d of %d records arrived", i, n)
		}
	}
	return nil
}

func TestSubscribeCatchUpThenLive(t *testing.T) {
	j := newMemJournal()
	w := newTestWriter(t, j, filepath.Join(t.TempDir(), "v.jsonl"))
	defer w.Close()
	emitN(t, w, 5)
	ch, cancel := w.Subscribe(2)
	defer cancel()
	collect(t, ch, 3, 3, false)
	emitN(t, w, 2)
	collect(t, ch, 6, 2, false)
	cancel()
	for range ch { // drained and closed after cancel
	}
}

func TestSubscribeGapFreeUnderLoad(t *testing.T) {
	oldQ := subscriberQueue
	subscriberQueue = 4 // overflow often
	defer func() { subscriberQueue = oldQ }()
	j := newMemJournal()
	w := newTestWriter(t, j, filepath.Join(t.TempDir(), "v.jsonl"))
	defer w.Close()
	emitN(t, w, 10)

	const writers, each = 8, 60
	total := 10 + writers*each
	var subs sync.WaitGroup
	for k, after := range []int64{0, 7, 10} {
		ch, cancel := w.Subscribe(after)
		subs.Add(1)
		go func(after int64, slow bool) {
			defer subs.Done()
			defer cancel()
			if err := collectErr(ch, after+1, total-int(after), slow); err != nil {
				t.Errorf("subscriber after %d: %v", after, err)
			}
		}(after, k != 1)
	}
	var wg sync.WaitGroup
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if g%3 == 0 {
					r, _ := j.AppendVerdict(context.Background(), normalize(rec(i)))
					w.Filed(r)
					continue
				}
				if _, err := w.Emit(context.Background(), rec(i)); err != nil && !errors.Is(err, ErrDeferred) {
					t.Error(err)
				}
			}
		}(g)
	}
	wg.Wait()
	subs.Wait()
}

func TestSlowSubscriberDoesNotBlockEmit(t *testing.T) {
	oldQ := subscriberQueue
	subscriberQueue = 2
	defer func() { subscriberQueue = oldQ }()
	w := newTestWriter(t, newMemJournal(), filepath.Join(t.TempDir(), "v.jsonl"))
	defer w.Close()
	ch, cancel := w.Subscribe(0) // never read until the end
	defer cancel()
	emitN(t, w, 300) // would deadlock if Emit waited for the reader
	collect(t, ch, 1, 300, false)
}

func TestSubscribeJournalErrorRetried(t *testing.T) {
	j := newMemJournal()
	w := newTestWriter(t, j, filepath.Join(t.TempDir(), "v.jsonl"))
	defer w.Close()
	emitN(t, w, 3)
	j.set(func(j *memJournal) { j.readErr = errors.New("injected read failure") })
	ch, cancel := w.Subscribe(0)
	defer cancel()
	time.AfterFunc(30*time.Millisecond, func() { j.set(func(j *memJournal) { j.readErr = nil }) })
	collect(t, ch, 1, 3, false)
}

func TestCloseEndsSubscriptions(t *testing.T) {
	w := newTestWriter(t, newMemJournal(), filepath.Join(t.TempDir(), "v.jsonl"))
	ch, cancel := w.Subscribe(0)
	defer cancel()
	emitN(t, w, 1)
	collect(t, ch, 1, 1, false)
	w.Close()
	if _, ok := <-ch; ok {
		t.Fatal("open after Close")
	}
}

func TestSubscribeWhileFileFails(t *testing.T) {
	w := newTestWriter(t, newMemJournal(), filepath.Join(t.TempDir(), "v.jsonl"))
	defer w.Close()
	w.setFault(failWhile(func() bool { return true }))
	ch, cancel := w.Subscribe(0)
	defer cancel()
	emitN(t, w, 5) // the file is down; followers still see every record
	collect(t, ch, 1, 5, false)
}
