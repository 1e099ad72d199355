package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// pendingVerdict is a verdict a transition appends; out receives it with its
// sequence (and timestamp, when zero) once the transaction has drawn them.
type pendingVerdict struct {
	rec  verdict.Record
	host string
	out  *verdict.Record
}

// queueVerdict appends rec at the end of the transaction (tx.finish).
func (t *tx) queueVerdict(rec verdict.Record, host string, out *verdict.Record) {
	t.pending = append(t.pending, &pendingVerdict{rec: rec, host: host, out: out})
}

// insert draws the next fleet-wide sequence, stamps the record with it and
// stores it with its identity columns (the index VerdictsFor reads).
func (p *pendingVerdict) insert(t *tx, now time.Time) error {
	rec := p.rec
	if err := t.QueryRow(t.ctx, `SELECT nextval(pg_get_serial_sequence('verdicts', 'sequence'))`).Scan(&rec.Sequence); err != nil {
		return err
	}
	if rec.Timestamp.IsZero() {
		rec.Timestamp = now
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "verdict"},
			"verdict record cannot be encoded: %w", err)
	}
	var dir, sid string
	if rec.Identity != nil {
		dir, sid = rec.Identity.StateDir, rec.Identity.SessionID
	}
	if _, err := t.Exec(t.ctx, `INSERT INTO verdicts (sequence, host, state_dir, session_id, record)
		VALUES ($1, $2, $3, $4, $5)`, rec.Sequence, p.host, dir, sid, string(b)); err != nil {
		return err
	}
	if p.out != nil {
		*p.out = rec
	}
	return nil
}

// verdictsQuery runs a (sequence, record) query and decodes the rows.
func (s *Store) verdictsQuery(ctx context.Context, op, sql string, args ...any) ([]verdict.Record, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, s.dbErr(op, err)
	}
	defer rows.Close()
	out := []verdict.Record{}
	for rows.Next() {
		var seq int64
		var text string
		if err := rows.Scan(&seq, &text); err != nil {
			return nil, s.dbErr(op, err)
		}
		var rec verdict.Record
		if err := json.Unmarshal([]byte(text), &rec); err != nil {
			return nil, s.dbErr(op, err)
		}
		rec.Sequence = seq
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, s.dbErr(op, err)
	}
	return out, nil
}

// AppendVerdict journals rec with the next fleet-wide sequence number and
// returns it with Sequence (and Timestamp, when zero) set. It implements
// verdict.Journal.
func (s *Store) AppendVerdict(ctx context.Context, rec verdict.Record) (verdict.Record, error) {
	var out verdict.Record
	err := s.write(ctx, "append_verdict", func(t *tx) error {
		t.queueVerdict(rec, s.host.Name, &out)
		return nil
	})
	return out, err
}

// VerdictsSince returns up to limit of this host's verdicts with a sequence
// above after, oldest first; limit <= 0 means all of them. It is what each
// daemon's verdicts.jsonl and its verdict stream follow: sequences are
// fleet-wide, so a host's own have gaps where other hosts wrote (the
// verdict writer asks the journal at a gap), and they commit in order.
func (s *Store) VerdictsSince(ctx context.Context, after int64, limit int) ([]verdict.Record, error) {
	return s.verdictsQuery(ctx, "verdicts", `SELECT sequence, record FROM verdicts WHERE host = $1 AND sequence > $2
		ORDER BY sequence LIMIT $3`, s.host.Name, after, limitOrAll(limit))
}

// FleetVerdictsSince is VerdictsSince over every host (`verdicts --fleet`).
func (s *Store) FleetVerdictsSince(ctx context.Context, after int64, limit int) ([]verdict.Record, error) {
	return s.verdictsQuery(ctx, "verdicts", `SELECT sequence, record FROM verdicts WHERE sequence > $1
		ORDER BY sequence LIMIT $2`, after, limitOrAll(limit))
}

// limitOrAll is a LIMIT argument: NULL (no limit) for limit <= 0.
func limitOrAll(limit int) any {
	if limit <= 0 {
		return nil
	}
	return limit
}
