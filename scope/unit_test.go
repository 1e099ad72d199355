package scope

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// The user unit in contrib/systemd is what makes stopping the daemon safe for
// the sessions (KillMode=process) and what keeps a broken configuration from
// restart-looping; these tests keep it in step with the code.

const unitPath = "../contrib/systemd/skc-supervisor.service"

// directives maps "Section.Key" to its values, in order (comments dropped).
func directives(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("not a directive: %q", line)
			}
			out[section+"."+k] = append(out[section+"."+k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestUserUnitDirectives(t *testing.T) {
	d := directives(t, unitPath)
	want := map[string]string{
		"Service.Type":         "notify",
		"Service.NotifyAccess": "main",
		"Service.KillMode":     "process",
		"Service.Restart":      "on-failure",
		"Service.ExecStart":    "%h/.local/bin/skc-supervisor serve",
		"Install.WantedBy":     "default.target",
	}
	for k, v := range want {
		if got := d[k]; len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	for _, k := range []string{"Service.StateDirectory", "Service.RuntimeDirectory", "Service.PrivateTmp",
		"Service.NoNewPrivileges", "Service.ProtectSystem", "Service.ProtectHome"} {
		if _, ok := d[k]; ok {
			t.Errorf("%s is set; the unit's comments explain why it must not be", k)
		}
	}
	// Exit statuses a restart cannot fix, from docs/contract.md via verdict.
	var codes []string
	for _, c := range []int{verdict.ExitUsage, verdict.ExitBusy, verdict.ExitPermission} {
		codes = append(codes, strconv.Itoa(c))
	}
	if got := d["Service.RestartPreventExitStatus"]; len(got) != 1 || got[0] != strings.Join(codes, " ") {
		t.Errorf("RestartPreventExitStatus = %q, want %q", got, strings.Join(codes, " "))
	}
}

// TestUserUnitVerifies runs systemd-analyze verify --user on the unit as the
// install script places it, with a stand-in binary at the ExecStart path.
func TestUserUnitVerifies(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	dir, err := os.MkdirTemp("", "skc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	home, rt := filepath.Join(dir, "home"), filepath.Join(dir, "rt")
	unitDir, binDir := filepath.Join(home, ".config/systemd/user"), filepath.Join(home, ".local/bin")
	for _, p := range []string{unitDir, binDir, rt} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(binDir, "skc-supervisor"), []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	unit, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	installed := filepath.Join(unitDir, "skc-supervisor.service")
	if err := os.WriteFile(installed, unit, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sa, "verify", "--user", installed)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_RUNTIME_DIR="+rt, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	if out, err := cmd.CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
