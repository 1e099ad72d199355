package lifecycle

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/skc-supervisor/skc-supervisor/census"
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Talking to agents (docs/contract.md "Talking to agents"): screen, input, output,
// wait, and the output tail of ended verdicts. Every tmux command goes over the
// daemon's one control connection, by pane id, in the server life the session
// was published in; only a followed session's output has a client of its own
// (talk_output.go).

// MaxScreenLines is the most history lines a screen request may ask for.
const MaxScreenLines = 10000

// Output tail bounds (skc.output.tail).
const (
	tailLines = 50
	tailBytes = 8 << 10
)

// talkTarget is a session the caller may talk to: its published generation, the
// census's view of it, and the server life both belong to.
type talkTarget struct {
	pub  fence.Published
	sess census.Session
	life tmuxctl.ServerLife
}

// pane is the agent's pane id ("%N"); the session's own id when the census has
// not read it yet (tmux resolves a session target to its active pane).
func (t talkTarget) pane() string {
	if t.sess.PaneID != "" {
		return t.sess.PaneID
	}
	return t.sess.ID
}

// talkTarget resolves ref the way Show and Kill do (only published, not ended
// sessions of this daemon, in the census's current server life): one function,
// so that the daemon's shared name resolver replaces it in one place.
func (m *Manager) talkTarget(ctx context.Context, ref Ref) (talkTarget, error) {
	pub, sess, err := m.resolve(ctx, ref)
	if err != nil {
		return talkTarget{}, err
	}
	return m.agentTalkTarget(ctx, pub, sess)
}

// agentTalkTarget is the talkTarget of pub in sess, its pane the agent's own
// even when a person's pane is the session's active one (agentpane.go): input
// meant for the agent must not be typed into a person's shell, nor a
// person's screen read as the agent's. A session tmux lists without the
// agent's pane (killed or respawned by hand) is refused, and its generation
// stopped (paneMissing).
func (m *Manager) agentTalkTarget(ctx context.Context, pub fence.Published, sess census.Session) (talkTarget, error) {
	if pub.PanePID > 0 && sess.PanePID != pub.PanePID {
		id, _, found, listed := m.agentPaneIn(ctx, pub)
		switch {
		case found:
			sess.PaneID = id
		case m.paneGone(pub, found, listed):
			return talkTarget{}, paneMissing(sess.Name)
		}
	}
	return talkTarget{pub: pub, sess: sess, life: m.lifeOf(pub.ServerPID, pub.ServerStart)}, nil
}

// checkedPane re-targets t at its agent's pane when a read of t's pane
// showed another process there (pid: the pane's, from the same pipeline as
// the read): the census had not seen a pane respawned, killed or made
// inactive by hand. ok false: read again at t's new pane; err: the agent's
// pane is gone (paneMissing) or could not be looked for.
func (m *Manager) checkedPane(ctx context.Context, t *talkTarget, pid string) (ok bool, err error) {
	if t.pub.PanePID <= 0 || pid == strconv.Itoa(t.pub.PanePID) || t.pub.Ended {
		return true, nil
	}
	id, _, found, listed := m.agentPaneIn(ctx, t.pub)
	switch {
	case found && id != t.sess.PaneID:
		t.sess.PaneID, t.sess.PanePID = id, t.pub.PanePID
		return false, nil
	case found:
		return true, nil // respawned back since: what was read is its
	case m.paneGone(t.pub, found, listed):
		return false, paneMissing(t.sess.Name)
	}
	return false, verdict.Errorf(verdict.CodeTmuxUnavailable, nil, "tmux did not list the panes of session %s", t.sess.Name)
}

// readTarget is talkTarget for what only reads a pane (screen, output, wait
// for idle or text): a session kept for a restart — its agent ended, its dead
// pane still there, the next generation to start in it — can be read too.
func (m *Manager) readTarget(ctx context.Context, ref Ref) (talkTarget, error) {
	t, err := m.talkTarget(ctx, ref)
	if err == nil {
		return t, nil
	}
	if k, ok := m.keptTarget(ctx, ref, err); ok {
		return k, nil
	}
	return talkTarget{}, err
}

// Cursor is a cursor position: column x and row y of the visible screen, from 0.
type Cursor struct {
	X int `json:"x"`
	Y int `json:"y"`
}

// Screen is GET /v1/sessions/{name}/screen and `screen --json`.
type Screen struct {
	Name     string   `json:"name"`
	Lines    []string `json:"lines"`
	Cursor   Cursor   `json:"cursor"`
	PaneDead bool     `json:"pane_dead"`
}

// Screen returns what the session's pane shows: history lines (up to lines, at
// most MaxScreenLines) followed by the visible screen, trailing spaces trimmed;
// with ansi the lines keep their colours and attributes as escape sequences
// (capture-pane -e). One display-message and one capture-pane, no fork.
func (m *Manager) Screen(ctx context.Context, ref Ref, lines int, ansi bool) (Screen, error) {
	if lines < 0 || lines > MaxScreenLines {
		return Screen{}, verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "lines", "max": MaxScreenLines},
			"lines must be between 0 and %d, got %d", MaxScreenLines, lines)
	}
	t, err := m.readTarget(ctx, ref)
	if err != nil {
		return Screen{}, err
	}
	for try := 0; ; try++ {
		out, pid, err := m.screenOf(ctx, t, lines, ansi)
		if err != nil {
			return Screen{}, err
		}
		// The pane read may not be the agent's (checkedPane): once read
		// again at the agent's own; a second miss is answered as read.
		if ok, err := m.checkedPane(ctx, &t, pid); ok || try > 0 || err != nil {
			return out, err
		}
	}
}

// screenOf reads t's pane: its screen and cursor, and the pid of the
// process it runs (for checkedPane). Both commands are on the wire at once:
// one round trip, not two. The cursor and the lines are read in the same
// pass of tmux's loop unless the agent writes between them.
func (m *Manager) screenOf(ctx context.Context, t talkTarget, lines int, ansi bool) (Screen, string, error) {
	var rep tmuxctl.Reply
	var derr error
	read := make(chan struct{})
	go func() {
		defer close(read)
		rep, derr = m.commandIn(ctx, t.life, "display-message", "-p", "-t", t.pane(),
			"#{cursor_x} #{cursor_y} #{pane_dead} #{pane_pid}")
	}()
	captured, cerr := m.capture(ctx, t.life, t.pane(), lines, ansi)
	<-read
	if err := errors.Join(derr, cerr); err != nil {
		return Screen{}, "", m.talkError(t, err)
	}
	out := Screen{Name: t.sess.Name, Lines: captured}
	var pid string
	if len(rep.Lines) == 1 {
		f := strings.Fields(rep.Lines[0])
		if len(f) == 4 {
			out.Cursor.X, _ = strconv.Atoi(f[0])
			out.Cursor.Y, _ = strconv.Atoi(f[1])
			out.PaneDead = f[2] == "1"
			pid = f[3]
		}
	}
	return out, pid, nil
}

// capture runs capture-pane on pane: the visible screen plus up to history lines
// of history, one string per line. Wrapped lines stay as the screen shows them.
func (m *Manager) capture(ctx context.Context, life tmuxctl.ServerLife, pane string, history int, ansi bool) ([]string, error) {
	rep, err := m.commandIn(ctx, life, captureArgs(pane, history, ansi)...)
	if err != nil {
		return nil, err
	}
	if rep.Lines == nil {
		return []string{}, nil
	}
	return rep.Lines, nil
}

// captureArgs is the capture-pane command for pane's last history lines
// (all of the visible screen when history is 0), with escapes when ansi.
func captureArgs(pane string, history int, ansi bool) []string {
	args := []string{"capture-pane", "-p", "-t", pane}
	if ansi {
		args = append(args, "-e")
	}
	if history > 0 {
		args = append(args, "-S", "-"+strconv.Itoa(history))
	}
	return args
}

// talkError maps a tmux failure on a resolved session: a command error means the
// session or pane went away under us (not_found); anything else is tmux being
// unreachable.
func (m *Manager) talkError(t talkTarget, err error) error {
	var ce *tmuxctl.CommandError
	if errors.As(err, &ce) || errors.Is(err, tmuxctl.ErrLifeChanged) {
		return verdict.Errorf(verdict.CodeNotFound, map[string]any{"name": t.sess.Name},
			"session %s is gone: %v", t.sess.Name, err)
	}
	return verdict.Errorf(verdict.CodeTmuxUnavailable, nil, "tmux: %v", err)
}

// OutputTail captures the last lines the pane of session or pane target (an id,
// "$N" or "%N") shows in server life life, sanitised for an ended verdict's
// skc.output.tail (SanitizeTail). It must run while the pane still exists:
// before a kill, or while tmux keeps a dead pane (remain-on-exit). It never
// fails: a pane it cannot read yields "" (and the verdict has no tail).
func (m *Manager) OutputTail(ctx context.Context, life tmuxctl.ServerLife, target string) string {
	lines, err := m.capture(ctx, life, target, tailLines, false)
	if err != nil {
		m.log.Debug().Err(err).Str("target", target).Msg("output tail not captured")
		return ""
	}
	return tailOf(lines)
}

// tailCapture is the command OutputTail sends, for a caller that pipelines it
// with others (finishEnd: before the kill of an ended session); its reply's
// lines go to tailOf.
func tailCapture(target string) []string {
	return captureArgs(target, tailLines, false)
}

// tailOf turns a tail capture's lines into skc.output.tail.
func tailOf(lines []string) string {
	// A dead pane kept by remain-on-exit ends with tmux's own status line
	// (remain-on-exit-format, "Pane is dead (status 0, …)"): not the agent's.
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.TrimSpace(lines[i]) == "" {
			continue
		}
		if strings.HasPrefix(lines[i], "Pane is dead (") {
			lines = lines[:i]
		}
		break
	}
	return SanitizeTail(lines)
}

// SanitizeTail turns captured lines into skc.output.tail: control characters
// (C0, DEL, C1) and invalid UTF-8 removed, trailing spaces and trailing empty
// lines dropped, then the last tailLines lines, cut from the front to at most
// tailBytes bytes at a line (or, for one huge line, a character) boundary;
// lines are joined by LF.
func SanitizeTail(lines []string) string {
	clean := make([]string, 0, len(lines))
	for _, l := range lines {
		clean = append(clean, strings.TrimRight(stripControls(l), " "))
	}
	for len(clean) > 0 && clean[len(clean)-1] == "" {
		clean = clean[:len(clean)-1]
	}
	if len(clean) > tailLines {
		clean = clean[len(clean)-tailLines:]
	}
	s := strings.Join(clean, "\n")
	for len(s) > tailBytes {
		i := strings.IndexByte(s, '\n')
		if i < 0 || len(s)-i-1 < tailBytes/2 {
			// One long line: keep its end, from a character boundary.
			s = s[len(s)-tailBytes:]
			for len(s) > 0 && !utf8.RuneStart(s[0]) {
				s = s[1:]
			}
			break
		}
		s = s[i+1:]
	}
	return s
}

// stripControls removes C0 and C1 control characters, DEL and invalid UTF-8
// bytes; a tab becomes a space.
func stripControls(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == '\t':
			b.WriteByte(' ')
		case r == utf8.RuneError && size == 1, r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
