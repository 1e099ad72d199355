package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/skc-supervisor/skc-supervisor/api"
	"github.com/skc-supervisor/skc-supervisor/lifecycle"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// The verbs that talk to agents (docs/contract.md "Talking to agents"): screen,
// send, output, wait. Each names a session by NAME (its name or $id) or by
// --state-dir DIR --session-id ID.

// cliStdin is where `send` reads its text when none is given (tests replace it).
var cliStdin io.Reader = os.Stdin

// talkRef parses args with fs and returns the session — NAME (the first
// positional argument) or --state-dir DIR --session-id ID — and the other
// positional arguments.
func talkRef(verbName string, fs *flag.FlagSet, args []string) (api.Ref, []string, error) {
	var ref api.Ref
	fs.StringVar(&ref.StateDir, "state-dir", "", "")
	fs.StringVar(&ref.SessionID, "session-id", "", "")
	pos, after, err := parseSplit(fs, args)
	if err != nil {
		return ref, nil, err
	}
	if verbName != "send" {
		pos, after = append(pos, after...), nil
	}
	if ref.StateDir == "" && ref.SessionID == "" {
		// send's words after "--" are its TEXT, never the session
		// (`send -- hi` names none).
		if len(pos) == 0 || pos[0] == "" {
			return ref, nil, usageError(verbName, errors.New("give a session NAME or --state-dir and --session-id"))
		}
		ref.Name, pos = pos[0], pos[1:]
	}
	pos = append(pos, after...)
	if ref.StateDir, err = absPath("state_dir", ref.StateDir); err != nil {
		return ref, nil, err
	}
	ref, err = api.ValidateRef(ref)
	return ref, pos, err
}

func runScreen(cli *CLI, args []string) int {
	var o opts
	fs := newFlags("screen", &o, true)
	lines := decimalVar(fs, "lines", 0)
	ansi := fs.Bool("ansi", false, "")
	ref, rest, err := talkRef("screen", fs, args)
	if err == nil && len(rest) > 0 {
		err = usageError("screen", errors.New("one session NAME expected"))
	}
	if err != nil {
		return cli.fail(o, err)
	}
	return respond(cli, o, func(c *api.Client) (api.ScreenResponse, error) {
		return c.Screen(cli.ctx, ref, int(*lines), *ansi)
	}, func(res api.ScreenResponse) {
		for _, l := range res.Lines {
			fmt.Fprintln(cli.stdout, l)
		}
	})
}

// keyFlags collects repeated --key KEY.
type keyFlags []string

func (k *keyFlags) String() string     { return strings.Join(*k, " ") }
func (k *keyFlags) Set(v string) error { *k = append(*k, v); return nil }

func runSend(cli *CLI, args []string) int {
	var o opts
	var keys keyFlags
	fs := newFlags("send", &o, true)
	enter := fs.Bool("enter", false, "")
	fs.Var(&keys, "key", "")
	ref, words, err := talkRef("send", fs, args)
	if err != nil {
		return cli.fail(o, err)
	}
	in := api.InputRequest{Enter: *enter, Keys: keys}
	switch {
	case len(words) > 0 && len(keys) > 0:
		return cli.fail(o, usageError("send", errors.New("give TEXT or --key, not both")))
	case len(words) > 0:
		in.Text = strings.Join(words, " ")
	case len(keys) == 0:
		// The limit plus one byte, so that too much text is refused, not cut.
		b, err := io.ReadAll(io.LimitReader(cliStdin, api.MaxInputText+1))
		if err != nil {
			return cli.fail(o, verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "text"}, "reading stdin: %v", err))
		}
		if len(b) > api.MaxInputText {
			// Only the limit and one byte were read: the size is not
			// known, and the daemon would report the read's as the text's.
			return cli.fail(o, verdict.Errorf(verdict.CodeInvalidRequest,
				map[string]any{"field": "text", "max_bytes": api.MaxInputText},
				"text on stdin is more than %d bytes (64 KiB): send it in parts", api.MaxInputText))
		}
		in.Text = string(b)
	}
	// JSON would turn invalid UTF-8 into U+FFFD silently: refuse it here.
	if !utf8.ValidString(in.Text) {
		return cli.fail(o, verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "text"}, "text is not valid UTF-8"))
	}
	return respond(cli, o, func(c *api.Client) (api.InputResponse, error) {
		return c.Input(cli.ctx, ref, in)
	}, func(api.InputResponse) {})
}

func runOutput(cli *CLI, args []string) int {
	var o opts
	fs := newFlags("output", &o, false)
	follow := fs.Bool("follow", false, "")
	ref, rest, err := talkRef("output", fs, args)
	if err == nil && len(rest) > 0 {
		err = usageError("output", errors.New("one session NAME expected"))
	}
	if err != nil {
		return cli.fail(o, err)
	}
	c, err := cli.client(o)
	if err != nil {
		return cli.fail(o, err)
	}
	defer c.Close()
	if !*follow {
		// What the pane holds now, as bytes: its history and screen with
		// colours, one line per line.
		res, err := c.Screen(cli.ctx, ref, api.MaxScreenLines, true)
		if err != nil {
			return cli.fail(o, err)
		}
		for _, l := range res.Lines {
			io.WriteString(cli.stdout, l+"\n")
		}
		return verdict.ExitOK
	}
	err = c.Output(cli.ctx, ref, func(ch api.OutputChunk) error {
		if ch.Data == nil {
			more := ""
			if ch.Unknown {
				more = " and an unknown amount more (tmux paused the pane)"
			}
			fmt.Fprintf(cli.stderr, "skc-supervisor: output: %d bytes dropped%s\n", ch.Dropped, more)
			return nil
		}
		_, err := cli.stdout.Write(ch.Data)
		return err
	})
	if err != nil && cli.ctx.Err() == nil {
		return cli.fail(o, err)
	}
	return verdict.ExitOK
}

func runWait(cli *CLI, args []string) int {
	var o opts
	var req api.WaitRequest
	fs := newFlags("wait", &o, true)
	fs.BoolVar(&req.Exit, "exit", false, "")
	// durationFlag, not the flag package's: its refusal says what a
	// duration looks like, as every duration flag's does.
	fs.Var((*durationFlag)(&req.Idle), "idle", "")
	fs.StringVar(&req.Text, "text", "", "")
	fs.Var((*durationFlag)(&req.Timeout), "timeout", "")
	ref, rest, err := talkRef("wait", fs, args)
	if err == nil && len(rest) > 0 {
		err = usageError("wait", errors.New("one session NAME expected"))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err == nil && countTrue(req.Exit, set["idle"], req.Text != "") != 1 {
		err = usageError("wait", errors.New("give exactly one of --exit, --idle DURATION and --text STRING"))
	}
	// A zero or negative duration written is refused as the API refuses it
	// (field idle, timeout), never taken for "none" (a wait without end).
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"idle", req.Idle}, {"timeout", req.Timeout}} {
		if err == nil && set[f.name] && f.d <= 0 {
			err = verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": f.name},
				"wait: --%s %v: must be a positive duration", f.name, f.d)
		}
	}
	if err == nil {
		// The daemon's own check, here too: bad input is exit 2 also when
		// the daemon is down, as create's is.
		err = lifecycle.ValidateWait(lifecycle.WaitRequest(req))
	}
	if err != nil {
		return cli.fail(o, err)
	}
	return respond(cli, o, func(c *api.Client) (api.WaitResponse, error) {
		return c.Wait(cli.ctx, ref, req)
	}, func(res api.WaitResponse) { printWait(cli.stdout, res) })
}

func countTrue(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func printWait(w io.Writer, res api.WaitResponse) {
	if v := res.Verdict; v != nil {
		fmt.Fprintf(w, "%s: %s (%s", res.Status, v.Reason, v.ExitKind)
		if v.Exit != nil && v.Exit.Status != nil {
			fmt.Fprintf(w, ", status %d", *v.Exit.Status)
		} else if v.Exit != nil && v.Exit.Signal != "" {
			fmt.Fprintf(w, ", signal %s", v.Exit.Signal)
		}
		fmt.Fprintf(w, ") at %s\n", v.Timestamp.Format(time.RFC3339))
		return
	}
	fmt.Fprintln(w, res.Status)
}
