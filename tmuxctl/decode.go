package tmuxctl

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"io"
)

// decodeRecord is one line of `skc-supervisor tmuxctl decode` (docs/contract.md).
type decodeRecord struct {
	Type    string   `json:"type"`
	Time    *int64   `json:"time,omitempty"`
	Number  *uint64  `json:"number,omitempty"`
	Flags   *int     `json:"flags,omitempty"`
	Error   *bool    `json:"error,omitempty"`
	Lines   []string `json:"lines,omitempty"`
	Pane    string   `json:"pane,omitempty"`
	DataB64 *string  `json:"data_b64,omitempty"`
	Age     *int64   `json:"age,omitempty"`
	Name    *string  `json:"name,omitempty"`
	Text    *string  `json:"text,omitempty"`
}

// replyJSON keeps "lines" even when empty, which omitempty would drop.
type replyJSON struct {
	Type   string   `json:"type"`
	Time   int64    `json:"time"`
	Number uint64   `json:"number"`
	Flags  int      `json:"flags"`
	Error  *bool    `json:"error,omitempty"`
	Lines  []string `json:"lines"`
}

// Decode reads a raw control-mode byte stream (what `tmux -C` writes) from r
// and writes one JSON record per line to w, in stream order, exactly as
// docs/contract.md ("`tmuxctl decode` records") specifies. Strings that are not
// valid UTF-8 are written with U+FFFD for each bad byte (encoding/json's
// rule); data_b64 carries the exact decoded bytes.
func Decode(r io.Reader, w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	var werr error
	p := NewParser(func(rec Record) {
		if werr == nil {
			werr = enc.Encode(recordJSON(rec))
		}
	})
	// Records are flushed after every read, so a live stream (a pipe from
	// `tmux -C`) is decoded as it arrives.
	buf := make([]byte, 64<<10)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			_, _ = p.Write(buf[:n])
			if werr == nil {
				werr = bw.Flush()
			}
		}
		if werr != nil {
			return werr
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			p.Close()
			_ = bw.Flush()
			return rerr
		}
	}
	p.Close()
	if werr != nil {
		return werr
	}
	return bw.Flush()
}

// recordJSON maps a Record to its docs/contract.md JSON shape.
func recordJSON(rec Record) any {
	switch rec.Kind {
	case RecordReply:
		e := rec.Error
		return replyJSON{Type: "reply", Time: rec.Reply.Time, Number: rec.Reply.Number,
			Flags: rec.Reply.Flags, Error: &e, Lines: nonNil(rec.Reply.Lines)}
	case RecordIncomplete:
		return replyJSON{Type: "incomplete", Time: rec.Reply.Time, Number: rec.Reply.Number,
			Flags: rec.Reply.Flags, Lines: nonNil(rec.Reply.Lines)}
	case RecordOutput:
		d := base64.StdEncoding.EncodeToString(rec.Data)
		out := decodeRecord{Type: "output", Pane: rec.Pane, DataB64: &d}
		if rec.Extended {
			age := rec.Age
			out.Age = &age
		}
		return out
	case RecordNotification:
		name, text := rec.Name, rec.Text
		return decodeRecord{Type: "notification", Name: &name, Text: &text}
	default:
		text := rec.Text
		return decodeRecord{Type: "unexpected", Text: &text}
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
