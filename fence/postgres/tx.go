package postgres

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// A transition costs round trips, not CPU: on a loaded host each is tens of
// microseconds to milliseconds. So a transaction is sent in as few as the
// decisions allow: BEGIN with the identity's lock (one batch); the reads the
// decision needs, each its own; then every write whose result is not needed
// (queued with later), the version bumps, the verdicts and COMMIT in one
// batch. The server runs a batch's statements in order, so the lock is held
// before the first read's snapshot is taken.

// lockOn names the identity whose lock a transaction takes at BEGIN: by its
// digest, or by a reservation id (the identity of that row, or of the
// generation it published). Neither: no identity lock.
// reads are queries sent in the same batch, after the lock (so their
// snapshots see everything committed before it was granted), whose rows the
// transaction decides on.
type lockOn struct {
	digest string
	resID  string
	reads  []prefetch
}

// prefetch is one read of a BEGIN batch; scan gets its row.
type prefetch struct {
	sql  string
	args []any
	scan func(pgx.Row) error
}

// tx is one write transaction on one pooled connection.
type tx struct {
	conn    *pgxpool.Conn
	ctx     context.Context
	head    *lockOn // BEGIN and the lock, not sent yet (sent with the first statement, or with COMMIT)
	later   []queued
	pending []*pendingVerdict
	touched map[string]bool // hosts whose identities rows this transaction changed

	version  int64            // fence_version after this transaction (set at COMMIT)
	hostVers map[string]int64 // identity_versions after it
}

type queued struct {
	sql  string
	args []any
	scan func(pgx.Row) error // nil: an Exec
}

// exec queues a write whose result the transaction does not need: it is
// sent with COMMIT.
func (t *tx) exec(sql string, args ...any) { t.later = append(t.later, queued{sql, args, nil}) }

// execScan queues a write sent with COMMIT whose returned row scan reads
// (RETURNING): a compare-and-set whose outcome the caller learns after.
func (t *tx) execScan(scan func(pgx.Row) error, sql string, args ...any) {
	t.later = append(t.later, queued{sql, args, scan})
}

// Exec, Query and QueryRow run a statement now, after sending BEGIN if it
// is still held back.
func (t *tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.flush(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.conn.Exec(ctx, sql, args...)
}

// Query runs a query now (see Exec).
func (t *tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.flush(); err != nil {
		return nil, err
	}
	return t.conn.Query(ctx, sql, args...)
}

// QueryRow runs a query now (see Exec).
func (t *tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.flush(); err != nil {
		return errRow{err}
	}
	return t.conn.QueryRow(ctx, sql, args...)
}

// errRow is a pgx.Row that failed before it was asked.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// flush sends BEGIN (and the lock) if it was held back.
func (t *tx) flush() error {
	if t.head == nil {
		return nil
	}
	lk := *t.head
	t.head = nil
	return t.begin(lk)
}

// wrote names, by digest, the identities the transaction may have changed:
// the one it locked and those its verdicts are about; none (meaning: any)
// when it locked none by digest.
func (t *tx) wrote(lk lockOn) []string {
	if lk.digest == "" {
		return nil
	}
	out := []string{lk.digest}
	for _, p := range t.pending {
		if id := p.rec.Identity; id != nil {
			out = append(out, fence.Identity{StateDir: id.StateDir, SessionID: id.SessionID}.Digest())
		}
	}
	return out
}

// touch records that the transaction changed identities rows of host.
func (t *tx) touch(host string) {
	if t.touched == nil {
		t.touched = map[string]bool{}
	}
	t.touched[host] = true
}

// pendingVerdict is a verdict a transition appends; out receives it with its
// sequence (and timestamp, when zero) once COMMIT has drawn them.
type pendingVerdict struct {
	rec  verdict.Record
	host string
	out  *verdict.Record
}

// queueVerdict appends rec at the end of the transaction.
func (t *tx) queueVerdict(rec verdict.Record, host string, out *verdict.Record) {
	t.pending = append(t.pending, &pendingVerdict{rec: rec, host: host, out: out})
}

// lockIdentity takes the transaction's advisory lock on one identity, named
// by its digest (the lowercase hex sha256 of state_dir NUL session_id): two
// identities that share the lock key merely wait for each other.
func (t *tx) lockIdentity(digest string) error {
	_, err := t.Exec(t.ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey(digest))
	return err
}

// lockKey is the first 64 bits of a hex digest, as a signed key.
func lockKey(digest string) int64 {
	if len(digest) > 16 {
		digest = digest[:16]
	}
	u, _ := strconv.ParseUint(digest, 16, 64)
	return int64(u)
}

// keySQL computes lockKey(Identity.Digest()) in SQL from a row's state_dir
// and session_id (TestLockKeySQL holds the two to each other).
const keySQL = `('x' || encode(substring(sha256(convert_to(state_dir, 'UTF8') || '\x00'::bytea ||
	convert_to(session_id, 'UTF8')) from 1 for 8), 'hex'))::bit(64)::bigint`

// lockByReservation takes the lock of reservation $1's identity, found from
// its row or its published generation; nothing when neither exists (the
// statements that follow then find nothing either).
const lockByReservation = `SELECT pg_advisory_xact_lock(k) FROM (
	SELECT ` + keySQL + ` AS k FROM reservations WHERE reservation_id = $1
	UNION ALL SELECT ` + keySQL + ` FROM identities WHERE reservation_id = $1 LIMIT 1) q`

// write runs fn as one transaction and commits it with the version bumps and
// the verdicts fn queued. A COMMIT whose answer is lost leaves the outcome
// unknown to us; the caller gets fence_unavailable and the rules already
// cover it (a row of ours not in flight is our own abandoned attempt).
func (s *Store) write(ctx context.Context, op string, lk lockOn, fn func(t *tx) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return s.dbErr(op, err)
	}
	defer conn.Release()
	t := &tx{conn: conn, ctx: ctx}
	if len(lk.reads) > 0 {
		err = t.begin(lk)
	} else {
		t.head = &lk // a transaction that reads nothing first is one round trip
	}
	if err == nil {
		err = fn(t)
	}
	if err == nil {
		// Not cancelled with the caller: once the statements ran, a half-way
		// cancellation would only make the outcome ambiguous.
		err = t.commit(context.WithoutCancel(ctx), s.now())
		s.last.drop(t.wrote(lk)) // committed, or perhaps: what show last read of them is past
	}
	if err != nil {
		t.rollback(ctx)
		return s.dbErr(op, err)
	}
	if v, ok := t.hostVers[s.host.Name]; ok {
		s.cache.own(v)
	}
	// Before the write returns: a read of this process that starts after it
	// sees it without waiting for the notification (watch.go).
	s.watch.raise(versionsMsg{Fence: t.version, Hosts: t.hostVers})
	return nil
}

// begin opens the transaction and takes its identity lock in one round trip.
func (t *tx) begin(lk lockOn) error {
	b := &pgx.Batch{}
	queueBegin(b, lk)
	br := t.conn.SendBatch(t.ctx, b)
	err := t.scanBegin(br, lk)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// queueBegin queues BEGIN, the identity lock and the reads.
func queueBegin(b *pgx.Batch, lk lockOn) {
	b.Queue(`BEGIN ISOLATION LEVEL READ COMMITTED`)
	switch {
	case lk.digest != "":
		b.Queue(`SELECT pg_advisory_xact_lock($1)`, lockKey(lk.digest))
	case lk.resID != "":
		b.Queue(lockByReservation, lk.resID)
	}
	for _, r := range lk.reads {
		b.Queue(r.sql, r.args...)
	}
}

func (t *tx) scanBegin(br pgx.BatchResults, lk lockOn) error {
	if _, err := br.Exec(); err != nil {
		return err
	}
	if lk.digest != "" || lk.resID != "" {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	for _, r := range lk.reads {
		if err := r.scan(br.QueryRow()); err != nil {
			return err
		}
	}
	return nil
}

// rollback ends a failed transaction; a connection whose state is unknown
// is closed, so the pool never hands out one inside a transaction.
func (t *tx) rollback(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if t.head != nil {
		return // nothing was sent: there is no transaction
	}
	if _, err := t.conn.Exec(rctx, `ROLLBACK`); err != nil {
		_ = t.conn.Conn().Close(rctx)
	}
}

// commit sends the queued writes, bumps fence_version (its row lock is held
// until COMMIT, which serialises the ends of all writers), bumps the
// identity versions of the hosts touched, NOTIFYs the new versions, appends the verdicts — their
// sequences drawn after the version lock, so in commit order — and commits,
// all in one batch.
func (t *tx) commit(ctx context.Context, now time.Time) error {
	b := &pgx.Batch{}
	head := t.head
	if head != nil {
		queueBegin(b, *head)
	}
	for _, q := range t.later {
		b.Queue(q.sql, q.args...)
	}
	b.Queue(`UPDATE fence_version SET version = version + 1 RETURNING version`)
	hosts := make([]string, 0, len(t.touched))
	for h := range t.touched {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts) // one lock order for every writer
	for _, h := range hosts {
		b.Queue(`INSERT INTO identity_versions AS iv (host, version) VALUES ($1, 1)
			ON CONFLICT (host) DO UPDATE SET version = iv.version + 1 RETURNING version`, h)
	}
	b.Queue(notifySQL, hosts) // delivered to the watchers at COMMIT
	recs := make([]verdict.Record, len(t.pending))
	for i, p := range t.pending {
		var err error
		if recs[i], err = p.queue(b, now); err != nil {
			return err
		}
	}
	b.Queue(`COMMIT`)
	br := t.conn.SendBatch(ctx, b)
	t.head = nil // sent: a failure from here on leaves a transaction to roll back
	var err error
	if head != nil {
		err = t.scanBegin(br, *head)
	}
	if err == nil {
		err = t.results(br, hosts, recs)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// results reads the commit batch's answers in order.
func (t *tx) results(br pgx.BatchResults, hosts []string, recs []verdict.Record) error {
	for _, q := range t.later {
		var err error
		if q.scan != nil {
			err = q.scan(br.QueryRow())
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			return err
		}
	}
	if err := br.QueryRow().Scan(&t.version); err != nil {
		return err
	}
	t.hostVers = make(map[string]int64, len(hosts))
	for _, h := range hosts {
		var v int64
		if err := br.QueryRow().Scan(&v); err != nil {
			return err
		}
		t.hostVers[h] = v
	}
	if _, err := br.Exec(); err != nil { // the NOTIFY
		return err
	}
	for i, p := range t.pending {
		if err := br.QueryRow().Scan(&recs[i].Sequence); err != nil {
			return err
		}
		if p.out != nil {
			*p.out = recs[i]
		}
	}
	tag, err := br.Exec()
	if err == nil && tag.String() != "COMMIT" {
		// COMMIT of a transaction the server had aborted answers ROLLBACK.
		err = errRolledBack
	}
	return err
}

// seqPlaceholder is the sequence a verdict is encoded with before COMMIT
// draws its real one: the insert replaces its first occurrence, which is
// event.sequence (the encoder writes it before any other "sequence" key, and
// a string value cannot contain an unescaped quote).
const seqPlaceholder = `"sequence":-1`

// queue encodes the verdict and queues its insert, which draws the next
// fleet-wide sequence and writes it into the record.
func (p *pendingVerdict) queue(b *pgx.Batch, now time.Time) (verdict.Record, error) {
	rec := p.rec
	rec.Sequence = -1
	if rec.Timestamp.IsZero() {
		rec.Timestamp = now
	}
	js, err := json.Marshal(rec)
	if err != nil {
		return rec, verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "verdict"},
			"verdict record cannot be encoded: %w", err)
	}
	var dir, sid string
	if rec.Identity != nil {
		dir, sid = rec.Identity.StateDir, rec.Identity.SessionID
	}
	b.Queue(`INSERT INTO verdicts (sequence, host, state_dir, session_id, record)
		SELECT s, $1, $2, $3, regexp_replace($4, $5, '"sequence":' || s)
		FROM (SELECT nextval(pg_get_serial_sequence('verdicts', 'sequence')) AS s) n RETURNING sequence`,
		p.host, dir, sid, string(js), seqPlaceholder)
	return rec, nil
}
