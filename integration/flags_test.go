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

// TestAgentNotFound: an argv whose command does not exist is refused before
// anything starts (spawn_failed, exit 1, details.reason executable_not_found);
// the daemon stays healthy.
func TestAgentNotFound(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	spec := NewSpec(t, "no-such-agent")
	spec.Argv = []string{"/nonexistent/skc-agent"}
	a := expectError(t, d.CLI(t, spec.Args()...), 1, "error", "spawn_failed", "")
	if a.Error != nil && a.Error.Details["reason"] != "executable_not_found" {
		t.Errorf("details %v, want reason executable_not_found", a.Error.Details)
	}
	checkHealthy(t, d)
}

// TestCreateFromRemovedDirectory: a create run from a directory that was
// removed (its caller's cwd, no --cwd) is refused cwd_missing, with its
// verdict — not started in the daemon's own directory.
func TestCreateFromRemovedDirectory(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	gone := filepath.Join(t.TempDir(), "gone")
	if err := os.Mkdir(gone, 0o700); err != nil {
		t.Fatal(err)
	}
	spec := NewSpec(t, "gone-cwd")
	spec.Argv = []string{"sleep", "100"}
	wrap := []string{"/bin/sh", "-c", `cd "$0" && rmdir "$0" && exec "$@"`, gone}
	a := expectError(t, d.CLIWith(t, CLIOpts{Wrap: wrap}, spec.Args()...), 1, "error", "spawn_failed", "cwd")
	if a.Error != nil && a.Error.Details["reason"] != "cwd_missing" {
		t.Errorf("details %v, want reason cwd_missing", a.Error.Details)
	}
	if n := len(d.AgentSessions(t)); n != 0 {
		t.Errorf("%d sessions started", n)
	}
}
