package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"
)

// Group commit. The writer runs one transaction at a time, and under a burst
// of creates (32 at once, each with three writes) the writes queued behind
// each other: every one paid its own BEGIN IMMEDIATE, COMMIT and hand-off of
// the writer, on a machine where each hand-off waits for a CPU. Writes that
// arrive while the writer is busy now queue, and whoever takes the writer
// next runs every queued write in one transaction, each inside a savepoint of
// its own: a write that refuses (a lost compare-and-set, a mismatch) rolls
// back to its savepoint and undoes nothing of the others', which commit
// together. Each write still sees everything the writes before it in the
// group did, exactly as if they had committed one by one in that order, so
// every transition's compare-and-set is as strong as alone. A lone write runs
// exactly as before (writeAlone).

// maxGroup bounds a group: a larger one would hold the writer (and every
// other process's writes: the pane helpers') for longer at a time.
const maxGroup = 64

// testHookGroup, when set (tests only), is told the size of every group
// transaction as it begins.
var testHookGroup func(n int)

// writeReq is one queued write.
type writeReq struct {
	ctx  context.Context
	op   string
	fn   func(q queryer) error
	done chan error // buffered: the group's runner never waits for the caller
}

// writeQueue holds the writes waiting for the writer.
type writeQueue struct {
	mu   sync.Mutex
	reqs []*writeReq
}

func (wq *writeQueue) push(r *writeReq) {
	wq.mu.Lock()
	wq.reqs = append(wq.reqs, r)
	wq.mu.Unlock()
}

// take removes and returns up to maxGroup queued writes, oldest first.
func (wq *writeQueue) take() []*writeReq {
	wq.mu.Lock()
	defer wq.mu.Unlock()
	n := min(len(wq.reqs), maxGroup)
	out := append([]*writeReq(nil), wq.reqs[:n]...)
	wq.reqs = append(wq.reqs[:0], wq.reqs[n:]...)
	return out
}

// remove takes r out of the queue; false when a group already took it.
func (wq *writeQueue) remove(r *writeReq) bool {
	wq.mu.Lock()
	defer wq.mu.Unlock()
	for i, q := range wq.reqs {
		if q == r {
			wq.reqs = append(wq.reqs[:i], wq.reqs[i+1:]...)
			return true
		}
	}
	return false
}

// write runs fn as a write transaction on the writer connection: alone, or
// as one savepoint of a group transaction with the writes queued beside it.
// Either way its outcome is its own: nil only once its statements are
// committed, a refusal of fn leaves no trace, and a caller whose context ends
// before its write ran gets that error and nothing written.
func (s *Store) write(ctx context.Context, op string, fn func(q queryer) error) error {
	if err := s.writable(op); err != nil {
		return err
	}
	req := &writeReq{ctx: ctx, op: op, fn: fn, done: make(chan error, 1)}
	s.wq.push(req)
	select {
	case s.wr.sem <- struct{}{}:
		// The writer is ours: run what is queued (ours, unless an earlier
		// group took it and its outcome is already in done).
		s.runGroup(s.wq.take())
		s.wr.release()
	case err := <-req.done:
		return err
	case <-ctx.Done():
		if s.wq.remove(req) {
			return s.dbErr(op, ctx.Err())
		}
	}
	return <-req.done
}

// runGroup runs the writes taken from the queue, each told its outcome.
// Called with the writer held.
func (s *Store) runGroup(reqs []*writeReq) {
	live := reqs[:0]
	for _, r := range reqs {
		if err := r.ctx.Err(); err != nil {
			r.done <- s.dbErr(r.op, err) // never ran: nothing written
			continue
		}
		live = append(live, r)
	}
	for len(live) > 0 {
		if len(live) == 1 {
			live[0].done <- s.writeAlone(live[0].ctx, live[0].op, live[0].fn)
			return
		}
		live = s.writeGroup(live)
	}
}

// writeGroup runs reqs in one transaction, a savepoint each, and tells each
// its outcome. A write's statements run without its caller's cancellation
// (stmtQueryer.detached); one whose caller gave up before its turn is not run.
// If a write's failure takes the whole transaction with it (an I/O error, a
// full disk: SQLite rolls the transaction back, and ROLLBACK TO finds no
// savepoint), that write gets its failure and the writes before it the
// group's loss, since none of theirs was committed; the writes after it have
// not run and are returned, to run in a new transaction.
func (s *Store) writeGroup(reqs []*writeReq) (notRun []*writeReq) {
	bg := context.WithoutCancel(reqs[0].ctx)
	conn, err := s.begin(bg)
	if err != nil {
		for _, r := range reqs {
			r.done <- s.dbErr(r.op, err)
		}
		return nil
	}
	if testHookGroup != nil {
		testHookGroup(len(reqs))
	}
	outs := make([]error, len(reqs))
	for i, r := range reqs {
		if err := r.ctx.Err(); err != nil {
			outs[i] = err // not run: nothing of it written
			continue
		}
		own, lost := s.savepoint(bg, conn, r)
		if lost != nil {
			s.rollback(bg, conn, lost)
			gone := fmt.Errorf("the group transaction was rolled back by a write beside this one: %w", lost)
			for j := 0; j < i; j++ {
				s.tell(reqs[j], outs[j], gone)
			}
			s.tell(r, own, lost)
			return reqs[i+1:]
		}
		outs[i] = own
	}
	_, err = conn.ExecContext(bg, "COMMIT")
	if err != nil {
		s.rollback(bg, conn, err)
	}
	for i, r := range reqs {
		s.tell(r, outs[i], err)
	}
	return nil
}

// savepoint runs one write of a group inside a savepoint: own is the write's
// refusal or failure, rolled back to the savepoint while the group goes on;
// lost is non-nil when the group's transaction did not survive.
func (s *Store) savepoint(ctx context.Context, conn *sql.Conn, r *writeReq) (own, lost error) {
	if _, err := conn.ExecContext(ctx, "SAVEPOINT w"); err != nil {
		return nil, err
	}
	own = r.fn(stmtQueryer{w: &s.wr, detached: true})
	if own == nil && testHookBeforeCommit != nil {
		testHookBeforeCommit(r.op)
	}
	if own != nil {
		if _, err := conn.ExecContext(ctx, "ROLLBACK TO w"); err != nil {
			return own, err
		}
	}
	if _, err := conn.ExecContext(ctx, "RELEASE w"); err != nil {
		return own, err
	}
	return own, nil
}

// tell gives r its outcome: its own refusal or failure, else the group's
// (nil once committed).
func (s *Store) tell(r *writeReq, own, group error) {
	switch {
	case own != nil:
		r.done <- s.dbErr(r.op, own)
	case group != nil:
		r.done <- s.dbErr(r.op, group)
	default:
		r.done <- nil
	}
}

// rollback ends a failed transaction on the writer connection, discarding
// the connection when its state is unknown (writeAlone does the same).
func (s *Store) rollback(ctx context.Context, conn *sql.Conn, cause error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, rerr := conn.ExecContext(rctx, "ROLLBACK"); rerr != nil {
		s.wr.discard()
	} else if isReadOnly(cause) {
		s.wr.discard()
		s.dropReaders()
	}
}
