package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/skc-supervisor/skc-supervisor/home"
)

// VersionInfo is `version --json` (docs/contract.md, "Small corrections").
type VersionInfo struct {
	Version  string `json:"version"`  // module version, or "(devel)" for a build from a checkout
	Revision string `json:"revision"` // VCS revision the binary was built from ("" when unknown)
	Modified bool   `json:"modified"` // the tree had uncommitted changes
	Go       string `json:"go"`
	Tmux     string `json:"tmux,omitempty"` // `tmux -V` of the tmux the CLI would use, when it runs
}

// buildVersion reads the version the Go toolchain stamped into the binary:
// the module version for `go install …@v0.2.0`, the VCS revision and dirty
// flag for a build from a checkout (`make build` keeps -buildvcs on).
// -ldflags "-X main.version=…" wins over both, for packagers.
func buildVersion() VersionInfo {
	v := VersionInfo{Version: "(devel)", Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if version != "" {
		v.Version = version
	}
	return v
}

// String is the one-line form: `v0.2.0`, or `(devel) 3f2a9c1e04b7+dirty` for a
// build from a checkout.
func (v VersionInfo) String() string {
	if v.Version != "(devel)" || v.Revision == "" {
		return v.Version
	}
	s := v.Version + " " + v.Revision[:min(12, len(v.Revision))]
	if v.Modified {
		s += "+dirty"
	}
	return s
}

// versionString is what `version` prints after the program name, and what
// GET /v1/info reports.
func versionString() string { return buildVersion().String() }

// tmuxVersion runs `<tmux> -V` with a bound; "" when it does not answer.
func tmuxVersion(tmux string) string {
	path, err := exec.LookPath(tmux)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "-V").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func runVersion(cli *CLI, args []string) int {
	var o opts
	fs := newFlags("version", &o, true)
	if err := parseNoArgs(fs, args); err != nil {
		return cli.fail(o, err)
	}
	v := buildVersion()
	if !o.json {
		// One line, as the contract says: `skc-supervisor VERSION`, for
		// scripts that read it; the toolchain and tmux are in --json.
		fmt.Fprintf(cli.stdout, "skc-supervisor %s\n", v)
		return 0
	}
	if p, err := cli.paths(o); err == nil {
		v.Tmux = tmuxVersion(p.Tmux)
	}
	cli.printJSON(v)
	return 0
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// serveLogger is serve's logger: JSON lines (every level) for log shippers
// and journald, the default whenever stderr is not a terminal; zerolog's
// console writer at info and above for a person running serve by hand.
func serveLogger(w io.Writer) (zerolog.Logger, bool) {
	if !isTerminal(w) {
		return zerolog.New(w).With().Timestamp().Int("pid", os.Getpid()).Logger(), false
	}
	cw := zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05", NoColor: os.Getenv("NO_COLOR") != ""}
	return zerolog.New(cw).Level(zerolog.InfoLevel).With().Timestamp().Logger(), true
}

// attachPrefix is the CLI invocation that reaches the daemon this command
// reached: the --home and --runtime-dir it was given on its command line
// (the environment's reach a new command from the same shell as they are),
// so that a printed attach line works when pasted.
func attachPrefix(o opts) string {
	cmd := "skc-supervisor"
	if o.o.Home != "" {
		cmd += " --home " + shellQuote(printedPath(o.o.Home))
	}
	if o.o.RuntimeDir != "" {
		cmd += " --runtime-dir " + shellQuote(printedPath(o.o.RuntimeDir))
	}
	return cmd
}

// printedPath is p made absolute against the working directory (a printed line
// may be pasted elsewhere), or p when that cannot be done.
func printedPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// tryIt is what serve tells a person once it is ready: where it listens and
// the commands to try — as prog was invoked (./bin/skc-supervisor when not
// installed), with --home and --runtime-dir when this serve got them from a
// flag or the environment, so that they reach this daemon from a new terminal.
func tryIt(w io.Writer, prog string, p home.Paths, homeGiven, runtimeGiven bool) {
	cmd := "skc-supervisor"
	if strings.Contains(prog, "/") {
		cmd = shellQuote(prog)
	}
	if homeGiven {
		cmd += " --home " + shellQuote(p.Home)
	}
	if runtimeGiven && p.RuntimeDir != p.Home {
		cmd += " --runtime-dir " + shellQuote(p.RuntimeDir)
	}
	fmt.Fprintf(w, "\nskc-supervisor is ready: API on %s, supervised tmux on %s\n", p.APISocket(), p.TmuxSocket())
	fmt.Fprintf(w, "try, in another terminal:\n")
	fmt.Fprintf(w, "  %s create --state-dir /tmp/skc-try --session-id hello -- sh -c 'echo hello; exec sleep 600'\n", cmd)
	fmt.Fprintf(w, "  %s ls\n", cmd)
	fmt.Fprintf(w, "  %s attach --state-dir /tmp/skc-try --session-id hello    (detach: C-b d)\n", cmd)
	fmt.Fprintf(w, "stop with Ctrl-C: the sessions keep running.\n\n")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
