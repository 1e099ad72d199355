package verdict

import (
	"bufio"
	"context"
	"errors"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/internal/testwatch"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Shorter waits so the failure-path tests converge quickly; none of the
	// tests assert a duration.
	retryInterval = 50 * time.Millisecond
	closeTimeout = 500 * time.Millisecond
	maxBackoff = 50 * time.Millisecond
	testwatch.Arm()
	goleak.VerifyTestMain(m)
}

// memJournal is an in-memory Journal with failure injection. Like the fence, it
// assigns sequences one by one.
type memJournal struct {
	mu        sync.Mutex
	recs      []Record
	next      int64
	appendErr error         // AppendVerdict fails while set
	failN     int           // AppendVerdict fails this many more times
	readErr   error         // VerdictsSince fails while set
	gate      chan struct{} // AppendVerdict waits for it to be closed, when set
	onAppend  func(Record)  // persistence hook (fileJournal)
}

func newMemJournal() *memJournal { return &memJournal{next: 1} }

func (j *memJournal) AppendVerdict(ctx context.Context, r Record) (Record, error) {
	j.mu.Lock()
	gate := j.gate
	j.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return Record{}, ctx.Err()
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.appendErr != nil {
		return Record{}, j.appendErr
	}
	if j.failN > 0 {
		j.failN--
		return Record{}, errors.New("injected journal failure")
	}
	r.Sequence = j.next
	j.next++
	j.recs = append(j.recs, r)
	if j.onAppend != nil {
		j.onAppend(r)
	}
	return r, nil
}

func (j *memJournal) VerdictsSince(ctx context.Context, after int64, limit int) ([]Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.readErr != nil {
		return nil, j.readErr
	}
	i := sort.Search(len(j.recs), func(i int) bool { return j.recs[i].Sequence > after })
	end := min(i+limit, len(j.recs))
	return append([]Record(nil), j.recs[i:end]...), nil
}

func (j *memJournal) set(f func(j *memJournal)) {
	j.mu.Lock()
	f(j)
	j.mu.Unlock()
}

func (j *memJournal) all() []Record {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]Record(nil), j.recs...)
}

// openFileJournal is a journal persisted as JSON lines in its own file: opening
// it again is what a restarted daemon sees of its database.
func openFileJournal(t *testing.T, path string) *memJournal {
	t.Helper()
	j := newMemJournal()
	if f, err := os.Open(path); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			r, err := ParseLine(sc.Bytes())
			if err != nil {
				t.Fatalf("journal file: %v", err)
			}
			j.recs = append(j.recs, r)
			j.next = r.Sequence + 1
		}
		f.Close()
	}
	j.onAppend = func(r Record) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			panic(err)
		}
		defer f.Close()
		if _, err := f.Write(r.Line()); err != nil {
			panic(err)
		}
	}
	return j
}
