package fence

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// verdictCache holds the latest verdicts of identities, encoded, for the read
// cache (see readcache.go); its ReadCache's mu guards it.
type verdictCache struct {
	limit  int   // verdicts held per identity: the latest ones
	loaded bool  // bulk ran: floor and tailSeq are meaningful
	floor  int64 // every verdict with a sequence above floor is held (0: all of them)
	// tailSeq is the highest sequence read: the next update reads above it.
	tailSeq int64
	byID    map[Identity]*verdEntry
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
func (vc *verdictCache) update(ctx context.Context, src ReadSource, limit int) error {
	if !vc.loaded || vc.bytes > readCacheBytes {
		return vc.bulk(ctx, src, limit)
	}
	batch, err := src.JournalSince(ctx, vc.tailSeq, ReadCacheTail+1)
	if err != nil {
		return err
	}
	if len(batch) > ReadCacheTail {
		return vc.bulk(ctx, src, limit)
	}
	return vc.add(batch)
}

// bulk starts over from the journal's newest verdicts: all of them up to
// ReadCacheBulk rows and half the byte bound. floor is set below the oldest
// one read, or to 0 when the journal was read to its start.
func (vc *verdictCache) bulk(ctx context.Context, src ReadSource, limit int) error {
	*vc = verdictCache{limit: limit, byID: map[Identity]*verdEntry{}}
	batch, err := src.JournalNewest(ctx, ReadCacheBulk+1, readCacheBytes/2)
	if err != nil {
		return err
	}
	if len(batch) == 0 {
		vc.loaded = true // an empty journal
		return nil
	}
	vc.tailSeq = batch[0].Seq
	if len(batch) > ReadCacheBulk || sumText(batch) > readCacheBytes/2 {
		// The oldest row read is not taken; every one above it is.
		vc.floor = batch[len(batch)-1].Seq
		batch = batch[:len(batch)-1]
	}
	slices.Reverse(batch)
	if err := vc.add(batch); err != nil {
		return err
	}
	vc.loaded = true
	return nil
}

func sumText(b []JournalRow) int {
	n := 0
	for _, r := range b {
		n += len(r.Text)
	}
	return n
}

// add appends rows (ascending sequences) to their identities, keeping the
// latest limit of each.
func (vc *verdictCache) add(batch []JournalRow) error {
	for _, r := range batch {
		vc.tailSeq = max(vc.tailSeq, r.Seq)
		e := vc.byID[r.ID]
		if e == nil {
			e = &verdEntry{}
			vc.byID[r.ID] = e
		} else if r.Seq <= e.last {
			continue // read on its own after this verdict was journaled
		}
		enc, err := encodeVerdict(r.Seq, r.Text)
		if err != nil {
			return err
		}
		vc.push(e, r.Seq, enc)
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
func (vc *verdictCache) array(ctx context.Context, src ReadSource, id Identity) ([]byte, error) {
	e := vc.byID[id]
	if e == nil && vc.floor == 0 {
		return []byte("[]"), nil // no verdict at all
	}
	if e == nil || !(e.full || vc.floor == 0 || len(e.encs) >= vc.limit) {
		var err error
		if e, err = vc.load(ctx, src, id); err != nil {
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

// load reads id's latest verdicts from the journal (as an engine's VerdictsFor does).
func (vc *verdictCache) load(ctx context.Context, src ReadSource, id Identity) (*verdEntry, error) {
	batch, err := src.JournalFor(ctx, id, vc.limit)
	if err != nil {
		return nil, err
	}
	if old := vc.byID[id]; old != nil {
		vc.bytes -= old.size
	}
	e := &verdEntry{full: true}
	for _, r := range batch {
		enc, err := encodeVerdict(r.Seq, r.Text)
		if err != nil {
			return nil, err
		}
		vc.push(e, r.Seq, enc)
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
