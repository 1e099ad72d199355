package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// doctorReport is `doctor --json`.
type doctorReport struct {
	OK     bool `json:"ok"`
	Checks []struct {
		Check   string `json:"check"`
		Status  string `json:"status"`
		Message string `json:"message"`
		Fix     string `json:"fix"`
	} `json:"checks"`
}

// doctor runs `doctor --json` and `doctor` (text): both must agree on the exit code.
func doctor(t *testing.T, h *Home) (doctorReport, Result) {
	t.Helper()
	rj := h.CLI(t, "doctor", "--json")
	var rep doctorReport
	mustJSON(t, rj, &rep)
	rt := h.CLI(t, "doctor")
	if rt.Code != rj.Code || rep.OK != (rj.Code == 0) {
		t.Errorf("doctor: text exit %d, --json exit %d with ok %v: they must agree\n%s\n%s", rt.Code, rj.Code, rep.OK, rt, rj)
	}
	return rep, rt
}

// problems are the checks that warn or fail, but a pty warning: the pty count
// is the whole machine's (shared with every other test), not this home's.
func (r doctorReport) problems(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, c := range r.Checks {
		switch {
		case c.Status == "ok" || c.Status == "skip":
		case c.Check == "pty" && c.Status == "warn":
			t.Logf("doctor: the machine is short of ptys (not this home's doing): %s", c.Message)
		case c.Status == "warn" || c.Status == "fail":
			if c.Fix == "" {
				t.Errorf("doctor: %s %s has no fix line: %s", c.Status, c.Check, c.Message)
			}
			out[c.Check] = c.Status + ": " + c.Message
		default:
			t.Errorf("doctor: check %s has status %q, want ok/warn/fail/skip", c.Check, c.Status)
		}
	}
	return out
}

// wantExit is the exit doctor owes for this report: 1 when any check warns or
// fails (the machine-wide pty warning included), else 0.
func (r doctorReport) wantExit() int {
	for _, c := range r.Checks {
		if c.Status == "warn" || c.Status == "fail" {
			return 1
		}
	}
	return 0
}

// TestDoctor: a healthy home with a running daemon passes; a group-writable home
// fails naming the path with a chmod fix; a stopped daemon (and one that died,
// leaving its socket) is reported unreachable with a fix line.
func TestDoctor(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	d.MustCreate(t, NewSpec(t, "doctor"), "published") // the database and verdict log exist
	rep, r := doctor(t, d.Home)
	names := map[string]bool{}
	for _, c := range rep.Checks {
		names[c.Check] = true
	}
	for _, want := range []string{"tmux", "socket_path", "home_dir", "file_mode", "database", "daemon", "pty"} {
		if !names[want] {
			t.Errorf("doctor --json has no %q check: %+v", want, rep.Checks)
		}
	}
	if p := rep.problems(t); len(p) != 0 || r.Code != rep.wantExit() {
		t.Errorf("healthy home with a running daemon: problems %v, exit %d\n%s", p, r.Code, r)
	}
	// From a shell without SKC_TMUX and without tmux on its PATH, the
	// running daemon's tmux is the one checked, as attach runs it.
	rj := d.CLIWith(t, CLIOpts{Env: []string{"SKC_TMUX=", "PATH=/nonexistent-skc"}}, "doctor", "--json")
	var bare doctorReport
	mustJSON(t, rj, &bare)
	for _, c := range bare.Checks {
		if c.Check == "tmux" && c.Status != "ok" {
			t.Errorf("doctor without SKC_TMUX beside a running daemon: %+v", c)
		}
	}

	if err := os.Chmod(d.Dir, 0o770); err != nil {
		t.Fatal(err)
	}
	rep, r = doctor(t, d.Home)
	if err := os.Chmod(d.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := rep.problems(t)
	if len(p) != 1 || !strings.Contains(p["home_dir"], d.Dir) || r.Code != 1 ||
		!strings.Contains(r.Stdout, "fix: chmod 0700 "+d.Dir) {
		t.Errorf("group-writable home: problems %v, want only home_dir naming %s, exit 1, fix chmod 0700\n%s", p, d.Dir, r)
	}

	d.Stop(t)
	rep, r = doctor(t, d.Home)
	if p := rep.problems(t); len(p) != 1 || p["daemon"] == "" || r.Code != 1 ||
		!strings.Contains(r.Stdout, "fix: ") || !strings.Contains(r.Stdout, "serve") {
		t.Errorf("stopped daemon: problems %v, want only daemon (unreachable), exit 1, a fix line that says serve\n%s", p, r)
	}

	d2 := d.Home.Start(t, DaemonOpts{})
	d2.Kill(t) // SIGKILL: api.sock stays behind, nobody holds the lock
	rep, r = doctor(t, d.Home)
	if p := rep.problems(t); len(p) != 1 || p["daemon"] == "" || r.Code != 1 || !strings.Contains(r.Stdout, "fix: ") {
		t.Errorf("daemon killed: problems %v, want only daemon (unreachable), exit 1, a fix line\n%s", p, r)
	}
}

// TestDoctorChecksTheDaemonsTmuxConfig: beside a running daemon whose server
// reads a config file (SKC_TMUX_CONFIG in the daemon's environment only),
// doctor from a shell without it checks that file — it said "not set: the
// supervised server reads tmux's default config" (found outside-in).
func TestDoctorChecksTheDaemonsTmuxConfig(t *testing.T) {
	t.Parallel()
	conf := filepath.Join(t.TempDir(), "skc.tmux.conf")
	if err := os.WriteFile(conf, []byte("set -g history-limit 4321\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := StartDaemon(t, DaemonOpts{Env: []string{"SKC_TMUX_CONFIG=" + conf}})
	r := d.CLIWith(t, CLIOpts{Env: []string{"SKC_TMUX_CONFIG="}}, "doctor", "--json")
	var rep doctorReport
	mustJSON(t, r, &rep)
	found := false
	for _, c := range rep.Checks {
		if c.Check == "tmux_config" {
			found = true
			if c.Status != "ok" || !strings.Contains(c.Message, conf) {
				t.Fatalf("doctor beside a daemon started with %s: %+v", conf, c)
			}
		}
	}
	if !found {
		t.Fatalf("no tmux_config check: %+v", rep.Checks)
	}
	d.Stop(t)
}

// TestPGPasswordIsTheDaemonsAlone: a PGPASSWORD in the daemon's environment
// (how the README says a fleet's password may reach it) reaches neither the
// supervised tmux server's environment nor any agent (found outside-in: an
// agent running env printed it).
func TestPGPasswordIsTheDaemonsAlone(t *testing.T) {
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{Env: []string{"PGPASSWORD=S3cretPw"}})
	spec := NewSpec(t, "pgpassword")
	spec.Argv = []string{"sh", "-c", "env; echo env-done; exec sleep 60"}
	sess := d.MustCreate(t, spec, "published")
	if r := d.CLI(t, "wait", "--json", sess.Name, "--text", "env-done", "--timeout", "30s"); r.Code != 0 {
		t.Fatalf("wait for the agent's env\n%s", r)
	}
	r := d.CLI(t, "screen", "--lines", "200", sess.Name)
	out, err := d.Tmux("show-environment", "-g")
	if err != nil || strings.Contains(out, "S3cretPw") || strings.Contains(r.Stdout, "S3cretPw") {
		t.Fatalf("PGPASSWORD reached the server or the agent (%v):\n%s\n%s", err, out, r.Stdout)
	}
	d.Stop(t)
}
