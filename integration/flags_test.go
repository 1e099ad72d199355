package integration

import (
	"os"
	"path/filepath"
	"testing"
)

// TestHomeFlags: --home and --runtime-dir work without the environment, state
// goes to the home and sockets to the runtime dir.
func TestHomeFlags(t *testing.T) {
	t.Parallel()
	runtime := mkTemp(t)
	t.Cleanup(func() { os.RemoveAll(runtime) }) // registered first: runs after the home's cleanup
	h := NewHome(t)
	h.Runtime = runtime
	flags := []string{"--home", h.Dir, "--runtime-dir", h.Runtime}
	noEnv := []string{"SKC_HOME=", "SKC_RUNTIME_DIR="}
	d := h.Start(t, DaemonOpts{Args: flags, Env: noEnv})
	args := NewSpec(t, "flags").Args()
	r := d.CLIWith(t, CLIOpts{Env: noEnv}, append(append([]string{args[0]}, flags...), args[1:]...)...)
	if m := rawJSON(t, r); r.Code != 0 || m["status"] != "published" {
		t.Fatalf("create with --home/--runtime-dir: want exit 0 and published\n%s", r)
	}
	r = d.CLIWith(t, CLIOpts{Env: noEnv}, append([]string{"ls", "--json"}, flags...)...)
	var l List
	mustJSON(t, r, &l)
	if r.Code != 0 || len(l.Sessions) != 1 {
		t.Errorf("ls with --home/--runtime-dir: want exit 0 and the session\n%s", r)
	}
	d.NoteServerPID(l.Census.ServerPID)
	for _, f := range []string{filepath.Join(h.Dir, "fence.sqlite"), filepath.Join(h.Runtime, "api.sock"), filepath.Join(h.Runtime, "tmux.sock")} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%v", err)
		}
	}
	for _, f := range []string{filepath.Join(h.Dir, "api.sock"), filepath.Join(h.Runtime, "fence.sqlite")} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s exists: state and sockets mixed up", f)
		}
	}
}

// TestAgentNotFound: an argv whose command does not exist is refused, fails the
// create with a code, or publishes and then ends with a verdict; the daemon
// stays healthy either way.
func TestAgentNotFound(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	spec := NewSpec(t, "no-such-agent")
	spec.Argv = []string{"/nonexistent/skc-agent"}
	r, a := d.Create(t, spec)
	switch {
	case r.Code == 0 && a.Status == "published":
		v := d.WaitVerdict(t, "ended verdict", endedFor(a.Session.Name))
		if v.SKC.Exit == nil || (v.SKC.Exit.Status == nil && v.SKC.Exit.Signal == "") {
			t.Errorf("ended verdict %s: want an exit status or signal", v)
		}
	case r.Code != 0 && a.Error != nil && a.Error.Code != "":
		t.Logf("refused: %s", r.Stdout)
	default:
		t.Errorf("want published (then ended) or an error with a code\n%s", r)
	}
	checkHealthy(t, d)
}
