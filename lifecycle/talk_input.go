package lifecycle

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// MaxInputText is the largest text one input may carry, in bytes.
const MaxInputText = 64 << 10

// maxInputKeys bounds the named keys of one input.
const maxInputKeys = 256

// Input is one POST /v1/sessions/{name}/input: either Text (sent literally,
// then Enter when Enter is set) or Keys (tmux key names), never both.
type Input struct {
	Text  string
	Enter bool
	Keys  []string
}

// invalidInput is the refusal of a bad input, naming its field.
func invalidInput(field, format string, args ...any) error {
	return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": field}, format, args...)
}

// ValidateInput checks an input against the contract's limits before anything
// reaches tmux: text is valid UTF-8 without NUL and at most MaxInputText bytes;
// keys are names from the fixed pattern (ValidKey); exactly one of text and
// keys is given, and enter goes with text.
func ValidateInput(in Input) error {
	switch {
	case in.Text == "" && len(in.Keys) == 0 && !in.Enter:
		return invalidInput("text", "give text or keys")
	case in.Text != "" && len(in.Keys) > 0:
		return invalidInput("keys", "give text or keys, not both (send keys in a second input)")
	case len(in.Keys) > 0 && in.Enter:
		return invalidInput("enter", "enter goes with text; add \"Enter\" to keys instead")
	case len(in.Text) > MaxInputText:
		return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "text", "max_bytes": MaxInputText},
			"text is %d bytes, more than %d", len(in.Text), MaxInputText)
	case strings.IndexByte(in.Text, 0) >= 0:
		return invalidInput("text", "text contains a NUL byte, which no terminal input can carry")
	case !utf8.ValidString(in.Text):
		return invalidInput("text", "text is not valid UTF-8")
	case len(in.Keys) > maxInputKeys:
		return invalidInput("keys", "at most %d keys per input, got %d", maxInputKeys, len(in.Keys))
	}
	for i, k := range in.Keys {
		if !ValidKey(k) {
			return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "keys", "index": i},
				"keys[%d] %q is not a key name (e.g. Enter, C-c, M-x, Up, F5, BSpace)", i, k)
		}
	}
	return nil
}

// Key names an input may send, by what tmux (3.3a and 3.7c alike: checked by
// typing every one into a pane) makes of their modifiers. A name tmux cannot
// encode is not refused by send-keys: it is typed as its letters (S-Enter
// arrives as "S-Enter" on 3.3a) or sends nothing (C-Tab), or a modifier is
// dropped (S-a as "a" on 3.7c) — so only what both encode is accepted.
var (
	// anyModKeys take C-, M- and S- in any combination (xterm's modified
	// cursor and function keys).
	anyModKeys = map[string]bool{
		"Up": true, "Down": true, "Left": true, "Right": true, "Home": true, "End": true,
		"PageUp": true, "PageDown": true, "PgUp": true, "PgDn": true, "PPage": true, "NPage": true,
		"Insert": true, "Delete": true, "IC": true, "DC": true,
	}
	// metaKeys take M- only (Space also C-: NUL).
	metaKeys = map[string]bool{
		"Enter": true, "Escape": true, "Tab": true, "BTab": true, "BSpace": true, "Space": true,
		"KP0": true, "KP1": true, "KP2": true, "KP3": true, "KP4": true, "KP5": true, "KP6": true,
		"KP7": true, "KP8": true, "KP9": true, "KPEnter": true,
	}
)

// ValidKey reports whether k is a key an input may name: modifiers `C-`, `M-`,
// `S-` (each at most once), then a key that takes them —
//   - Up, Down, Left, Right, Home, End, PageUp/PgUp/PPage, PageDown/PgDn/NPage,
//     Insert/IC, Delete/DC and F1–F12: any modifiers;
//   - Enter, Escape, Tab, BTab, BSpace, Space, KP0–KP9, KPEnter: M- only (Space
//     also C-);
//   - one printable ASCII character other than space: M-; C- for a letter or
//     one of @ [ \ ] ^ _ ? (and / without M-); never S- (type the character
//     itself: "A", not "S-a").
//
// Nothing else reaches send-keys without -l, so no string is ever looked up by
// tmux as something else.
func ValidKey(k string) bool {
	var ctrl, meta, shift bool
	for len(k) > 2 && k[1] == '-' {
		var m *bool
		switch k[0] {
		case 'C':
			m = &ctrl
		case 'M':
			m = &meta
		case 'S':
			m = &shift
		default:
			return false
		}
		if *m {
			return false
		}
		*m, k = true, k[2:]
	}
	switch {
	case anyModKeys[k] || functionKey(k):
		return true
	case metaKeys[k]:
		return !shift && (!ctrl || k == "Space")
	case len(k) != 1 || k[0] <= ' ' || k[0] >= 0x7f || shift:
		return false
	case ctrl:
		c := k[0]
		return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || strings.IndexByte("@[\\]^_?", c) >= 0 || c == '/' && !meta
	}
	return true
}

// functionKey: F1–F12.
func functionKey(k string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(k, "F"))
	return err == nil && len(k) > 1 && k[0] == 'F' && k[1] != '0' && k[1] != '+' && k[1] != '-' && n >= 1 && n <= 12
}

// inputCommands is the tmux command list that types in to pane, in order.
//
// Text is pasted: set-buffer into a private named buffer, then
// `paste-buffer -d -r`, which writes the bytes to the pane's terminal exactly as
// they are (-r: LF stays LF; -d: the buffer is deleted) — whatever mode the
// pane is in. `send-keys -l` would hand them to copy mode while a human scrolls
// back (they become copy-mode commands), and `send-keys -H` per byte likewise.
// The argument is quote-encoded, so it is never a format or shell, and a
// paste never looks up key names. Text with a line end (LF or CR: a CR is the
// Enter key to the application, and would run the line before it) is pasted
// with -p: wrapped in bracketed-paste markers exactly when the application has
// asked for bracketed paste (tmux checks the pane's mode at paste time), and
// without markers of its own (pasteMarkers). Enter is a CR
// byte: appended to a one-line text, a paste of its own after a multi-line one
// (outside the brackets). Keys are key names, sent with send-keys. verbatim
// adds -S, which tmux 3.7 and later need to paste control characters as they
// are (3.7 passes a paste through vis(3) unless -S is given).
func inputCommands(pane string, in Input, buffer string, verbatim bool) [][]string {
	if len(in.Keys) > 0 {
		return [][]string{append([]string{"send-keys", "-t", pane}, in.Keys...)}
	}
	var cmds [][]string
	paste := func(data string, bracket bool) {
		p := []string{"paste-buffer", "-d", "-r"}
		if verbatim {
			p = append(p, "-S")
		}
		if bracket {
			p = append(p, "-p")
		}
		cmds = append(cmds, []string{"set-buffer", "-b", buffer, "--", data},
			append(p, "-b", buffer, "-t", pane))
	}
	text, multi := in.Text, strings.ContainsAny(in.Text, "\n\r")
	if multi {
		text = pasteMarkers.Replace(text)
	}
	if in.Enter && !multi {
		text += "\r"
	}
	if text != "" {
		paste(text, multi)
	}
	if in.Enter && multi {
		paste("\r", false)
	}
	return cmds
}

// pasteMarkers removes the bracketed-paste markers from a multi-line text, as
// a terminal does from what it pastes: an end marker inside a bracketed paste
// would end it early, and what followed it would reach a shell agent as typed
// commands (found outside-in: a frontend relaying untrusted text could run
// commands that way).
var pasteMarkers = strings.NewReplacer("\x1b[200~", "", "\x1b[201~", "")

func notRunning(name string) error {
	return verdict.Errorf(verdict.CodeAgentNotRunning, map[string]any{"name": name},
		"the agent of session %s is not running (its pane is dead)", name)
}

// agentAlive asks tmux, right before an input, whether t's pane is the
// agent's and alive. The census learns of a dead pane within a second, and
// send-keys to a dead pane succeeds silently; a pane respawned by hand, or
// killed with another pane left in the session, it may learn of only at its
// next reconcile, and the input would go to a person's program: such a pane
// is looked for among the session's (checkedPane) before anything is typed.
func (m *Manager) agentAlive(ctx context.Context, t *talkTarget) error {
	for try := 0; ; try++ {
		rep, err := m.commandIn(ctx, t.life, "display-message", "-p", "-t", t.pane(), "#{pane_dead} #{pane_pid}")
		if err != nil {
			return m.talkError(*t, err)
		}
		dead, pid, _ := strings.Cut(strings.Join(rep.Lines, ""), " ")
		ok, err := m.checkedPane(ctx, t, pid)
		switch {
		case err != nil:
			return err
		case !ok && try == 0:
			continue // ask again at the agent's own pane
		case !ok:
			return notRunning(t.sess.Name) // its pane moves under us: type nothing
		case dead == "1":
			return notRunning(t.sess.Name)
		}
		return nil
	}
}

// notStopping refuses input to t's generation while it is being stopped —
// by kill or restart, or because its end was seen and is being proven: the
// text would reach an agent about to be killed (and be lost with it), while
// the caller took "sent" for delivered. The stop in flight in this daemon is
// asked (in memory: a stop begun a moment ago is seen before the fence's
// record of it is read again), else the stop t's record carries.
func (m *Manager) notStopping(t talkTarget) error {
	cause, ok := m.stopInFlight(t.pub)
	m.mu.Lock()
	killAsked := m.killAsked[stopKey(t.pub)] > 0
	m.mu.Unlock()
	switch {
	case ok:
	case t.pub.Stopping != nil:
		cause = causeOf(t.pub.Stopping.Reason)
	default:
		return nil
	}
	details := map[string]any{"name": t.sess.Name, "stopping": true, "reason": cause.reason}
	if cause.manual && !killAsked {
		details["restarting"] = true // a restart's stop: the next generation follows it
	}
	return verdict.Errorf(verdict.CodeAgentNotRunning, details,
		"the agent of session %s is being stopped (%s); input is refused until a generation runs again", t.sess.Name, cause.reason)
}

// keptNotRunning turns the not_found of a session of ours whose generation has
// ended — kept by a restart that waits out its delay or is under way — into
// agent_not_running: the session exists, its agent does not (yet).
func (m *Manager) keptNotRunning(ctx context.Context, ref Ref, err error) error {
	t, ok := m.keptTarget(ctx, ref, err)
	if !ok {
		return err
	}
	return verdict.Errorf(verdict.CodeAgentNotRunning, map[string]any{"name": t.sess.Name, "restarting": true},
		"the agent of session %s is not running (its generation ended; a restart is due or under way)", t.sess.Name)
}

// keptTarget is, when err is the not_found of talkTarget, the session of ours
// that ref names and that is kept after its generation ended (for a restart):
// it has no running agent, but its pane is there to read.
func (m *Manager) keptTarget(ctx context.Context, ref Ref, err error) (talkTarget, bool) {
	if verdict.CodeOf(err) != verdict.CodeNotFound {
		return talkTarget{}, false
	}
	t, rerr := m.Resolve(ctx, ref)
	if rerr == nil && t.Session == nil && t.Published != nil && t.Published.Ended && m.inThisLife(t.Published) {
		// By identity: the ended generation's session, if tmux keeps it
		// with the identity's tags.
		if s, ok := m.census.ByID(t.Published.TmuxID); ok && s.Identity() == t.Published.Identity.Digest() {
			t.Session = &s
		}
	}
	if rerr != nil || t.Session == nil || t.Published == nil || t.Live || t.Published.TmuxID != t.Session.ID {
		return talkTarget{}, false
	}
	k, kerr := m.agentTalkTarget(ctx, *t.Published, *t.Session)
	return k, kerr == nil
}

// inputQueue orders the inputs of one session: tickets are taken when an input
// is accepted and served strictly in ticket order, one input at a time, so
// inputs from concurrent senders are applied whole and in acceptance order.
type inputQueue struct {
	mu      sync.Mutex
	cond    *sync.Cond
	next    uint64 // the next ticket to hand out
	serving uint64 // the ticket whose input is being applied
	refs    int    // tickets not yet done; the queue is dropped at 0
}

// talkState is the Manager's state for talking to agents (its zero value is ready).
type talkState struct {
	mu      sync.Mutex
	queues  map[string]*inputQueue // by server life and tmux id
	feeds   map[string]*outputFeed // by server life and tmux id (talk_output.go)
	bufSeq  atomic.Uint64          // paste buffer names
	follows atomic.Int64           // followers attached now (metrics, tests)
	running sync.WaitGroup         // startFeed goroutines, until their client exited
	closed  bool                   // CloseFollowers began (mu)
	transit sync.Mutex             // held while a follower attaches or detaches (closeFollower)
	subs    atomic.Int64           // output subscriptions open
	dropped atomic.Int64           // output bytes dropped for slow subscribers
}

func talkKey(t talkTarget) string {
	return strconv.Itoa(t.life.PID) + "/" + strconv.FormatInt(t.life.StartTime, 10) + "/" + t.sess.ID
}

// ticket takes the next place in key's queue.
func (ts *talkState) ticket(key string) (*inputQueue, uint64) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.queues == nil {
		ts.queues = map[string]*inputQueue{}
	}
	q := ts.queues[key]
	if q == nil {
		q = &inputQueue{}
		q.cond = sync.NewCond(&q.mu)
		ts.queues[key] = q
	}
	q.mu.Lock()
	n := q.next
	q.next++
	q.refs++
	q.mu.Unlock()
	return q, n
}

// done ends ticket n's turn and drops the queue when nobody holds a ticket.
func (ts *talkState) done(key string, q *inputQueue) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	q.mu.Lock()
	q.serving++
	q.refs--
	idle := q.refs == 0
	q.cond.Broadcast()
	q.mu.Unlock()
	if idle && ts.queues[key] == q {
		delete(ts.queues, key)
	}
}

// Input types in to the session's agent. The input is validated first (nothing
// reaches tmux otherwise), refused with agent_not_running when the pane is dead,
// then queued behind the session's earlier inputs and applied whole: once
// accepted it is applied even if the caller hangs up.
func (m *Manager) Input(ctx context.Context, ref Ref, in Input) error {
	if err := ValidateInput(in); err != nil {
		return err
	}
	t, err := m.talkTarget(ctx, ref)
	if err != nil {
		return m.keptNotRunning(ctx, ref, err)
	}
	if t.sess.PaneDead {
		return notRunning(t.sess.Name)
	}
	if err := m.notStopping(t); err != nil {
		return err
	}
	key := talkKey(t)
	q, n := m.talk.ticket(key)
	defer m.talk.done(key, q)
	q.mu.Lock()
	for q.serving != n {
		q.cond.Wait()
	}
	q.mu.Unlock()
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), compensateTimeout)
	defer cancel()
	if err := m.notStopping(t); err != nil {
		return err // a kill or restart began while this input waited its turn
	}
	if err := m.agentAlive(actx, &t); err != nil {
		return err
	}
	buffer := "skc-input-" + strconv.FormatUint(m.talk.bufSeq.Add(1), 10)
	info, _ := m.tmux.Info()
	for _, cmd := range inputCommands(t.pane(), in, buffer, info.VersionAtLeast(3, 7)) {
		if _, err := m.commandIn(actx, t.life, cmd...); err != nil {
			if cmd[0] == "paste-buffer" {
				_, _ = m.commandIn(actx, t.life, "delete-buffer", "-b", buffer)
			}
			return m.talkError(t, err)
		}
	}
	return nil
}
