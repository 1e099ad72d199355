// Command skc-supervisor is the daemon (`serve`) and its CLI. This package is
// wiring only: flags and output here, behaviour in the packages.
//
// Output contract (docs/contract.md): with --json every outcome, errors included, is
// exactly one JSON document on stdout; otherwise people get text on stdout and
// messages on stderr. Exit codes come from verdict.Classify, the one table.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/skc-supervisor/skc-supervisor/api"
	"github.com/skc-supervisor/skc-supervisor/home"
	"github.com/skc-supervisor/skc-supervisor/lifecycle"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// version is set at build time with -ldflags "-X main.version=…" by packagers;
// otherwise the build info says it (buildVersion).
var version = ""

// verb is one CLI verb: run gets the arguments after the verb name.
type verb struct {
	run    func(cli *CLI, args []string) int
	hidden bool
	// json: the verb has a JSON answer and its own --json flag. A verb
	// without one (a byte stream, a terminal, a daemon's log) ignores a
	// --json written before the verb, where it is a preference for every
	// verb (a wrapper's `skc-supervisor --json "$@"`), not a request of it.
	json bool
}

// verbs is the CLI's dispatch table.
var verbs = map[string]verb{
	"serve":    {runServe, false, false},
	"create":   {runCreate, false, true},
	"ls":       {runList, false, true},
	"show":     {runShow, false, true},
	"kill":     {runKill, false, true},
	"restart":  {runRestart, false, true},
	"attach":   {runAttach, false, false},
	"screen":   {runScreen, false, true},
	"send":     {runSend, false, true},
	"output":   {runOutput, false, false},
	"wait":     {runWait, false, true},
	"verdicts": {runVerdicts, false, true},
	"fence":    {runFence, false, true},
	"tmuxctl":  {runTmuxctl, false, false},
	"doctor":   {runDoctor, false, true},
	"version":  {runVersion, false, true},
	"helper":   {runHelper, true, false},
}

// usages is each verb's synopsis (docs/contract.md "Verbs").
var usages = map[string]string{
	"serve":    "serve [--wire-log FILE] [--host-name NAME] [--fence URL] [--pool N]",
	"create":   "create --state-dir DIR --session-id ID [--state-file FILE] [--cwd DIR] [--env KEY=VALUE]... [--label TEXT] [--wait DURATION] [--stop-timeout DURATION] [--restart never|on-failure|always] [--resume-arg ARG]... [--restart-delay DURATION] [--restart-burst N] [--restart-interval DURATION] [--json] -- COMMAND [ARG]...",
	"ls":       "ls [--fleet] [--json]",
	"show":     "show (NAME | --state-dir DIR --session-id ID) [--json]",
	"kill":     "kill (NAME | --state-dir DIR --session-id ID) [--json]",
	"restart":  "restart (NAME | --state-dir DIR --session-id ID) [--json]",
	"attach":   "attach (NAME | --state-dir DIR --session-id ID)",
	"screen":   "screen (NAME | --state-dir DIR --session-id ID) [--lines N] [--ansi] [--json]",
	"send":     "send (NAME | --state-dir DIR --session-id ID) [--enter] [--key KEY]... [--json] [-- TEXT]",
	"output":   "output (NAME | --state-dir DIR --session-id ID) [--follow]",
	"wait":     "wait (NAME | --state-dir DIR --session-id ID) (--exit | --idle DURATION | --text STRING) [--timeout DURATION] [--json]",
	"verdicts": "verdicts [--since SEQ] [--follow] [--fleet]",
	"fence":    "fence [--json] | fence release --reservation ID [--json] | fence forget --host NAME [--json]",
	"tmuxctl":  "tmuxctl decode",
	"doctor":   "doctor [--json]",
	"version":  "version [--json]",
	"helper":   "helper …",

	// The sub-verbs' own, for their usage errors (not listed on their own).
	"fence release": "fence release --reservation ID [--json]",
	"fence forget":  "fence forget --host NAME [--json]",
}

// CLI carries the streams and the context of one invocation.
type CLI struct {
	ctx            context.Context
	stdout, stderr io.Writer
	getenv         home.Env
}

func main() {
	// The pane helper owns its signals: until its gate opens SIGINT and SIGTERM
	// end it (a stop before the agent runs), and then it execs the agent,
	// which starts with default dispositions. It runs before this process
	// starts catching them.
	if len(os.Args) > 1 && os.Args[1] == "helper" {
		os.Exit(lifecycle.RunHelper(os.Args[2:], openFence))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	cli := &CLI{ctx: ctx, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	code := cli.Main(os.Args[1:])
	stop()
	os.Exit(code)
}

// Main dispatches args (without the program name) and returns the exit code.
func (cli *CLI) Main(args []string) int {
	args, err := globalsAfterVerb(args)
	if err != nil {
		return cli.fail(opts{}, err)
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) == 0 {
			cli.usage(cli.stderr) // a usage error
			return verdict.ExitUsage
		}
		cli.usage(cli.stdout) // asked for: on stdout, as every VERB --help
		return verdict.ExitOK
	}
	v, ok := verbs[args[0]]
	if !ok {
		if slices.Contains(args[1:], "--json") || slices.Contains(args[1:], "-json") {
			// --json promises one JSON document, whatever the outcome.
			return cli.fail(opts{json: true}, verdict.Errorf(verdict.CodeInvalidRequest,
				map[string]any{"field": "verb"}, "unknown verb %q (skc-supervisor --help lists them)", args[0]))
		}
		fmt.Fprintf(cli.stderr, "skc-supervisor: unknown verb %q\n", args[0])
		cli.usage(cli.stderr)
		return verdict.ExitUsage
	}
	return v.run(cli, args[1:])
}

// globalFlags are the flags that may also come before the verb:
// `skc-supervisor --home DIR ls`, the form serve's "try it" lines print. The
// four every verb accepts (newFlags) take a value (true); --json takes none
// (false), and promises its one JSON document wherever it is written before
// `--` — a verb without a JSON answer ignores it before the verb
// (globalsAfterVerb) and refuses it after, where it asks that verb for one.
var globalFlags = map[string]bool{"home": true, "runtime-dir": true, "tmux": true, "tmux-config": true, "json": false}

// globalsAfterVerb is hoistGlobals for Main: a --json before a verb that
// has no JSON answer (verb.json) is dropped, not handed to a flag set that
// would refuse it (found outside-in: `--json output NAME` was refused).
func globalsAfterVerb(args []string) ([]string, error) {
	pre, rest, err := splitGlobals(args)
	if err != nil {
		return nil, err
	}
	if len(rest) > 0 {
		if v, ok := verbs[rest[0]]; ok && !v.json {
			if pre, err = dropJSON(pre); err != nil {
				return nil, err
			}
		}
	}
	return afterVerb(pre, rest), nil
}

// dropJSON removes --json (and --json=BOOL) from pre, global flags as
// splitGlobals returns them. A value that is not a boolean is refused, as
// the flag package refuses it where --json is defined.
func dropJSON(pre []string) ([]string, error) {
	var kept []string
	for i := 0; i < len(pre); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(pre[i], "-"), "=")
		if name == "json" {
			if _, err := strconv.ParseBool(value); hasValue && err != nil {
				return nil, verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "json"},
					"--json %q: want true or false", value)
			}
			continue
		}
		kept = append(kept, pre[i])
		if globalFlags[name] && !hasValue && i+1 < len(pre) {
			i++
			kept = append(kept, pre[i]) // its value
		}
	}
	return kept, nil
}

// hoistGlobals moves global flags written before the verb to just after it,
// where the verb's own flag set parses them like any other flag.
func hoistGlobals(args []string) ([]string, error) {
	pre, rest, err := splitGlobals(args)
	if err != nil {
		return nil, err
	}
	return afterVerb(pre, rest), nil
}

// afterVerb is rest with pre inserted after its first word (the verb); rest
// alone when either is empty.
func afterVerb(pre, rest []string) []string {
	if len(pre) == 0 || len(rest) == 0 {
		return rest
	}
	return append(append([]string{rest[0]}, pre...), rest[1:]...)
}

// splitGlobals splits args into the global flags written before the verb
// (with their values) and the rest, from the verb on.
func splitGlobals(args []string) (pre, rest []string, err error) {
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		takesValue, global := globalFlags[name]
		if !global || strings.HasPrefix(args[0], "---") {
			break
		}
		n := 1
		if takesValue && !hasValue {
			n = 2
		}
		if len(args) < n {
			return nil, nil, verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": strings.ReplaceAll(name, "-", "_")},
				"flag needs an argument: %s", args[0])
		}
		pre, args = append(pre, args[:n]...), args[n:]
	}
	return pre, args, nil
}

// usage lists every verb's usage on w: stdout when asked for (--help),
// stderr beside a usage error.
func (cli *CLI) usage(w io.Writer) {
	var names, noJSON []string
	for n, v := range verbs {
		if !v.hidden {
			names = append(names, n)
			if !v.json {
				noJSON = append(noJSON, n)
			}
		}
	}
	sort.Strings(names)
	sort.Strings(noJSON)
	fmt.Fprintln(w, "usage:")
	for _, n := range names {
		fmt.Fprintf(w, "  skc-supervisor %s\n", usages[n])
	}
	fmt.Fprintln(w, "every verb accepts --home DIR, --runtime-dir DIR, --tmux PATH and --tmux-config FILE, after it or before it,")
	fmt.Fprintf(w, "and --json before it (ignored by %s, which answer no JSON)\n", strings.Join(noJSON, ", "))
}

// opts are the flags every verb accepts.
type opts struct {
	o    home.Overrides
	json bool
}

// newFlags returns a FlagSet with the common flags. flag accepts both -name
// and --name; parse errors are reported by the caller, in the right format.
func newFlags(name string, o *opts, withJSON bool) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.o.Home, "home", "", "SKC_HOME")
	fs.StringVar(&o.o.RuntimeDir, "runtime-dir", "", "SKC_RUNTIME_DIR")
	fs.StringVar(&o.o.Tmux, "tmux", "", "SKC_TMUX")
	fs.StringVar(&o.o.TmuxConfig, "tmux-config", "", "SKC_TMUX_CONFIG")
	if withJSON {
		fs.BoolVar(&o.json, "json", false, "one JSON document on stdout")
	}
	return fs
}

// parseArgs parses flags that may come before, between or after positional
// arguments (`show NAME --json`); everything after "--" is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	pos, after, err := parseSplit(fs, args)
	return append(pos, after...), err
}

// parseSplit is parseArgs keeping apart the positional words written before
// "--" and those after it (send's TEXT is only ever after it).
func parseSplit(fs *flag.FlagSet, args []string) (before, after []string, err error) {
	defer func(all []string) {
		if err == nil {
			err = onceEach(fs, all)
		}
		if err == nil {
			// A global path written empty (`--home "$UNSET"`) fell back to
			// the default home: a script's empty variable acted on another
			// daemon's sessions (found outside-in).
			err = explicitEmpty(fs, "home", "runtime-dir", "tmux", "tmux-config")
		}
	}(args)
	for {
		if err := fs.Parse(args); err != nil {
			wantJSON(fs, args)
			return nil, nil, usageError(fs.Name(), err)
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return before, rest, nil
		}
		if len(rest) == 0 {
			return before, nil, nil
		}
		before = append(before, rest[0])
		args = rest[1:]
	}
}

// repeatable marks a flag that may be given more than once (--env, --key,
// --resume-arg): each use adds a value.
type repeatable interface{ repeatable() }

func (*envFlags) repeatable()  {}
func (*multiFlag) repeatable() {}
func (*keyFlags) repeatable()  {}

// onceEach refuses a single-valued flag given twice before "--": the flag
// package keeps the last, so `kill --session-id a --session-id b` killed b —
// as the API refuses a repeated key, the CLI refuses a repeated flag.
// Boolean flags repeat harmlessly.
func onceEach(fs *flag.FlagSet, args []string) error {
	seen := map[string]bool{}
	for i := 0; i < len(args) && args[i] != "--"; i++ {
		a := args[i]
		if len(a) < 2 || a[0] != '-' {
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		bf, isBool := f.Value.(interface{ IsBoolFlag() bool })
		if isBool = isBool && bf.IsBoolFlag(); !isBool && !hasValue {
			i++ // its value
		}
		if _, rep := f.Value.(repeatable); rep || isBool {
			continue
		}
		if seen[name] {
			return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": strings.ReplaceAll(name, "-", "_")},
				"%s: --%s is given twice; give it once", fs.Name(), name)
		}
		seen[name] = true
	}
	return nil
}

// parseNoArgs is parseArgs for verbs that take no positional argument: an
// extra word is a usage error, not silently ignored (`verdicts --since 20 extra`).
func parseNoArgs(fs *flag.FlagSet, args []string) error {
	pos, err := parseArgs(fs, args)
	if err == nil && len(pos) > 0 {
		err = usageError(fs.Name(), fmt.Errorf("unexpected argument %q", pos[0]))
	}
	return err
}

// wantJSON sets fs's --json flag when args ask for it anywhere before "--":
// a parse error stops the flag package at the bad flag, and the refusal must
// still be the one JSON document that --json promises, wherever it was
// written (`create --wait soon --json -- …`).
func wantJSON(fs *flag.FlagSet, args []string) {
	if fs.Lookup("json") == nil {
		return
	}
	for _, a := range args {
		if a == "--" {
			return
		}
		if !strings.HasPrefix(a, "-") || strings.HasPrefix(a, "---") {
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "json" {
			continue
		}
		if !hasValue {
			value = "true"
		}
		_ = fs.Set("json", value)
	}
}

// explicitEmpty refuses a flag among names given with an empty value
// (`--host-name ""`, `create --restart ""`): unset, it falls back to its
// variable or its default, but a value written and empty is not a host name,
// a path or a policy, and going on with the fallback would hide the mistake.
// The refusal names the field as the value's own check does (host for
// --host-name, state_file for --state-file).
func explicitEmpty(fs *flag.FlagSet, names ...string) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if err != nil || f.Value.String() != "" || !slices.Contains(names, f.Name) {
			return
		}
		field := strings.ReplaceAll(f.Name, "-", "_")
		if field == "host_name" {
			field = "host"
		}
		err = verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": field},
			"%s: --%s is empty: give a value, or leave the flag out for its default", fs.Name(), f.Name)
	})
	return err
}

// badValue matches the flag package's error for a value its flag refused.
var badValue = regexp.MustCompile(`^invalid value (".*") for flag -([a-z-]+): (.*)$`)

// helpRequest is a verb's -h or --help: not an error, but it leaves the verb
// as one does (fail prints the verb's usage and answers 0).
type helpRequest struct{ verb string }

func (h helpRequest) Error() string { return "usage: skc-supervisor " + usages[h.verb] }

// usageError is a usage error of verbName (exit 2). A flag with a bad value
// gets a short message naming the flag (details.field), not the whole usage.
func usageError(verbName string, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return helpRequest{verb: verbName}
	}
	if m := badValue.FindStringSubmatch(err.Error()); m != nil {
		why := m[3]
		if why == "parse error" {
			why = "not a valid value"
		}
		return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": strings.ReplaceAll(m[2], "-", "_")},
			"%s: --%s %s: %s", verbName, m[2], m[1], why)
	}
	return verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "usage"},
		"%s: %v (usage: skc-supervisor %s)", verbName, err, usages[verbName])
}

// durationFlag is a time.Duration flag whose refusal says what it wants (the
// flag package's own says only "parse error").
type durationFlag time.Duration

func (d *durationFlag) String() string { return time.Duration(*d).String() }

func (d *durationFlag) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration such as 5s, 500ms or 1m30s")
	}
	*d = durationFlag(v)
	return nil
}

// wholeFlag is a durationFlag the API carries in whole units (milliseconds,
// seconds): a value between two units is refused rather than cut down to
// one the caller did not write (`--stop-timeout 500us` was "got 0").
type wholeFlag struct {
	d    *durationFlag
	unit time.Duration
	name string // the unit, plural
}

func (w wholeFlag) String() string {
	if w.d == nil {
		return ""
	}
	return w.d.String()
}

func (w wholeFlag) Set(s string) error {
	var v durationFlag
	if err := v.Set(s); err != nil {
		return err
	}
	if time.Duration(v)%w.unit != 0 {
		return fmt.Errorf("want whole %s (such as %v)", w.name, time.Duration(v).Truncate(w.unit)+w.unit)
	}
	*w.d = v
	return nil
}

// decimalFlag is an integer flag read in base 10 only: the flag package's
// own reads "010" as octal 8 and takes "0x3" and "1_0" — a value the caller
// did not write (`--restart-burst 010` gave a burst of 8).
type decimalFlag int64

func (d *decimalFlag) String() string { return strconv.FormatInt(int64(*d), 10) }

func (d *decimalFlag) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return errors.New("want a whole number in decimal, such as 5")
	}
	*d = decimalFlag(v)
	return nil
}

// decimalVar defines an integer flag read by decimalFlag, default def.
func decimalVar(fs *flag.FlagSet, name string, def int64) *decimalFlag {
	d := decimalFlag(def)
	fs.Var(&d, name, "")
	return &d
}

// paths resolves the instance layout from flags and environment.
func (cli *CLI) paths(o opts) (home.Paths, error) {
	return home.Resolve(o.o, cli.getenv)
}

// client returns an API client for the resolved runtime directory.
func (cli *CLI) client(o opts) (*api.Client, error) {
	p, err := cli.paths(o)
	if err != nil {
		return nil, err
	}
	lock := p.Lock()
	return api.NewClient(p.APISocket()).WaitStarting(func() bool {
		_, held := home.Holder(lock)
		return held
	}), nil
}

// fail reports err in the requested format and returns its exit code.
func (cli *CLI) fail(o opts, err error) int {
	var help helpRequest
	if errors.As(err, &help) {
		// Asked for (VERB -h, --help): the usage on stdout and success, as
		// the bare `--help` answers, not a refusal.
		fmt.Fprintf(cli.stdout, "usage: skc-supervisor %s\n", usages[help.verb])
		return verdict.ExitOK
	}
	body := api.NewErrorBody(err)
	if o.json {
		cli.printJSON(body)
	} else {
		fmt.Fprintf(cli.stderr, "skc-supervisor: %s (%s)\n", body.Error.Message, body.Error.Code)
	}
	return verdict.Classify(body.Error.Code).Exit
}

// printJSON writes v as one JSON document on stdout.
func (cli *CLI) printJSON(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(api.NewErrorBody(err))
	}
	cli.stdout.Write(append(b, '\n'))
}

// printable renders s for a terminal: as it is when it is valid UTF-8 and
// every rune is printable, quoted otherwise, so a hostile session name or path
// cannot drive the terminal through `ls` or `show`.
func printable(s string) string {
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
