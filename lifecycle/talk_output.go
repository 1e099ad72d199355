package lifecycle

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/metrics"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Output following (GET /v1/sessions/{name}/output?follow=1).
//
// The source is one Follower per followed session — a second tmux control
// client attached read-only, with ignore-size and pause-after, to that session
// only — whatever the number of followers: its reader decodes %output once and
// copies each chunk into every follower's bounded buffer without ever waiting.
// A follower whose buffer is full loses the chunk and is told how many bytes it
// lost, in-band, before the next chunk it gets. So a slow reader costs neither
// the agent (tmux reads the pane at its own pace), nor the daemon's main control
// connection (it carries no pane output at all), nor the other followers. The
// Follower is detached when the last follower leaves.

// FollowBuffer is how many bytes of output one follower may have waiting.
const FollowBuffer = 1 << 20

// followPauseAfter is the Follower's pause-after in seconds: its reader never
// waits, so tmux pauses the pane for it only when the daemon is starved of CPU.
const followPauseAfter = 5

// OutputItem is one element of an output stream: Data (with the time it was
// read), or a gap: Dropped bytes lost because this follower was too slow, or
// Paused when tmux itself dropped an unknown amount (the daemon fell behind).
type OutputItem struct {
	At      time.Time
	Data    []byte
	Dropped int64
	Paused  bool
}

// OutputSub is one follower of a session's output.
type OutputSub struct {
	feed   *outputFeed
	notify chan struct{} // cap 1: items are waiting or the stream ended

	mu      sync.Mutex
	items   []OutputItem
	size    int   // data bytes in items
	max     int   // FollowBuffer
	lost    int64 // bytes dropped since the last item queued
	paused  bool  // a tmux pause since the last item queued
	ended   bool  // the session's stream ended
	total   int64 // bytes dropped over the subscription's life
	closeMu sync.Once
}

// outputFeed is the one Follower of a session and its subscribers.
type outputFeed struct {
	m     *Manager
	ts    *talkState
	key   string
	life  tmuxctl.ServerLife
	pane  string
	ready chan struct{} // closed once f (or err) is set
	f     *tmuxctl.Follower
	err   error

	mu   sync.Mutex
	subs map[*OutputSub]struct{}
	done bool // the follower ended; no more subscribers

	// The agent's pane check (talk_panecheck.go), under mu.
	sessID   string    // the followed session's tmux id
	agentPID int       // the pane's process while it is the agent's
	checking bool      // a check runs
	checked  time.Time // when the last check began
}

// FollowOutput subscribes to what the session's pane writes from now on. The
// subscription ends when the session ends (Next reports ok=false) or Close;
// a session kept for a restart is followed through its next generation.
func (m *Manager) FollowOutput(ctx context.Context, ref Ref) (*OutputSub, error) {
	t, err := m.readTarget(ctx, ref)
	if err != nil {
		return nil, err
	}
	if err := m.agentPaneChecked(ctx, &t); err != nil {
		return nil, err // not a person's program's output in the agent's place
	}
	return m.followTarget(ctx, t)
}

func (m *Manager) followTarget(ctx context.Context, t talkTarget) (*OutputSub, error) {
	for attempt := 0; attempt < 3; attempt++ {
		feed, created := m.talk.feed(m, t)
		if feed == nil {
			return nil, ErrShuttingDown
		}
		if created {
			go func() { defer m.talk.running.Done(); m.startFeed(feed, t) }()
		}
		select {
		case <-feed.ready:
		case <-ctx.Done():
			return nil, verdict.Errorf(verdict.CodeTimeout, nil, "attaching the output follower: %v", ctx.Err())
		}
		if feed.err != nil {
			return nil, m.talkError(t, feed.err)
		}
		sub := &OutputSub{feed: feed, notify: make(chan struct{}, 1), max: FollowBuffer}
		feed.mu.Lock()
		if !feed.done {
			feed.subs[sub] = struct{}{}
			feed.mu.Unlock()
			m.talk.subs.Add(1)
			return sub, nil
		}
		feed.mu.Unlock() // it ended between lookup and now: the session may be gone
	}
	return nil, verdict.Errorf(verdict.CodeNotFound, map[string]any{"name": t.sess.Name},
		"session %s is gone", t.sess.Name)
}

// feed returns key's feed, creating it (created: the caller starts it, and
// running counts it); nil once CloseFollowers has begun.
func (ts *talkState) feed(m *Manager, t talkTarget) (*outputFeed, bool) {
	key := talkKey(t)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return nil, false
	}
	if ts.feeds == nil {
		ts.feeds = map[string]*outputFeed{}
	}
	if f := ts.feeds[key]; f != nil {
		return f, false
	}
	f := &outputFeed{m: m, ts: ts, key: key, life: t.life, pane: t.pane(), ready: make(chan struct{}),
		subs: map[*OutputSub]struct{}{}, sessID: t.sess.ID, agentPID: t.pub.PanePID}
	ts.feeds[key] = f
	ts.running.Add(1) // under mu, so never after CloseFollowers began waiting
	return f, true
}

// startFeed attaches the feed's Follower, then waits for its end.
func (m *Manager) startFeed(feed *outputFeed, t talkTarget) {
	cfg := m.cfg.Tmux.Config()
	ctx, cancel := context.WithTimeout(context.Background(), m.cmdTimeout)
	m.talk.transit.Lock() // see closeFollower
	f, err := tmuxctl.DialFollower(ctx, cfg, t.sess.ID, followPauseAfter, feed.publish)
	m.talk.transit.Unlock()
	cancel()
	if err == nil && f.PID() == 0 {
		err = errors.New("follower has no pid")
	}
	feed.f, feed.err = f, err
	close(feed.ready)
	if err != nil {
		m.dropFeed(feed)
		return
	}
	m.talk.follows.Add(1)
	<-f.Done()
	m.talk.follows.Add(-1)
	m.dropFeed(feed)
	m.closeFollower(feed, t.life)
}

// closeFollower detaches feed's Follower and waits until tmux has announced the
// detach to its control clients (one round trip on the main connection after
// the client exited: the notification is queued when the server loses the
// client, and runs before our command's turn). tmux 3.3a crashes when it
// writes %client-detached to a control client that is still identifying
// (control_state not yet set; seen in TestTalkWaitText, server log ending in
// control_vwrite), so attaching and detaching followers are serialised under
// transit: no follower of ours identifies while one of ours detaches.
func (m *Manager) closeFollower(feed *outputFeed, life tmuxctl.ServerLife) {
	m.talk.transit.Lock()
	defer m.talk.transit.Unlock()
	_ = feed.f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), m.cmdTimeout)
	defer cancel()
	_, _ = m.commandIn(ctx, life, "display-message", "-p", "settled")
}

// CloseFollowers detaches every output Follower — by EOF on its stdin, one at a
// time — and waits (within ctx) until their clients have exited: at daemon
// stop, so that none is left to die by the parent-death signal, which a tmux
// 3.3a server can take badly. Streams still open end; new ones are refused busy.
func (m *Manager) CloseFollowers(ctx context.Context) {
	m.talk.mu.Lock()
	m.talk.closed = true // no new followers from now on
	feeds := make([]*outputFeed, 0, len(m.talk.feeds))
	for _, f := range m.talk.feeds {
		feeds = append(feeds, f)
	}
	m.talk.mu.Unlock()
	for _, feed := range feeds {
		select {
		case <-feed.ready:
			if feed.f != nil {
				m.closeFollower(feed, feed.life)
			}
		case <-ctx.Done():
			return
		}
	}
	done := make(chan struct{})
	go func() { m.talk.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// dropFeed ends the feed: every subscriber's stream ends after what it holds.
func (m *Manager) dropFeed(feed *outputFeed) {
	m.talk.mu.Lock()
	if m.talk.feeds[feed.key] == feed {
		delete(m.talk.feeds, feed.key)
	}
	m.talk.mu.Unlock()
	feed.mu.Lock()
	feed.done = true
	subs := feed.subs
	feed.subs = map[*OutputSub]struct{}{}
	feed.mu.Unlock()
	for s := range subs {
		s.end()
	}
}

// publish is the Follower's callback (its reader goroutine): it never blocks.
func (feed *outputFeed) publish(ev tmuxctl.FollowEvent) {
	if ev.Pane != feed.pane && feed.pane[0] == '%' {
		return
	}
	now := time.Now()
	feed.mu.Lock()
	for s := range feed.subs {
		s.push(now, ev)
	}
	feed.mu.Unlock()
	if len(ev.Data) > 0 {
		feed.outputSeen() // is it still the agent writing?
	}
}

func (s *OutputSub) push(now time.Time, ev tmuxctl.FollowEvent) {
	s.mu.Lock()
	switch {
	case ev.Paused:
		s.paused = true
	case s.size+len(ev.Data) > s.max:
		s.lost += int64(len(ev.Data))
		s.total += int64(len(ev.Data))
		s.feed.ts.dropped.Add(int64(len(ev.Data)))
	default:
		s.flushGapLocked(now)
		s.items = append(s.items, OutputItem{At: now, Data: ev.Data})
		s.size += len(ev.Data)
	}
	s.mu.Unlock()
	s.wake()
}

// flushGapLocked queues the gap (drops, pause) that precedes the next item.
func (s *OutputSub) flushGapLocked(now time.Time) {
	if s.lost > 0 || s.paused {
		s.items = append(s.items, OutputItem{At: now, Dropped: s.lost, Paused: s.paused})
		s.lost, s.paused = 0, false
	}
}

func (s *OutputSub) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *OutputSub) end() {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
	s.wake()
}

// Next returns the items waiting, in order, blocking until there are some; ok
// is false once the stream has ended and everything was returned (a last gap
// included), or when ctx is done.
func (s *OutputSub) Next(ctx context.Context) (items []OutputItem, ok bool) {
	for {
		s.mu.Lock()
		if len(s.items) == 0 {
			// A loss after the last chunk queued is reported as soon as the
			// reader has caught up, not only before the next chunk.
			s.flushGapLocked(time.Now())
		}
		if len(s.items) > 0 {
			items, s.items, s.size = s.items, nil, 0
			s.mu.Unlock()
			return items, true
		}
		ended := s.ended
		s.mu.Unlock()
		if ended {
			return nil, false
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return nil, false
		}
	}
}

// Dropped is how many bytes this follower has lost so far.
func (s *OutputSub) Dropped() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// Done is a channel that receives when items are waiting or the stream ended.
func (s *OutputSub) Done() <-chan struct{} { return s.notify }

// Close leaves the feed; the last subscriber to leave detaches its Follower.
func (s *OutputSub) Close() {
	s.closeMu.Do(func() {
		feed := s.feed
		feed.ts.subs.Add(-1)
		feed.ts.mu.Lock()
		feed.mu.Lock()
		delete(feed.subs, s)
		last := len(feed.subs) == 0 && !feed.done
		if last {
			// Out of the map now, so that a new follower attaches a new
			// Follower instead of finding this one closing.
			feed.done = true
			if feed.ts.feeds[feed.key] == feed {
				delete(feed.ts.feeds, feed.key)
			}
		}
		feed.mu.Unlock()
		feed.ts.mu.Unlock()
		if last && feed.f != nil {
			go feed.m.closeFollower(feed, feed.life) // startFeed sees Done and drops the feed
		}
	})
}

// DetachFollowers ends the output streams of session id in life and detaches
// its Follower (closeFollower) before the session is killed: a kill-session
// would detach it inside tmux at a moment the daemon does not choose, which
// tmux 3.3a cannot survive while another of our followers is identifying.
func (m *Manager) DetachFollowers(life tmuxctl.ServerLife, id string) {
	key := talkKey(talkTarget{life: life, sess: census.Session{ID: id}})
	m.talk.mu.Lock()
	feed := m.talk.feeds[key]
	m.talk.mu.Unlock()
	if feed == nil {
		return
	}
	<-feed.ready
	if feed.f != nil {
		m.closeFollower(feed, life) // its end drops the feed and ends the streams
	}
}

// registerTalkMetrics exports the followers' figures (nil registry: none).
func (m *Manager) registerTalkMetrics(r *metrics.Registry) {
	if r == nil {
		return
	}
	r.GaugeFunc("skc_output_follower_clients", "tmux clients attached to follow a session's output (one per followed session).",
		func() float64 { return float64(m.talk.follows.Load()) })
	r.GaugeFunc("skc_output_subscribers", "Open output streams (output?follow=1, wait --idle/--text).",
		func() float64 { return float64(m.talk.subs.Load()) })
	r.CounterFunc("skc_output_dropped_bytes_total", "Output bytes dropped for followers too slow to read them.",
		func() float64 { return float64(m.talk.dropped.Load()) })
}

// Follows is how many sessions have an output Follower attached now.
func (m *Manager) Follows() int64 { return m.talk.follows.Load() }
