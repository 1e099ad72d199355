package api

import (
	"context"
	"net/http"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// verdictPage is how many records one journal read returns.
const verdictPage = 1000

// handleVerdicts answers GET /v1/verdicts?since=SEQ[&follow=1] with JSON lines,
// oldest first. With follow it subscribes before reading the journal, so no
// record falls between the history and the live feed; duplicates are dropped
// by sequence and a gap in the feed (a subscriber that fell behind) is filled
// from the journal, so a follower never misses one.
//
// With fleet=1 it reads the fleet's journal instead (every host's verdicts,
// in the fleet-wide sequence: Service.FleetVerdictsSince); a fleet follow
// reads it again every fleetPoll, since other hosts' verdicts reach this
// daemon only through the database.
func (s *Server) handleVerdicts(w http.ResponseWriter, r *http.Request) {
	since, follow, err := parseSince(r)
	if err == nil {
		var fleet bool
		if fleet, err = queryFlag(r, "fleet"); err == nil && fleet {
			s.fleetVerdicts(w, r, since, follow)
			return
		}
	}
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
	defer s.deadlineAtStop(ctx, w)()
	st := &verdictStream{w: w, last: since, read: s.cfg.Service.VerdictsSince}
	if !st.start(ctx) {
		return
	}
	if follow {
		s.follow(ctx, st, feed)
	}
}

// start writes the history after st.last (the first page's error as the
// answer; a history over one page is backfilled) and reports whether the
// stream is open.
func (st *verdictStream) start(ctx context.Context) bool {
	first, err := st.read(ctx, st.last, verdictPage)
	if err != nil {
		writeError(st.w, err)
		return false
	}
	st.w.Header().Set("Content-Type", "application/x-ndjson")
	st.w.Header().Set("X-Content-Type-Options", "nosniff")
	st.w.WriteHeader(http.StatusOK)
	if err := st.writeAll(first); err != nil {
		return false
	}
	if len(first) == verdictPage {
		if err := st.backfill(ctx, -1); err != nil {
			return false
		}
	}
	st.flush()
	return true
}

// fleetPoll is how often a fleet follower reads the fleet's journal again.
const fleetPoll = 250 * time.Millisecond

// fleetVerdicts is GET /v1/verdicts?fleet=1: the fleet's journal. A follow
// polls it (one indexed read per fleetPoll) and outlives the database's
// absences: a read that fails is tried again at the next tick.
func (s *Server) fleetVerdicts(w http.ResponseWriter, r *http.Request, since int64, follow bool) {
	ctx := r.Context()
	st := &verdictStream{w: w, last: since, read: s.cfg.Service.FleetVerdictsSince}
	if !st.start(ctx) || !follow {
		return
	}
	t := time.NewTicker(fleetPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stopping:
			return
		case <-t.C:
		}
		if err := st.backfill(ctx, -1); err != nil && ctx.Err() != nil {
			return
		}
		st.flush()
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
	read func(ctx context.Context, after int64, limit int) ([]verdict.Record, error) // the journal
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
		recs, err := st.read(ctx, st.last, verdictPage)
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
