package tmuxctl

import (
	"fmt"
	"strings"
)

// Quote encodes one argument for tmux's command parser (cmd-parse.y) so that
// tmux receives it byte for byte: the value is wrapped in double quotes,
// `\ " $ ~` are backslash-escaped, and every byte below 0x20 or at/above 0x7f
// is written as a three-digit octal escape. Everything else is literal. The
// result is pure printable ASCII without spaces outside the quotes, so it can
// neither end the line nor start a comment, a block, a condition or a second
// command (docs/tmux-facts.md §7.1; verified on 498 values in corpus/38).
//
// NUL cannot be carried (tmux strings are C strings): Quote refuses it with
// ErrUnencodable rather than truncating the value.
func Quote(arg string) (string, error) {
	if i := strings.IndexByte(arg, 0); i >= 0 {
		return "", fmt.Errorf("%w: NUL byte at offset %d", ErrUnencodable, i)
	}
	var b strings.Builder
	b.Grow(len(arg) + 2)
	b.WriteByte('"')
	for i := 0; i < len(arg); i++ {
		c := arg[i]
		switch {
		case c == '\\' || c == '"' || c == '$' || c == '~':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			b.WriteByte('\\')
			b.WriteByte('0' + c>>6)
			b.WriteByte('0' + (c>>3)&7)
			b.WriteByte('0' + c&7)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String(), nil
}

// Encode builds one command line (without the trailing LF) from a command
// name and its arguments. Every element is encoded with Quote, so the line
// is never blank, never a comment and never more than one command: it yields
// exactly one reply block. The command name must be a plain word
// (`[a-z][a-z0-9-]*`): anything else could be parsed as an environment
// assignment (`A=b`), which yields no block and would desynchronise the
// reply FIFO, so it is refused with ErrUnencodable.
func Encode(args []string) (string, error) {
	if len(args) == 0 {
		return "", fmt.Errorf("%w: empty command", ErrUnencodable)
	}
	if !isCommandName(args[0]) {
		return "", fmt.Errorf("%w: command name %q is not a plain word", ErrUnencodable, args[0])
	}
	var b strings.Builder
	for i, a := range args {
		q, err := Quote(a)
		if err != nil {
			return "", fmt.Errorf("argument %d: %w", i, err)
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(q)
	}
	return b.String(), nil
}

func isCommandName(s string) bool {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
