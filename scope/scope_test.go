package scope

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/skc-supervisor/skc-supervisor/internal/testwatch"
	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

func TestMain(m *testing.M) {
	testwatch.Arm()
	goleak.VerifyTestMain(m)
}

func env(vars map[string]string, lookErr error, cgroup string, euid int) Env {
	return Env{
		Getenv: func(k string) string { return vars[k] },
		LookPath: func(string) (string, error) {
			if lookErr != nil {
				return "", lookErr
			}
			return "/usr/bin/systemd-run", nil
		},
		Cgroup: func() ([]byte, error) { return []byte(cgroup), nil },
		Euid:   euid,
	}
}

func TestDetect(t *testing.T) {
	const userCG = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/skc-supervisor.service\n"
	const sysCG = "0::/system.slice/skc-supervisor.service\n"
	inv := map[string]string{"INVOCATION_ID": "abc"}
	cases := []struct {
		name string
		env  Env
		want Runner
		ok   bool
	}{
		{"not a service", env(nil, nil, userCG, 1000), Runner{}, false},
		{"no systemd-run", env(inv, errors.New("missing"), userCG, 1000), Runner{}, false},
		{"user manager", env(inv, nil, userCG, 1000), Runner{SystemdRun: "/usr/bin/systemd-run", User: true}, true},
		{"system manager as root", env(inv, nil, sysCG, 0), Runner{SystemdRun: "/usr/bin/systemd-run"}, true},
		{"system manager as user", env(inv, nil, sysCG, 1000), Runner{}, false},
		{"cgroup v1 only", env(inv, nil, "1:name=systemd:/user.slice/user@1000.service/x\n", 1000), Runner{}, false},
	}
	for _, tc := range cases {
		got, ok := Detect(tc.env)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: got %+v,%v want %+v,%v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestUnitName(t *testing.T) {
	a, b := UnitName("/run/user/1000/skc/tmux.sock"), UnitName("/tmp/skc-1000/tmux.sock")
	if a == b || a != UnitName("/run/user/1000/skc/tmux.sock") {
		t.Fatalf("names not one per socket: %q %q", a, b)
	}
	if !strings.HasPrefix(a, UnitPrefix) || !strings.HasSuffix(a, ".scope") || len(a) != len(UnitPrefix)+16+len(".scope") {
		t.Fatalf("bad unit name %q", a)
	}
}

func TestCommand(t *testing.T) {
	b := Bootstrap{Socket: "/s/tmux.sock", Config: "/dev/null", Session: "skc-control", Args: []string{"-x", "80", "cat"}}
	plain := []string{"tmux", "-S", "/s/tmux.sock", "-f", "/dev/null", "new-session", "-d", "-s", "skc-control", "-x", "80", "cat"}
	if got := (Runner{}).Command(b); !reflect.DeepEqual(got, plain) {
		t.Fatalf("disabled: %q", got)
	}
	got := Runner{SystemdRun: "/usr/bin/systemd-run", User: true}.Command(b)
	want := append([]string{"/usr/bin/systemd-run", "--user", "--scope", "--quiet", "--collect",
		"--unit=" + UnitName("/s/tmux.sock"), "--description=skc-supervisor tmux server /s/tmux.sock", "--"}, plain...)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("user:\n got %q\nwant %q", got, want)
	}
	if got := (Runner{SystemdRun: "/x"}).Command(Bootstrap{Socket: "/s", Session: "c"}); got[1] != "--scope" {
		t.Fatalf("system manager must not pass --user: %q", got)
	}
}

// fakeSystemdRun writes a stand-in for systemd-run that records its arguments
// and then runs what follows "--", or fails like a missing user bus.
func fakeSystemdRun(t *testing.T, dir string, fail bool) (bin, log string) {
	t.Helper()
	bin, log = filepath.Join(dir, "systemd-run"), filepath.Join(dir, "args")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + log + "\n"
	if fail {
		script += "echo 'Failed to connect to bus: No medium found' >&2\nexit 1\n"
	} else {
		script += "while [ \"$1\" != -- ]; do shift; done\nshift\nexec \"$@\"\n"
	}
	if err := os.WriteFile(bin, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return bin, log
}

// startReal runs Start against a real tmux on a private socket and returns
// what the fake systemd-run received; the server is killed by PID at cleanup.
func startReal(t *testing.T, fail bool) (scoped bool, args string, err error) {
	t.Helper()
	tmuxtest.Need(t)
	dir, e := os.MkdirTemp("", "skc")
	if e != nil {
		t.Fatal(e)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "tmux.sock")
	t.Cleanup(func() { killServer(t, sock) })
	bin, log := fakeSystemdRun(t, dir, fail)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := ControlBootstrap(tmuxtest.Bin(), sock, "/dev/null", "skc-control")
	env := append(os.Environ(), "TMUX=/elsewhere,1,0", "TMUX_PANE=%9")
	scoped, err = Start(ctx, Runner{SystemdRun: bin, User: true}, b, env)
	out, _ := os.ReadFile(log)
	if e := tmuxtest.Command("-S", sock, "show-environment", "-g", "TMUX").Run(); e == nil {
		t.Fatal("TMUX leaked into the server's global environment")
	}
	if e := tmuxtest.Command("-S", sock, "has-session", "-t", "=skc-control").Run(); e != nil {
		t.Fatalf("control session missing after Start: %v", e)
	}
	return scoped, string(out), err
}

func killServer(t *testing.T, sock string) {
	out, err := tmuxtest.Command("-S", sock, "display", "-p", "#{pid}").Output()
	if err != nil {
		return
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && pid > 0 {
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Kill()
		}
	}
}

func TestStartScoped(t *testing.T) {
	scoped, args, err := startReal(t, false)
	if err != nil || !scoped {
		t.Fatalf("scoped=%v err=%v", scoped, err)
	}
	if !strings.Contains(args, "--scope\n") || !strings.Contains(args, "new-session\n-d\n") {
		t.Fatalf("systemd-run got %q", args)
	}
}

func TestStartFallsBack(t *testing.T) {
	scoped, _, err := startReal(t, true)
	if scoped || err == nil || !strings.Contains(err.Error(), "No medium found") {
		t.Fatalf("scoped=%v err=%v: want the plain command with the scope error reported", scoped, err)
	}
}

func TestStartNeedsSocket(t *testing.T) {
	if _, err := Start(context.Background(), Runner{}, Bootstrap{}, nil); err == nil {
		t.Fatal("no error for an empty bootstrap")
	}
}
