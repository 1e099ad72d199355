package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// verdictCache holds the latest verdicts of identities, encoded, for the read
// cache (see readcache.go); its readCache's mu guards it.
type verdictCache struct {
	limit  int   // verdicts held per identity: the latest ones
	loaded bool  // bulk ran: floor and tailSeq are meaningful
	floor  int64 // every verdict with a sequence above floor is held (0: all of them)
	// tailSeq is the highest sequence read: the next update reads above it.
	tailSeq int64
	byID    map[fence.Identity]*verdEntry
	bytes   int // encoded bytes held
}

// verdEntry is one identity's latest verdicts, oldest first.
type verdEntry struct {
	full  bool // read on its own: complete whatever floor is
	last  int64
	encs  [][]byte
	size  int
	array []byte // the JSON array of encs; nil until asked after a change
}

// update brings the held verdicts up to the journal's end: the bulk load the
// first time, else the verdicts journaled since, else (a long backlog, or over
// the byte bound) the bulk load again.
func (vc *verdictCache) update(ctx context.Context, q queryer, limit int) error {
	if !vc.loaded || vc.bytes > readCacheBytes {
		return vc.bulk(ctx, q, limit)
	}
	rows, err := q.QueryContext(ctx, `SELECT sequence, state_dir, session_id, record FROM verdicts
		WHERE sequence > ? ORDER BY sequence LIMIT ?`, vc.tailSeq, readCacheTail+1)
	if err != nil {
		return err
	}
	batch, err := scanJournalRows(rows, readCacheTail+1, 0)
	if err != nil {
		return err
	}
	if len(batch) > readCacheTail {
		return vc.bulk(ctx, q, limit)
	}
	return vc.add(batch)
}

// journalRow is one verdict as the journal holds it.
type journalRow struct {
	seq  int64
	id   fence.Identity
	text string
}

// scanJournalRows reads (sequence, state_dir, session_id, record) rows, closing
// them, up to n rows or (when maxBytes > 0) until their records pass maxBytes.
func scanJournalRows(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
	Close() error
}, n, maxBytes int) ([]journalRow, error) {
	defer rows.Close()
	var out []journalRow
	size := 0
	for len(out) < n && (maxBytes <= 0 || size <= maxBytes) && rows.Next() {
		var r journalRow
		if err := rows.Scan(&r.seq, &r.id.StateDir, &r.id.SessionID, &r.text); err != nil {
			return nil, err
		}
		out, size = append(out, r), size+len(r.text)
	}
	return out, rows.Err()
}

// bulk starts over from the journal's newest verdicts: all of them up to
// readCacheBulk rows and half the byte bound. floor is set below the oldest
// one read, or to 0 when the journal was read to its start.
func (vc *verdictCache) bulk(ctx context.Context, q queryer, limit int) error {
	*vc = verdictCache{limit: limit, byID: map[fence.Identity]*verdEntry{}}
	rows, err := q.QueryContext(ctx, `SELECT sequence, state_dir, session_id, record FROM verdicts
		ORDER BY sequence DESC LIMIT ?`, readCacheBulk+1)
	if err != nil {
		return err
	}
	batch, err := scanJournalRows(rows, readCacheBulk+1, readCacheBytes/2)
	if err != nil {
		return err
	}
	if len(batch) == 0 {
		vc.loaded = true // an empty journal
		return nil
	}
	vc.tailSeq = batch[0].seq
	if len(batch) > readCacheBulk || sumText(batch) > readCacheBytes/2 {
		// The oldest row read is not taken; every one above it is.
		vc.floor = batch[len(batch)-1].seq
		batch = batch[:len(batch)-1]
	}
	slices.Reverse(batch)
	if err := vc.add(batch); err != nil {
		return err
	}
	vc.loaded = true
	return nil
}

func sumText(b []journalRow) int {
	n := 0
	for _, r := range b {
		n += len(r.text)
	}
	return n
}

// add appends rows (ascending sequences) to their identities, keeping the
// latest limit of each.
func (vc *verdictCache) add(batch []journalRow) error {
	for _, r := range batch {
		vc.tailSeq = max(vc.tailSeq, r.seq)
		e := vc.byID[r.id]
		if e == nil {
			e = &verdEntry{}
			vc.byID[r.id] = e
		} else if r.seq <= e.last {
			continue // read on its own after this verdict was journaled
		}
		enc, err := encodeVerdict(r.seq, r.text)
		if err != nil {
			return err
		}
		vc.push(e, r.seq, enc)
	}
	return nil
}

func (vc *verdictCache) push(e *verdEntry, seq int64, enc []byte) {
	e.encs = append(e.encs, enc)
	e.size += len(enc)
	vc.bytes += len(enc)
	for len(e.encs) > vc.limit {
		e.size -= len(e.encs[0])
		vc.bytes -= len(e.encs[0])
		e.encs[0] = nil
		e.encs = e.encs[1:]
	}
	e.last, e.array = seq, nil
}

// array returns id's verdicts as a JSON array, reading the identity on its own
// when what is held may lack some of them (older than floor).
func (vc *verdictCache) array(ctx context.Context, q queryer, id fence.Identity) ([]byte, error) {
	e := vc.byID[id]
	if e == nil && vc.floor == 0 {
		return []byte("[]"), nil // no verdict at all
	}
	if e == nil || !(e.full || vc.floor == 0 || len(e.encs) >= vc.limit) {
		var err error
		if e, err = vc.load(ctx, q, id); err != nil {
			return nil, err
		}
	}
	if e.array == nil {
		a := make([]byte, 0, e.size+len(e.encs)+2)
		a = append(a, '[')
		for i, b := range e.encs {
			if i > 0 {
				a = append(a, ',')
			}
			a = append(a, b...)
		}
		e.array = slices.Clip(append(a, ']'))
	}
	return e.array, nil
}

// load reads id's latest verdicts from the journal (as VerdictsFor does).
func (vc *verdictCache) load(ctx context.Context, q queryer, id fence.Identity) (*verdEntry, error) {
	rows, err := q.QueryContext(ctx, `SELECT sequence, state_dir, session_id, record FROM (
			SELECT sequence, state_dir, session_id, record FROM verdicts WHERE state_dir = ? AND session_id = ?
			ORDER BY sequence DESC LIMIT ?)
		ORDER BY sequence`, id.StateDir, id.SessionID, vc.limit)
	if err != nil {
		return nil, err
	}
	batch, err := scanJournalRows(rows, vc.limit, 0)
	if err != nil {
		return nil, err
	}
	if old := vc.byID[id]; old != nil {
		vc.bytes -= old.size
	}
	e := &verdEntry{full: true}
	for _, r := range batch {
		enc, err := encodeVerdict(r.seq, r.text)
		if err != nil {
			return nil, err
		}
		vc.push(e, r.seq, enc)
	}
	vc.byID[id] = e
	return e, nil
}

// encodeVerdict is a journal row as the uncached path returns it (decoded, the
// sequence set from its column) encoded as json.Marshal encodes a Record.
func encodeVerdict(seq int64, text string) ([]byte, error) {
	var rec verdict.Record
	if err := json.Unmarshal([]byte(text), &rec); err != nil {
		return nil, fmt.Errorf("verdict %d: %w", seq, err)
	}
	rec.Sequence = seq
	b, err := json.Marshal(rec)
	return slices.Clip(b), err
}
