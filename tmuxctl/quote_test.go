package tmuxctl

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// tmuxParseLine is a Go model of tmux 3.3a's command parser (cmd-parse.y,
// yylex_token and yylex_token_escape) for the subset Encode emits: tokens
// separated by one space, each wholly in double quotes, with the escapes
// `\\ \" \$ \~` and `\ooo` (first digit 0–3). Anything outside the subset is
// an error here, so the model also proves the encoder never emits a raw `$`
// (variable expansion), a raw `~` (home expansion), a raw control or
// non-ASCII byte, or any bare character that the parser would treat
// specially (`;`, `#`, `{`, `}`, `%`, quotes, whitespace, LF).
func tmuxParseLine(line string) ([]string, error) {
	var toks []string
	for i := 0; ; {
		if i >= len(line) || line[i] != '"' {
			return nil, fmt.Errorf("offset %d: token does not start with a double quote", i)
		}
		i++
		var b strings.Builder
		for {
			if i >= len(line) {
				return nil, errors.New("unterminated quote")
			}
			c := line[i]
			switch {
			case c == '"':
				i++
				goto end
			case c == '\\':
				if i+1 >= len(line) {
					return nil, errors.New("backslash at end")
				}
				n := line[i+1]
				switch {
				case n == '\\' || n == '"' || n == '$' || n == '~':
					b.WriteByte(n)
					i += 2
				case n >= '0' && n <= '3' && i+3 < len(line) && isOctal3([]byte(line[i+1:i+4])):
					v := (n-'0')<<6 | (line[i+2]-'0')<<3 | (line[i+3] - '0')
					if v == 0 {
						return nil, errors.New(`\000 truncates the C string`)
					}
					b.WriteByte(v)
					i += 4
				default:
					return nil, fmt.Errorf("escape \\%c outside the encoder's subset", n)
				}
			case c == '$' || c == '~':
				return nil, fmt.Errorf("raw %q would be expanded", c)
			case c < 0x20 || c >= 0x7f:
				return nil, fmt.Errorf("raw byte %#x", c)
			default:
				b.WriteByte(c)
				i++
			}
		}
	end:
		toks = append(toks, b.String())
		if i == len(line) {
			return toks, nil
		}
		if line[i] != ' ' {
			return nil, fmt.Errorf("offset %d: want a space between tokens", i)
		}
		i++
	}
}

func checkQuote(t *testing.T, s string) {
	t.Helper()
	q, err := Quote(s)
	if strings.IndexByte(s, 0) >= 0 {
		if !errors.Is(err, ErrUnencodable) {
			t.Fatalf("Quote(%q) with NUL: err %v", s, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Quote(%q): %v", s, err)
	}
	got, err := tmuxParseLine(q)
	if err != nil || len(got) != 1 || got[0] != s {
		t.Fatalf("Quote(%q) = %q parses to %q, %v", s, q, got, err)
	}
	line, err := Encode([]string{"set-option", "-t", "$1", "--", "@k", s})
	if err != nil {
		t.Fatal(err)
	}
	toks, err := tmuxParseLine(line)
	if err != nil || len(toks) != 6 || toks[5] != s || toks[0] != "set-option" {
		t.Fatalf("Encode round trip of %q: %q %v", s, toks, err)
	}
}

func TestQuoteAllBytes(t *testing.T) {
	for c := 0; c < 256; c++ {
		checkQuote(t, string([]byte{byte(c)}))
		checkQuote(t, "a"+string([]byte{byte(c)})+"b")
	}
	for _, s := range hostileValues() {
		checkQuote(t, s)
	}
}

func TestEncodeRefuses(t *testing.T) {
	for _, args := range [][]string{nil, {""}, {"A=b"}, {"-t"}, {"display message"},
		{"%if"}, {"#x"}, {"display-message", "a\x00b"}} {
		if _, err := Encode(args); !errors.Is(err, ErrUnencodable) {
			t.Errorf("Encode(%q): err %v, want ErrUnencodable", args, err)
		}
	}
}

// hostileValues are values that must reach tmux byte for byte.
func hostileValues() []string {
	return []string{"", " ", "#{pid}", "##{pid}", "#(touch x)", `"`, `'`, `\`, `\\`, `\"`,
		";", " ; ", `\;`, "$HOME", "${HOME}", "$0", "$", "~", "~root", "a~", "{", "}", "{ a ; b }",
		"-x", "--", "-", "%if", "%1", "%end 1 2 3", "#", "# comment", "a b\tc", "line1\nline2",
		"x\n%end 1 2 3\n%exit", "\x1b[1m", "\x7f", "\xff\xfe", "\xc3(", "caf\xc3\xa9 日本", "\u00a0",
		"\\000", `\u0041`, "'$HOME'", `"$HOME"`, "#[fg=red]", "=name:", "$1"}
}

func FuzzQuote(f *testing.F) {
	for _, s := range hostileValues() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkQuote(t, s)
	})
}
