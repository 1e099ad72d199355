package fence

import (
	"encoding/json"
	"fmt"
	"time"
)

// How every engine stores times and the recent start times of a restart
// (RestartInfo.Starts): one encoding, so a record reads back the same from
// either engine and the engines cannot drift apart.

// Nanos is t as stored: Unix nanoseconds, 0 for the zero time.
func Nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// FromNanos is Nanos's inverse: the zero time for 0, else UTC.
func FromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// EncodeStarts stores the recent start times as a JSON array of Unix
// nanoseconds.
func EncodeStarts(ts []time.Time) string {
	ns := make([]int64, len(ts))
	for i, t := range ts {
		ns[i] = Nanos(t)
	}
	b, _ := json.Marshal(ns)
	return string(b)
}

// DecodeStarts reads what EncodeStarts stored ("" is none).
func DecodeStarts(s string) ([]time.Time, error) {
	if s == "" {
		return nil, nil
	}
	var ns []int64
	if err := json.Unmarshal([]byte(s), &ns); err != nil {
		return nil, fmt.Errorf("fence: identity starts: %w", err)
	}
	out := make([]time.Time, len(ns))
	for i, n := range ns {
		out[i] = FromNanos(n)
	}
	return out, nil
}

// ReservationScan decodes a reservations row the one way every engine stores
// it: an engine selects the row's columns in Dest's order, scans into Dest,
// and calls Decode, so the engines cannot drift apart in how they read it.
type ReservationScan struct {
	r                                  Reservation
	spec                               string
	claimed, updated, lease, paneStart int64
}

// Dest is the scan destinations, in this column order: state dir, session id,
// reservation id, spec JSON, owner pid, owner incarnation, phase, generation,
// attempt name, tmux id, pane pid, server pid, server start, helper pid,
// abandoned, claimed at, updated at, lease until, pane start, cgroup, owner
// host, owner machine id, owner boot id. Times are Nanos; pane start is a
// signed integer because SQL has no unsigned one.
func (s *ReservationScan) Dest() []any {
	r := &s.r
	return []any{&r.Identity.StateDir, &r.Identity.SessionID, &r.ID, &s.spec, &r.OwnerPID,
		&r.OwnerIncarnation, &r.Phase, &r.Generation, &r.AttemptName, &r.TmuxID, &r.PanePID,
		&r.ServerPID, &r.ServerStart, &r.HelperPID, &r.Abandoned, &s.claimed, &s.updated, &s.lease,
		&s.paneStart, &r.Cgroup, &r.Host, &r.HostMachineID, &r.HostBootID}
}

// Decode is the reservation the scanned columns hold.
func (s *ReservationScan) Decode() (Reservation, error) {
	r := s.r
	if err := json.Unmarshal([]byte(s.spec), &r.Spec); err != nil {
		return Reservation{}, fmt.Errorf("fence: reservation %s: spec: %w", r.ID, err)
	}
	r.PaneStart = uint64(s.paneStart)
	r.ClaimedAt, r.UpdatedAt, r.LeaseUntil = FromNanos(s.claimed), FromNanos(s.updated), FromNanos(s.lease)
	return r, nil
}

// PublishedScan decodes an identities row (a published record) the one way
// every engine stores it, as ReservationScan does a reservations row.
type PublishedScan struct {
	p                                            Published
	at, endedAt, since, deadline, due, paneStart int64
	reason, specJSON, startsJSON                 string
	killed                                       bool
}

// Dest is the scan destinations, in this column order: state dir, session id,
// generation, reservation id, session name, tmux id, server pid, server start,
// state file, label, published at, ended, ended at, pane pid, pane start, boot
// id, cgroup, stop timeout ms, stop since, stop deadline, stop reason, stop
// killed, spec JSON, restart state, restart due, restart reason, restarts,
// failures, starts JSON, host, host machine id.
func (s *PublishedScan) Dest() []any {
	p := &s.p
	return []any{&p.Identity.StateDir, &p.Identity.SessionID, &p.Generation, &p.ReservationID,
		&p.SessionName, &p.TmuxID, &p.ServerPID, &p.ServerStart, &p.StateFile, &p.Label, &s.at,
		&p.Ended, &s.endedAt, &p.PanePID, &s.paneStart, &p.BootID, &p.Cgroup, &p.StopTimeoutMS,
		&s.since, &s.deadline, &s.reason, &s.killed,
		&s.specJSON, &p.Restart.State, &s.due, &p.Restart.Reason, &p.Restart.Restarts, &p.Restart.Failures,
		&s.startsJSON, &p.Host, &p.HostMachineID}
}

// Decode is the published record the scanned columns hold: a stop only when
// its since is set, no spec when its JSON is empty.
func (s *PublishedScan) Decode() (Published, error) {
	p := s.p
	p.PaneStart = uint64(s.paneStart)
	p.PublishedAt, p.EndedAt, p.Restart.Due = FromNanos(s.at), FromNanos(s.endedAt), FromNanos(s.due)
	if s.since != 0 {
		p.Stopping = &Stop{Since: FromNanos(s.since), Deadline: FromNanos(s.deadline), Reason: s.reason, Killed: s.killed}
	}
	if s.specJSON != "" {
		if err := json.Unmarshal([]byte(s.specJSON), &p.Spec); err != nil {
			return p, fmt.Errorf("fence: identity spec: %w", err)
		}
	}
	var err error
	p.Restart.Starts, err = DecodeStarts(s.startsJSON)
	return p, err
}

// Scanner is one row of a query's result, as both engines' drivers return it
// (database/sql's *sql.Row and *sql.Rows, pgx's Row and Rows).
type Scanner interface {
	Scan(dest ...any) error
}

// Rows is a query's result as both engines' drivers return it (database/sql's
// *sql.Rows, pgx's Rows): the scans below read it and leave closing it to
// the engine, whose Close differs.
type Rows interface {
	Scanner
	Next() bool
	Err() error
}

// ScanEach appends every row of rows, read by scan, to out (the caller's
// choice of nil or an empty slice is kept when there is none), and stops at
// the first error, scan's or the iteration's.
func ScanEach[T any](rows Rows, out []T, scan func(Scanner) (T, error)) ([]T, error) {
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// ScanIdentities reads (state_dir, session_id) rows: the read cache's
// Reserved.
func ScanIdentities(rows Rows) ([]Identity, error) {
	var out []Identity
	for rows.Next() {
		var id Identity
		if err := rows.Scan(&id.StateDir, &id.SessionID); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// ScanJournal reads (sequence, state_dir, session_id, record) rows, up to n
// rows or (when maxBytes > 0) until their records pass maxBytes: the row that
// passes it is kept, so a single record larger than maxBytes is still read.
func ScanJournal(rows Rows, n, maxBytes int) ([]JournalRow, error) {
	var out []JournalRow
	size := 0
	for len(out) < n && (maxBytes <= 0 || size <= maxBytes) && rows.Next() {
		var r JournalRow
		if err := rows.Scan(&r.Seq, &r.ID.StateDir, &r.ID.SessionID, &r.Text); err != nil {
			return nil, err
		}
		out, size = append(out, r), size+len(r.Text)
	}
	return out, rows.Err()
}
