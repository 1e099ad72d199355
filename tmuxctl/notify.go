package tmuxctl

import "strings"

// Notification is one control-mode notification line outside a block: Name
// without the '%', Text the rest of the line after one space ("" when none).
// Unknown names are delivered too; typed accessors below parse the ones the
// census needs and return a *ProtocolError when the text does not fit.
type Notification struct {
	Name string
	Text string
}

// Notification names of tmux 3.3a that the supervisor acts on (docs/tmux-facts.md §1.2).
const (
	NoteSessionsChanged     = "sessions-changed"
	NoteSessionChanged      = "session-changed"
	NoteSessionRenamed      = "session-renamed"
	NoteWindowAdd           = "window-add"
	NoteWindowClose         = "window-close"
	NoteUnlinkedWindowAdd   = "unlinked-window-add"
	NoteUnlinkedWindowClose = "unlinked-window-close"
	NoteSubscriptionChanged = "subscription-changed"
	NoteExit                = "exit"
	NotePause               = "pause"
	NoteContinue            = "continue"
	NoteClientDetached      = "client-detached"
)

// Notification names that tmux 3.4 added (not sent by 3.3a; docs/tmux-facts.md §1.2,
// docs/tmux-versions.md). They are delivered like any other; nothing in the
// supervisor acts on them, and Conn logs %config-error.
const (
	NotePasteBufferChanged = "paste-buffer-changed" // a paste buffer was set: `%paste-buffer-changed NAME`
	NotePasteBufferDeleted = "paste-buffer-deleted" // `%paste-buffer-deleted NAME`
	NoteMessage            = "message"              // display-message (no -p) aimed at this client; escaped like 3.4 command output
	NoteConfigError        = "config-error"         // an error in the configuration file, one per line
)

func (n Notification) line() string {
	if n.Text == "" {
		return "%" + n.Name
	}
	return "%" + n.Name + " " + n.Text
}

func (n Notification) bad(reason string) error {
	return &ProtocolError{Line: n.line(), Reason: reason}
}

// Session parses `%session-changed $ID NAME` and `%session-renamed $ID NAME`.
// The name is the rest of the line and may contain spaces.
func (n Notification) Session() (id, name string, err error) {
	if n.Name != NoteSessionChanged && n.Name != NoteSessionRenamed {
		return "", "", n.bad("not a session notification")
	}
	id, name, ok := strings.Cut(n.Text, " ")
	if !ok || !isID(id, '$') {
		return "", "", n.bad("malformed session notification")
	}
	return id, name, nil
}

// Window parses the window id of `%window-add`, `%window-close`,
// `%unlinked-window-add` and `%unlinked-window-close` (`@N`). Note the
// names are effectively inverted in 3.3a (docs/tmux-facts.md §1.2): treat any of them as
// "re-query".
func (n Notification) Window() (id string, err error) {
	switch n.Name {
	case NoteWindowAdd, NoteWindowClose, NoteUnlinkedWindowAdd, NoteUnlinkedWindowClose:
	default:
		return "", n.bad("not a window notification")
	}
	if !isID(n.Text, '@') {
		return "", n.bad("malformed window notification")
	}
	return n.Text, nil
}

// Pane parses the pane id of `%pause %N` and `%continue %N`.
func (n Notification) Pane() (id string, err error) {
	if n.Name != NotePause && n.Name != NoteContinue {
		return "", n.bad("not a pane flow-control notification")
	}
	if !isID(n.Text, '%') {
		return "", n.bad("malformed pane notification")
	}
	return n.Text, nil
}

// ExitReason is the reason of an `%exit` notification ("" for a bare %exit,
// which is what detach, kill-server and a killed session give).
func (n Notification) ExitReason() string { return n.Text }

// Subscription is a parsed `%subscription-changed` line.
type Subscription struct {
	Name      string
	SessionID string // "$N"
	WindowID  string // "@N" or "-"
	Window    string // window index or "-"
	PaneID    string // "%N" or "-"
	Value     string // raw format expansion, not escaped by tmux
}

// Subscription parses `%subscription-changed NAME $S @W|- IDX|- %P|- … : VALUE`.
// Fields between the pane and " : " are reserved and skipped. A value that
// contained a newline arrives truncated here (its rest comes as bare lines
// outside blocks, docs/tmux-facts.md §6): keep newlines out of subscribed values.
func (n Notification) Subscription() (Subscription, error) {
	if n.Name != NoteSubscriptionChanged {
		return Subscription{}, n.bad("not a subscription notification")
	}
	head, value, ok := strings.Cut(n.Text, " : ")
	if !ok {
		if !strings.HasSuffix(n.Text, " :") {
			return Subscription{}, n.bad("subscription notification without ' : '")
		}
		head, value = strings.TrimSuffix(n.Text, " :"), ""
	}
	f := strings.Split(head, " ")
	if len(f) < 5 || f[0] == "" || !isID(f[1], '$') {
		return Subscription{}, n.bad("malformed subscription notification")
	}
	return Subscription{Name: f[0], SessionID: f[1], WindowID: f[2], Window: f[3],
		PaneID: f[4], Value: value}, nil
}

// isID reports whether s is prefix followed by one or more decimal digits.
func isID(s string, prefix byte) bool {
	if len(s) < 2 || s[0] != prefix {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
