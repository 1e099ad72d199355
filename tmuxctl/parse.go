package tmuxctl

import (
	"bytes"
	"strconv"
)

// RecordKind says what a parsed Record is.
type RecordKind int

// The kinds of records the Parser emits, in docs/contract.md's vocabulary.
const (
	RecordReply        RecordKind = iota + 1 // a %begin … %end/%error block
	RecordOutput                             // %output or %extended-output, decoded
	RecordNotification                       // any other %-line outside a block
	RecordUnexpected                         // a line outside a block that is not a notification
	RecordIncomplete                         // end of input inside an open block
)

// Reply is one command reply block. Lines are the body lines without their
// line ends (a trailing CR removed); they are raw bytes as tmux wrote them,
// which on tmux 3.4 and 3.5 is escaped (see Escaped and Text).
type Reply struct {
	Time   int64
	Number uint64
	Flags  int
	Lines  []string
	// Escaped is set by Conn when the server escapes command output (tmux
	// 3.4 and 3.5, ServerInfo.EscapesOutput): Lines then hold \ooo and
	// \a \b \v \f \r where the command printed other bytes; Text decodes
	// them. The parser alone never sets it (it does not know the version).
	Escaped bool
}

// Record is one element of the control-mode stream.
type Record struct {
	Kind  RecordKind
	Reply Reply // RecordReply, RecordIncomplete
	Error bool  // RecordReply: the block ended with %error

	Pane     string // RecordOutput: "%N"
	Data     []byte // RecordOutput: the exact decoded bytes
	Extended bool   // RecordOutput: from %extended-output
	Age      int64  // RecordOutput: the age field of %extended-output (ms)

	Name string // RecordNotification: the name without '%'
	Text string // RecordNotification: the rest after one space; RecordUnexpected: the line
}

// Parser splits a control-mode byte stream into Records. It is a pure
// function of the bytes: any chunking of the same input yields the same
// records. Lines are split on LF only, one trailing CR is removed, and there
// is no line-length cap. A block opens on `%begin T N F` outside a block and
// closes only on `%end T N F` or `%error T N F` with exactly the same fields;
// every other line inside a block is data, whatever it starts with.
type Parser struct {
	emit    func(Record)
	partial []byte // bytes of the current, unterminated line
	inBlock bool
	tail    []byte // " T N F" of the open block, as written
	block   Reply
	// OnLine, when set, sees every raw line (without its LF) before it is
	// parsed; the wire log uses it.
	OnLine func(line []byte)
}

// NewParser returns a Parser that calls emit for each record, in order.
func NewParser(emit func(Record)) *Parser { return &Parser{emit: emit} }

// Write feeds bytes to the parser. It never fails.
func (p *Parser) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.partial = append(p.partial, b...)
			break
		}
		line := b[:i]
		if len(p.partial) > 0 {
			p.partial = append(p.partial, line...)
			line = p.partial
		}
		p.line(line)
		p.partial = p.partial[:0]
		b = b[i+1:]
	}
	return n, nil
}

// Close ends the input: bytes after the last LF count as a final line, and
// an open block is reported as RecordIncomplete.
func (p *Parser) Close() {
	if len(p.partial) > 0 {
		p.line(p.partial)
		p.partial = nil
	}
	if p.inBlock {
		p.inBlock = false
		p.emit(Record{Kind: RecordIncomplete, Reply: p.block})
		p.block = Reply{}
	}
}

// InBlock reports whether a reply block is open.
func (p *Parser) InBlock() bool { return p.inBlock }

func (p *Parser) line(line []byte) {
	if p.OnLine != nil {
		p.OnLine(line)
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if p.inBlock {
		p.blockLine(line)
		return
	}
	if len(line) == 0 || line[0] != '%' {
		p.emit(Record{Kind: RecordUnexpected, Text: string(line)})
		return
	}
	if r, ok := parseGuard(line, "%begin"); ok {
		p.inBlock = true
		p.tail = append(p.tail[:0], line[len("%begin"):]...)
		p.block = r
		return
	}
	p.emit(parseNotification(line))
}

func (p *Parser) blockLine(line []byte) {
	isErr := false
	switch {
	case bytes.HasPrefix(line, []byte("%end ")) && bytes.Equal(line[len("%end"):], p.tail):
	case bytes.HasPrefix(line, []byte("%error ")) && bytes.Equal(line[len("%error"):], p.tail):
		isErr = true
	default:
		p.block.Lines = append(p.block.Lines, string(line))
		return
	}
	r := p.block
	if r.Lines == nil {
		r.Lines = []string{}
	}
	p.inBlock = false
	p.block = Reply{}
	p.emit(Record{Kind: RecordReply, Reply: r, Error: isErr})
}

// parseGuard parses `<kw> T N F` exactly: single spaces, unsigned decimal
// time and number, decimal flags (tmux prints them with "%ld %u %d").
func parseGuard(line []byte, kw string) (Reply, bool) {
	if !bytes.HasPrefix(line, []byte(kw+" ")) {
		return Reply{}, false
	}
	f := bytes.Split(line[len(kw)+1:], []byte(" "))
	if len(f) != 3 || !isDigits(f[0]) || !isDigits(f[1]) {
		return Reply{}, false
	}
	fl := f[2]
	if len(fl) > 0 && fl[0] == '-' {
		fl = fl[1:]
	}
	if !isDigits(fl) {
		return Reply{}, false
	}
	t, err1 := strconv.ParseInt(string(f[0]), 10, 64)
	n, err2 := strconv.ParseUint(string(f[1]), 10, 64)
	flags, err3 := strconv.Atoi(string(f[2]))
	if err1 != nil || err2 != nil || err3 != nil {
		return Reply{}, false
	}
	return Reply{Time: t, Number: n, Flags: flags}, true
}

func isDigits(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// parseNotification turns a %-line outside a block into a record. %output
// and %extended-output that do not follow their grammar are reported as
// plain notifications, so nothing is lost.
func parseNotification(line []byte) Record {
	name, text := line[1:], []byte(nil)
	if i := bytes.IndexByte(name, ' '); i >= 0 {
		name, text = line[1:1+i], line[2+i:]
	}
	switch string(name) {
	case "output":
		if r, ok := parseOutput(text); ok {
			return r
		}
	case "extended-output":
		if r, ok := parseExtendedOutput(text); ok {
			return r
		}
	}
	return Record{Kind: RecordNotification, Name: string(name), Text: string(text)}
}

// parseOutput parses `%P data` (the part after "%output ").
func parseOutput(text []byte) (Record, bool) {
	pane, data := text, []byte(nil)
	if i := bytes.IndexByte(text, ' '); i >= 0 {
		pane, data = text[:i], text[i+1:]
	}
	if !isPaneID(pane) {
		return Record{}, false
	}
	return Record{Kind: RecordOutput, Pane: string(pane), Data: DecodeOutput(data)}, true
}

// parseExtendedOutput parses `%P AGE [reserved …] : data`: the fields after
// the age are skipped up to a lone ":" (docs/tmux-facts.md §1.2).
func parseExtendedOutput(text []byte) (Record, bool) {
	f := bytes.SplitN(text, []byte(" "), 3)
	if len(f) < 3 || !isPaneID(f[0]) || !isDigits(f[1]) {
		return Record{}, false
	}
	age, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return Record{}, false
	}
	rest := f[2]
	for {
		if bytes.Equal(rest, []byte(":")) {
			rest = nil
			break
		}
		if bytes.HasPrefix(rest, []byte(": ")) {
			rest = rest[2:]
			break
		}
		i := bytes.IndexByte(rest, ' ')
		if i < 0 {
			return Record{}, false
		}
		rest = rest[i+1:]
	}
	return Record{Kind: RecordOutput, Pane: string(f[0]), Data: DecodeOutput(rest),
		Extended: true, Age: age}, true
}

func isPaneID(b []byte) bool { return len(b) > 1 && b[0] == '%' && isDigits(b[1:]) }

// DecodeOutput decodes %output data strictly: a backslash followed by three
// octal digits (the first 0–3, so the value fits a byte) is that byte; any
// other byte, including a backslash not followed so, is kept as it is.
func DecodeOutput(data []byte) []byte {
	out := make([]byte, 0, len(data))
	for i := 0; i < len(data); i++ {
		c := data[i]
		if c == '\\' && i+3 < len(data) && isOctal3(data[i+1:i+4]) {
			out = append(out, (data[i+1]-'0')<<6|(data[i+2]-'0')<<3|(data[i+3]-'0'))
			i += 3
			continue
		}
		out = append(out, c)
	}
	return out
}

func isOctal3(b []byte) bool {
	return b[0] >= '0' && b[0] <= '3' && b[1] >= '0' && b[1] <= '7' && b[2] >= '0' && b[2] <= '7'
}
