package api

import (
	"context"
	"net/http"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// verdictPage is how many records one journal read returns.
const verdictPage = 1000

// handleVerdicts answers GET /v1/verdicts?since=SEQ[&follow=1] with JSON lines,
// oldest first. With follow it subscribes before reading the journal, so no
// record falls between the history and the live feed; duplicates are dropped
// by sequence and a gap in the feed (a subscriber that fell behind) is filled
// from the journal, so a follower never misses one.
func (s *Server) handleVerdicts(w http.ResponseWriter, r *http.Request) {
	since, follow, err := parseSince(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var feed <-chan verdict.Record
	if follow {
		var cancel func()
		feed, cancel = s.cfg.Service.SubscribeVerdicts(since)
		defer cancel()
	}
	ctx := r.Context()
	first, err := s.cfg.Service.VerdictsSince(ctx, since, verdictPage)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	st := &verdictStream{w: w, last: since, svc: s.cfg.Service}
	if err := st.writeAll(first); err != nil {
		return
	}
	if len(first) == verdictPage {
		if err := st.backfill(ctx, -1); err != nil {
			return
		}
	}
	st.flush()
	if follow {
		s.follow(ctx, st, feed)
	}
}

func (s *Server) follow(ctx context.Context, st *verdictStream, feed <-chan verdict.Record) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stopping:
			return
		case rec, ok := <-feed:
			if !ok {
				return
			}
			if rec.Sequence <= st.last {
				continue
			}
			if rec.Sequence > st.last+1 {
				if st.backfill(ctx, rec.Sequence-1) != nil {
					return
				}
			}
			if st.writeAll([]verdict.Record{rec}) != nil {
				return
			}
			st.flush()
		}
	}
}

type verdictStream struct {
	w    http.ResponseWriter
	svc  Service
	last int64
}

func (st *verdictStream) writeAll(recs []verdict.Record) error {
	for _, rec := range recs {
		if rec.Sequence <= st.last {
			continue
		}
		if _, err := st.w.Write(rec.Line()); err != nil {
			return err
		}
		st.last = rec.Sequence
	}
	return nil
}

// backfill writes journal records after st.last up to and including upTo
// (every one when upTo < 0).
func (st *verdictStream) backfill(ctx context.Context, upTo int64) error {
	for upTo < 0 || st.last < upTo {
		recs, err := st.svc.VerdictsSince(ctx, st.last, verdictPage)
		if err != nil {
			return err
		}
		if upTo >= 0 {
			recs = below(recs, upTo)
		}
		before := st.last
		if err := st.writeAll(recs); err != nil {
			return err
		}
		if st.last == before || len(recs) < verdictPage {
			return nil
		}
	}
	return nil
}

func below(recs []verdict.Record, upTo int64) []verdict.Record {
	for i, r := range recs {
		if r.Sequence > upTo {
			return recs[:i]
		}
	}
	return recs
}

func (st *verdictStream) flush() {
	if f, ok := st.w.(http.Flusher); ok {
		f.Flush()
	}
}
