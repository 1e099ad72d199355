package lifecycle

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// talkAgent is the agents of the talk tests (run as `agent MODE …` by the pane
// helper):
//
//   - echo FILE [bp]: puts its terminal in raw mode, appends every byte it reads
//     to FILE (exactly), and echoes it visibly (controls as ^X, CR as a line end);
//     with bp it first asks for bracketed paste. FILE.ready appears once raw.
//   - color: prints "red" in red, then " plain", then sleeps.
//   - lines N: prints "line 1" … "line N", then sleeps.
//   - flood BYTES DONEFILE GOFILE: once GOFILE exists, writes BYTES bytes of
//     text lines, then creates DONEFILE and sleeps.
//   - tick STOPFILE: prints a line every 20 ms until STOPFILE exists, then sleeps.
//   - linesexit N GOFILE: prints N lines, then exits 0 once GOFILE exists.
//   - wrap: prints one line wrapped by the pane's width right between "WRAP"
//     and "MARK", then sleeps.
func talkAgent(args []string) int {
	switch args[0] {
	case "echo":
		return echoAgent(args[1], len(args) > 2 && args[2] == "bp")
	case "color":
		fmt.Print("\x1b[31mred\x1b[0m plain\n")
		sleepForever()
	case "lines":
		n, _ := strconv.Atoi(args[1])
		for i := 1; i <= n; i++ {
			fmt.Printf("line %d\n", i)
		}
		sleepForever()
	case "flood":
		n, _ := strconv.Atoi(args[1])
		for {
			if _, err := os.Stat(args[3]); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		line := bytes.Repeat([]byte("0123456789abcdef"), 4)
		line = append(line[:63], '\n')
		for sent := 0; sent < n; sent += len(line) {
			if _, err := os.Stdout.Write(line); err != nil {
				return 3
			}
		}
		_ = os.WriteFile(args[2], nil, 0o600)
		sleepForever()
	case "tick":
		for i := 0; ; i++ {
			if _, err := os.Stat(args[1]); err == nil {
				sleepForever()
			}
			fmt.Printf("tick %d\n", i)
			time.Sleep(20 * time.Millisecond)
		}
	case "wrap":
		// A line one row and four characters long: "…xxxxWRAP" fills the
		// first row, "MARK" starts the next (tmux wraps it).
		cols := 80
		if ws, err := unix.IoctlGetWinsize(1, unix.TIOCGWINSZ); err == nil && ws.Col > 4 {
			cols = int(ws.Col)
		}
		fmt.Print(strings.Repeat("x", cols-4) + "WRAPMARK\n")
		sleepForever()
	case "linesexit":
		n, _ := strconv.Atoi(args[1])
		for i := 1; i <= n; i++ {
			fmt.Printf("line %d\n", i)
		}
		for {
			if _, err := os.Stat(args[2]); err == nil {
				return 0
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return 99
}

func sleepForever() {
	for {
		time.Sleep(time.Hour)
	}
}

func echoAgent(file string, bracketed bool) int {
	tio, err := unix.IoctlGetTermios(0, unix.TCGETS)
	if err != nil {
		return 2
	}
	tio.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	tio.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	tio.Cflag |= unix.CS8
	tio.Cc[unix.VMIN], tio.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(0, unix.TCSETS, tio); err != nil {
		return 2
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 2
	}
	if bracketed {
		os.Stdout.WriteString("\x1b[?2004h")
	}
	os.Stdout.WriteString("ready\r\n")
	_ = os.WriteFile(file+".ready", nil, 0o600)
	buf := make([]byte, 64<<10)
	for {
		n, err := os.Stdin.Read(buf)
		if n > 0 {
			_, _ = f.Write(buf[:n])
			os.Stdout.Write(visible(buf[:n]))
		}
		if err != nil {
			return 0
		}
	}
}

// visible is what the echo agent shows for bytes it read.
func visible(b []byte) []byte {
	var out []byte
	for _, c := range b {
		switch {
		case c == '\r' || c == '\n':
			out = append(out, '\r', '\n')
		case c < 0x20:
			out = append(out, '^', c+'@')
		case c == 0x7f:
			out = append(out, '^', '?')
		default:
			out = append(out, c)
		}
	}
	return out
}
