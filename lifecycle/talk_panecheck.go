package lifecycle

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// The agent's pane under a running follow.
//
// A pane respawned by hand keeps its id: tmux tells no client, the census
// sees it at its next reconcile (subFormat leaves pane pids out), and the
// follower client goes on receiving the pane's output — a person's program's
// in place of the agent's. So what reads a pane checks which process it runs:
// a read once at its start (agentPaneChecked), and a running follow after
// output (paneCheckGap apart at most): the first output of a person's program
// is what tells that the agent is no longer there. A pane found without its
// agent starts the generation's stop (paneGone), which ends the session's
// output streams at once, as the session's end would.

// paneCheckGap is the least time between two checks of a followed pane's
// process while its output continues: one small command per burst, at most
// four a second per followed session, whatever the output's rate.
const paneCheckGap = 250 * time.Millisecond

// agentPaneChecked asks tmux which process t's pane runs and re-targets t at
// the agent's own pane when it is another's (checkedPane): a pane respawned
// or killed by hand since the census listed it is refused (paneMissing,
// its generation's stop begun) before anything is read from it.
func (m *Manager) agentPaneChecked(ctx context.Context, t *talkTarget) error {
	for try := 0; ; try++ {
		rep, err := m.commandIn(ctx, t.life, "display-message", "-p", "-t", t.pane(), "#{pane_pid}")
		if err != nil {
			return m.talkError(*t, err)
		}
		ok, err := m.checkedPane(ctx, t, strings.Join(rep.Lines, ""))
		if ok || err != nil || try > 0 {
			return err // a second move under us is read as it is, as Screen does
		}
	}
}

// outputSeen is told by the feed's reader of output from its pane; it starts
// a check of the pane's process unless one runs or ran less than
// paneCheckGap ago. It never blocks.
func (feed *outputFeed) outputSeen() {
	feed.mu.Lock()
	due := feed.agentPID > 0 && !feed.checking && time.Since(feed.checked) >= paneCheckGap
	if due {
		feed.checking, feed.checked = true, time.Now()
	}
	feed.mu.Unlock()
	if due && !feed.ts.spawn(func() { feed.m.checkFeedPane(feed) }) {
		feed.mu.Lock()
		feed.checking = false
		feed.mu.Unlock()
	}
}

// checkFeedPane compares the process feed's pane runs with the agent the
// feed knows, then with the generation published in the session now (a
// restart's next one has another pid): a pane that runs neither has lost its
// agent (endIfPaneMissing stops the generation and ends the streams).
func (m *Manager) checkFeedPane(feed *outputFeed) {
	defer func() {
		feed.mu.Lock()
		feed.checking = false
		feed.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), m.cmdTimeout)
	defer cancel()
	rep, err := m.commandIn(ctx, feed.life, "display-message", "-p", "-t", feed.pane, "#{pane_pid}")
	if err != nil {
		return // the pane or session gone: its end ends the feed
	}
	pid, _ := strconv.Atoi(strings.Join(rep.Lines, ""))
	feed.mu.Lock()
	known := feed.agentPID
	feed.mu.Unlock()
	if pid <= 0 || pid == known {
		return
	}
	p, ok := m.publishedByTmuxID(ctx, feed.sessID, feed.life)
	switch {
	case !ok || p.PanePID <= 0:
		// Between two generations (a restart's helper runs in the kept
		// pane until its generation is published), or none of ours.
	case p.PanePID == pid:
		feed.mu.Lock()
		feed.agentPID = pid // the next generation, followed through
		feed.mu.Unlock()
	default:
		m.endIfPaneMissing(ctx, p)
	}
}

// spawn runs fn on a goroutine counted in running, unless CloseFollowers has
// begun (false: fn does not run).
func (ts *talkState) spawn(fn func()) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return false
	}
	ts.running.Add(1) // under mu, so never after CloseFollowers began waiting
	go func() { defer ts.running.Done(); fn() }()
	return true
}
