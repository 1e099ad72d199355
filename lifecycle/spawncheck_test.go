package lifecycle

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

func TestCheckCommand(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	must(t, os.Mkdir(bin, 0o700))
	must(t, os.WriteFile(filepath.Join(bin, "tool"), []byte("#!/bin/sh\n"), 0o700))
	must(t, os.WriteFile(filepath.Join(bin, "plain"), []byte("text"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "file"), nil, 0o600))
	must(t, os.WriteFile(filepath.Join(bin, "orphan"), []byte("#! /no/such/interp -x\necho\n"), 0o700))
	must(t, os.WriteFile(filepath.Join(bin, "badinterp"), []byte("#!"+filepath.Join(bin, "plain")+"\n"), 0o700))
	must(t, os.WriteFile(filepath.Join(bin, "relinterp"), []byte("#!interp\n"), 0o700))
	must(t, os.WriteFile(filepath.Join(bin, "crlf"), []byte("#!/bin/sh\r\necho\r\n"), 0o700))
	must(t, os.WriteFile(filepath.Join(bin, "elf"), []byte("\x7fELF\x02\x01\x01"), 0o700))
	cases := []struct {
		name   string
		spec   fence.Spec
		path   string
		reason string // "" = may start
	}{
		{"on the daemon's PATH", fence.Spec{Argv: []string{"tool"}, Cwd: dir}, bin, ""},
		{"not on PATH", fence.Spec{Argv: []string{"tool"}, Cwd: dir}, "/nonexistent", SpawnExecutableNotFound},
		{"the request's PATH wins", fence.Spec{Argv: []string{"tool"}, Cwd: dir, Env: []string{"PATH=" + bin}}, "/nonexistent", ""},
		{"the request's PATH lacks it", fence.Spec{Argv: []string{"tool"}, Cwd: dir, Env: []string{"PATH=/nonexistent"}}, bin, SpawnExecutableNotFound},
		{"absolute", fence.Spec{Argv: []string{filepath.Join(bin, "tool")}, Cwd: dir}, "", ""},
		{"absolute missing", fence.Spec{Argv: []string{"/no/such/binary"}, Cwd: dir}, "", SpawnExecutableNotFound},
		{"relative to cwd", fence.Spec{Argv: []string{"./bin/tool"}, Cwd: dir}, "", ""},
		{"relative missing", fence.Spec{Argv: []string{"./tool"}, Cwd: dir}, "", SpawnExecutableNotFound},
		{"no execute bit", fence.Spec{Argv: []string{"plain"}, Cwd: dir}, bin, SpawnNotExecutable},
		{"a directory", fence.Spec{Argv: []string{bin}, Cwd: dir}, "", SpawnNotExecutable},
		{"through a file", fence.Spec{Argv: []string{filepath.Join(dir, "file", "x")}, Cwd: dir}, "", SpawnExecutableNotFound},
		{"a script's interpreter missing", fence.Spec{Argv: []string{"orphan"}, Cwd: dir}, bin, SpawnExecutableNotFound},
		{"a script's interpreter missing, by path", fence.Spec{Argv: []string{"./bin/orphan"}, Cwd: dir}, "", SpawnExecutableNotFound},
		{"a script's interpreter not executable", fence.Spec{Argv: []string{"badinterp"}, Cwd: dir}, bin, SpawnNotExecutable},
		{"a relative interpreter is left to exec", fence.Spec{Argv: []string{"relinterp"}, Cwd: dir}, bin, ""},
		{"a CRLF script", fence.Spec{Argv: []string{"crlf"}, Cwd: dir}, bin, SpawnExecutableNotFound},
		{"not a script", fence.Spec{Argv: []string{"elf"}, Cwd: dir}, bin, ""},
		{"cwd missing", fence.Spec{Argv: []string{"tool"}, Cwd: filepath.Join(dir, "gone")}, bin, SpawnCwdMissing},
		{"cwd a file", fence.Spec{Argv: []string{"tool"}, Cwd: filepath.Join(dir, "file")}, bin, SpawnCwdMissing},
	}
	for _, c := range cases {
		err := checkCommand(c.spec, c.path, false)
		got := ""
		if err != nil {
			e := verdict.AsError(err)
			if e.Code != verdict.CodeSpawnFailed {
				t.Fatalf("%s: code %s", c.name, e.Code)
			}
			got, _ = e.Details["reason"].(string)
		}
		if got != c.reason {
			t.Errorf("%s: reason %q (%v), want %q", c.name, got, err, c.reason)
		}
	}
}

// TestCheckResumeArgv: a resume_argv that cannot start is refused at the
// create, naming resume_argv — not found out after the first crash, every
// start of the burst refused — and a restart's refusal of it names it too.
func TestCheckResumeArgv(t *testing.T) {
	dir := t.TempDir()
	spec := fence.Spec{Argv: []string{"/bin/sh"}, ResumeArgv: []string{"no-such-resume-agent"}, Cwd: dir}
	for _, c := range []struct {
		name    string
		spec    fence.Spec
		restart bool
	}{
		{"create", spec, false},
		{"restart (argv is the resume_argv)", fence.Spec{Argv: spec.ResumeArgv, ResumeArgv: spec.ResumeArgv, Cwd: dir}, true},
	} {
		e := verdict.AsError(checkCommand(c.spec, "/usr/bin:/bin", c.restart))
		if e == nil || e.Code != verdict.CodeSpawnFailed || e.Details["field"] != "resume_argv" ||
			e.Details["reason"] != SpawnExecutableNotFound {
			t.Errorf("%s: %v, want spawn_failed executable_not_found naming resume_argv", c.name, e)
		}
	}
	if err := checkCommand(fence.Spec{Argv: []string{"/bin/sh"}, ResumeArgv: []string{"sh", "-c", "true"}, Cwd: dir}, "/usr/bin:/bin", false); err != nil {
		t.Errorf("a resume_argv that starts: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCreateRefusesCommandThatCannotStart: spawn_failed before publication,
// nothing in tmux, the reservation released, and the verdict in the identity's
// history (show by identity answers it with no session).
func TestCreateRefusesCommandThatCannotStart(t *testing.T) {
	e := startEnv(t, "", "", false)
	for _, c := range []struct{ argv, cwd, reason string }{
		{"/no/such/binary", "", SpawnExecutableNotFound},
		{"", filepath.Join(e.home, "nonexistent"), SpawnCwdMissing},
	} {
		id, spec := e.identity("cannot-" + c.reason)
		if c.argv != "" {
			spec.Argv = []string{c.argv}
		}
		if c.cwd != "" {
			spec.Cwd = c.cwd
		}
		_, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
		ve := verdict.AsError(err)
		if ve.Code != verdict.CodeSpawnFailed || ve.Details["reason"] != c.reason {
			t.Fatalf("%s: %v %v", c.reason, err, ve.Details)
		}
		if s := e.sessions(id.Digest()); len(s) != 0 {
			t.Fatalf("%s: sessions left in tmux: %v", c.reason, s)
		}
		sh, err := e.m.Show(context.Background(), Ref{Identity: &id})
		if err != nil || sh.Session != nil || sh.Reservation != nil || len(sh.Verdicts) != 1 ||
			sh.Verdicts[0].Code != verdict.CodeSpawnFailed || sh.Verdicts[0].Evidence["reason"] != c.reason {
			t.Fatalf("%s: show by identity %+v %v", c.reason, sh, err)
		}
	}
}
