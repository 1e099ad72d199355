package tmuxctl

import "strings"

// Command output per tmux version (docs/tmux-versions.md).
//
// tmux 3.4 and 3.5 pass everything a command prints — cmdq_print:
// show-options, display-message -p, list-sessions -F, capture-pane -p … —
// through vis(3) with VIS_OCTAL|VIS_CSTYLE|VIS_NOSLASH, character by
// character (utf8_strvis; server_client_print with parse 0):
//   - printable ASCII, space, tab and newline are written raw, and so is the
//     backslash itself (VIS_NOSLASH);
//   - valid UTF-8 characters that tmux counts as printable are written raw;
//   - BEL BS VT FF CR are written \a \b \v \f \r;
//   - every other byte — the other C0 controls, DEL, each byte of invalid
//     or unprintable UTF-8 — is written \ooo (three octal digits).
//
// 3.3a and earlier, and 3.6 and later (3.7c checked by the test suite),
// print command output raw. On every version error text (%error blocks) and
// notifications, %subscription-changed values included, are raw.
//
// Because the backslash is not escaped, the escaping cannot always be
// undone: a value holding the four characters `\033` prints exactly as one
// holding ESC. UnescapeOutput decodes every sequence tmux could have written
// for a byte and says when it met one; its result is the value byte for byte
// whenever the value had no backslash followed by a b v f r or an octal
// digit.

// EscapesOutput reports whether the server escapes command output (tmux
// 3.4 and 3.5, and the next-3.4/next-3.5 development builds). Unparseable
// versions are treated as new, like VersionAtLeast does.
func (i ServerInfo) EscapesOutput() bool {
	return i.VersionAtLeast(3, 4) && !i.VersionAtLeast(3, 6)
}

// Text returns the reply's output lines joined with "\n", as the command
// printed them. When the server escapes command output (Escaped), the
// escapes are decoded with UnescapeOutput, and ambiguous says the text held
// a sequence that the value itself may have contained literally; it is
// always false on servers that print raw (3.3a, 3.6 and later).
func (r Reply) Text() (text string, ambiguous bool) {
	text = strings.Join(r.Lines, "\n")
	if !r.Escaped {
		return text, false
	}
	return UnescapeOutput(text)
}

// UnescapeOutput undoes tmux 3.4/3.5's escaping of command output (see
// EscapesOutput). It decodes \a \b \v \f \r and every \ooo that tmux writes
// for a byte (1–6, 14–31, 127 and 128–255); any other backslash is a
// literal one and is kept, since tmux never writes it for a byte (printable
// ASCII, tab and newline pass raw, and BEL BS VT FF CR have letter forms).
// ambiguous reports that at least one sequence was decoded: such text is
// also what a value holding that sequence literally would print, so the
// result is exact only when the value is known to hold no backslash before
// a b v f r or an octal digit (hex tags, ids and numbers are always safe).
func UnescapeOutput(s string) (value string, ambiguous bool) {
	if strings.IndexByte(s, '\\') < 0 {
		return s, false
	}
	b := make([]byte, 0, len(s))
	for {
		i := strings.IndexByte(s, '\\')
		if i < 0 {
			break
		}
		b = append(b, s[:i]...)
		c, n := escapedByte(s[i:])
		if n == 0 { // a literal backslash
			b = append(b, '\\')
			s = s[i+1:]
			continue
		}
		b = append(b, c)
		ambiguous = true
		s = s[i+n:]
	}
	return string(append(b, s...)), ambiguous
}

// escapedByte decodes the escape at the start of s (which starts with a
// backslash) when it is one tmux writes for a byte; n is its length, 0
// when it is not one.
func escapedByte(s string) (c byte, n int) {
	if len(s) < 2 {
		return 0, 0
	}
	switch s[1] {
	case 'a':
		return '\a', 2
	case 'b':
		return '\b', 2
	case 'v':
		return '\v', 2
	case 'f':
		return '\f', 2
	case 'r':
		return '\r', 2
	}
	if len(s) < 4 || s[1] < '0' || s[1] > '3' || !isOctal(s[2]) || !isOctal(s[3]) {
		return 0, 0
	}
	v := (s[1]-'0')<<6 | (s[2]-'0')<<3 | (s[3] - '0')
	if !escapedAsOctal(v) {
		return 0, 0
	}
	return v, 4
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// escapedAsOctal says whether tmux 3.4/3.5 writes byte v as \ooo: never NUL
// (values are C strings), never a printable ASCII byte, tab or newline (raw)
// nor BEL BS VT FF CR (letter forms).
func escapedAsOctal(v byte) bool {
	switch {
	case v == 0 || v >= 0x07 && v <= 0x0d:
		return false
	case v < 0x20 || v >= 0x7f:
		return true
	}
	return false
}
