package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The caches' change signal without a round trip. The version rows
// (fence_version, identity_versions) stay the truth; every write transaction
// that bumps them also NOTIFYs notifyChannel in the same transaction (tx.go),
// with the versions it committed. A watcher — one connection of its own, not
// the pool's — LISTENs and keeps local copies; while it is known to be
// connected, Version and the identities cache's check answer from them. A
// notification is lost while the listener is disconnected, so the copies are
// trusted only from the moment the watcher has LISTENed again AND read the
// version rows once after that; until then, and from the moment its
// connection fails, the readers fall back to reading the rows.
//
// One watcher serves every Store of the process that names the same
// database, and every such Store's commit raises its copies before the write
// returns: a read that starts after a write of this process returned sees it,
// as a read of the rows would. A write of another process (another daemon, a
// pane helper) is seen once its notification has arrived — milliseconds after
// its commit on a healthy connection.

// notifyChannel is the LISTEN/NOTIFY channel of the fence's writes.
const notifyChannel = "skc_fence"

// watchPing bounds how long a silent connection is trusted: after so long
// without a notification the watcher pings it, and a connection that does not
// answer within watchPingTimeout is dropped (a partition that never closes the
// socket would otherwise leave the copies trusted while notifications are lost).
const (
	watchPing        = 10 * time.Second
	watchPingTimeout = 5 * time.Second
	watchBackoffMax  = 5 * time.Second
)

// readVersionsSQL reads every version row at once, in the payload's form.
const readVersionsSQL = `SELECT json_build_object('v', (SELECT version FROM fence_version),
	'h', COALESCE((SELECT json_object_agg(host, version) FROM identity_versions), '{}'::json))::text`

// notifySQL NOTIFYs the versions a write transaction has just set ($1: the
// hosts whose identity versions it bumped). It runs after the bumps, whose row
// locks the transaction holds until COMMIT: the values are the ones it commits.
const notifySQL = `SELECT pg_notify('` + notifyChannel + `', json_build_object('v', (SELECT version FROM fence_version),
	'h', COALESCE((SELECT json_object_agg(host, version) FROM identity_versions WHERE host = ANY($1::text[])), '{}'::json))::text)`

// versionsMsg is a payload of notifyChannel and the answer of readVersionsSQL.
type versionsMsg struct {
	Fence int64            `json:"v"`
	Hosts map[string]int64 `json:"h"`
}

// watcher keeps the local copies of the version rows for the Stores of this
// process that share a database.
type watcher struct {
	cfg *pgx.ConnConfig

	mu      sync.Mutex
	healthy bool             // LISTENing, and the rows were read after LISTEN
	fence   int64            // fence_version, valid while healthy
	hosts   map[string]int64 // identity_versions, valid while healthy (absent: 0)
	pid     uint32           // the listening backend's pid, for tests
	listens int              // successful (re)LISTENs, for tests

	refs    int  // Stores using it (watchers.mu)
	started bool // its goroutine runs (or ran): on the first check (w.mu)
	stopped bool // released by its last Store (w.mu)
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
}

// watchers are the process's watchers by connection string.
var watchers = struct {
	mu sync.Mutex
	m  map[string]*watcher
}{m: map[string]*watcher{}}

// acquireWatcher returns the process's watcher of the database url names.
// Its connection is opened on the first check of a version, not here: a
// short-lived process that never reads a cache (a pane helper, a `fence`
// command) costs the database no second connection.
func acquireWatcher(url string, cfg *pgx.ConnConfig) *watcher {
	watchers.mu.Lock()
	defer watchers.mu.Unlock()
	if w := watchers.m[url]; w != nil {
		w.refs++
		return w
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{cfg: cfg, hosts: map[string]int64{}, refs: 1, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	watchers.m[url] = w
	return w
}

// releaseWatcher drops one user of the watcher of url; the last one stops it
// and waits for its goroutine and connection to end.
func releaseWatcher(url string, w *watcher) {
	watchers.mu.Lock()
	w.refs--
	last := w.refs == 0
	if last {
		delete(watchers.m, url)
	}
	watchers.mu.Unlock()
	if !last {
		return
	}
	w.mu.Lock()
	w.stopped = true
	started := w.started
	w.mu.Unlock()
	w.cancel()
	if started {
		<-w.done
	}
}

// trusted reports whether the copies can be trusted, starting the watcher
// on the first call. w.mu is held.
func (w *watcher) trusted() bool {
	if !w.started && !w.stopped {
		w.started = true
		go w.run(w.ctx)
	}
	return w.healthy
}

// fenceVersion is fence_version when the copies can be trusted.
func (w *watcher) fenceVersion() (int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fence, w.trusted()
}

// hostVersion is host's identity version when the copies can be trusted.
func (w *watcher) hostVersion(host string) (int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hosts[host], w.trusted()
}

// raise takes versions committed by a write (this process's, after its
// COMMIT; or a notification): the copies only move up, since commits can end
// in any order but each version row only grows.
func (w *watcher) raise(m versionsMsg) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fence = max(w.fence, m.Fence)
	for h, v := range m.Hosts {
		w.hosts[h] = max(w.hosts[h], v)
	}
}

// state is (healthy, backend pid, successful LISTENs), for tests.
func (w *watcher) state() (bool, uint32, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.healthy, w.pid, w.listens
}

// run keeps a listening connection until ctx ends, reconnecting with a
// growing pause while the database cannot be reached.
func (w *watcher) run(ctx context.Context) {
	defer close(w.done)
	pause := 100 * time.Millisecond
	for ctx.Err() == nil {
		if w.session(ctx) {
			pause = 100 * time.Millisecond
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		pause = min(2*pause, watchBackoffMax)
	}
}

// session is one connection's life: connect, LISTEN, read the rows, then
// follow the notifications until the connection fails or ctx ends. It
// reports whether the copies became trusted. Whatever ends it, the copies
// are untrusted and forgotten before it returns: from then on readers read
// the rows, and the next session starts its copies from what it reads (a
// failover to a standby that lost commits may have moved the versions back).
func (w *watcher) session(ctx context.Context) (trusted bool) {
	conn, err := pgx.ConnectConfig(ctx, w.cfg)
	if err != nil {
		return false
	}
	defer func() {
		w.mu.Lock()
		w.healthy, w.fence, w.hosts, w.pid = false, 0, map[string]int64{}, 0
		w.mu.Unlock()
		cctx, cancel := context.WithTimeout(context.Background(), watchPingTimeout)
		_ = conn.Close(cctx)
		cancel()
	}()
	if _, err := conn.Exec(ctx, `LISTEN `+notifyChannel); err != nil {
		return false
	}
	// Every commit from here on notifies this connection; the rows read now
	// cover every commit before. Copies raised meanwhile by this process's
	// writes are kept (raise only moves up).
	if err := w.resync(ctx, conn); err != nil {
		return false
	}
	w.mu.Lock()
	w.healthy, w.pid = true, conn.PgConn().PID()
	w.listens++
	w.mu.Unlock()
	for w.follow(ctx, conn) == nil {
	}
	return true
}

// resync reads the version rows on the watcher's connection into the copies.
func (w *watcher) resync(ctx context.Context, conn *pgx.Conn) error {
	var text string
	if err := conn.QueryRow(ctx, readVersionsSQL).Scan(&text); err != nil {
		return err
	}
	var m versionsMsg
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		return err
	}
	w.raise(m)
	return nil
}

// follow waits for one notification (or watchPing of silence, then pings)
// and applies it. An error ends the session.
func (w *watcher) follow(ctx context.Context, conn *pgx.Conn) error {
	wctx, cancel := context.WithTimeout(ctx, watchPing)
	n, err := conn.WaitForNotification(wctx)
	cancel()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err == nil:
		var m versionsMsg
		if n.Channel != notifyChannel || json.Unmarshal([]byte(n.Payload), &m) != nil {
			// Not ours, or not understood: something may have changed.
			return w.resync(ctx, conn)
		}
		w.raise(m)
		return nil
	case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
		pctx, cancel := context.WithTimeout(ctx, watchPingTimeout)
		defer cancel()
		return conn.Ping(pctx)
	default:
		return err
	}
}
