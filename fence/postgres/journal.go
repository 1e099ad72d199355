package postgres

import (
	"context"
	"encoding/json"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

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
	err := s.write(ctx, "append_verdict", lockOn{}, func(t *tx) error {
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
