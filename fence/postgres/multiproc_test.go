package postgres

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/fencetest"
	"github.com/skc-supervisor/skc-supervisor/internal/pgtest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// childEnv makes the test binary a racer (TestMain): it opens the fence
// named by the variable's value, waits for "go" on stdin, reserves, prints
// its outcome and stays alive until stdin closes, so that no loser can find
// the winner dead.
const childEnv = "SKC_PG_RACER"

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		os.Exit(racer(v))
	}
	os.Exit(pgtest.Main(m))
}

// racer is a child process's whole life: url, host, state dir, session id.
func racer(arg string) int {
	p := strings.Split(arg, "\x1f")
	s, err := Open(p[0], fence.Options{Host: fence.Host{Name: p[1]}}, Config{})
	if err != nil {
		fmt.Println("open", verdict.CodeOf(err), err)
		return 1
	}
	defer s.Close()
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		return 1
	}
	res, err := s.Reserve(bg, fence.Identity{StateDir: p[2], SessionID: p[3]}, fencetest.SpecFor(p[2], p[3]))
	if err != nil {
		fmt.Println("refused", verdict.CodeOf(err))
	} else {
		fmt.Println(res.Outcome)
	}
	_, _ = io.Copy(io.Discard, in)
	return 0
}

// TestRacingProcesses: separate processes with real owner liveness (their
// own pids and incarnations), on three hosts, race for one identity round
// after round: exactly one reserves it each round.
func TestRacingProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	url := pgtest.DB(t)
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const racers, rounds = 6, 5
	for round := 0; round < rounds; round++ {
		sid := fmt.Sprint("p", round)
		var stdins []io.WriteCloser
		var outs []*bufio.Reader
		var cmds []*exec.Cmd
		for i := 0; i < racers; i++ {
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+strings.Join([]string{url, fmt.Sprint("host-", i%3), dir, sid}, "\x1f"))
			in, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			stdins, outs, cmds = append(stdins, in), append(outs, bufio.NewReader(out)), append(cmds, cmd)
		}
		for _, in := range stdins {
			fmt.Fprintln(in, "go")
		}
		won := 0
		for i, out := range outs {
			line, err := readLine(out, 60*time.Second)
			if err != nil {
				t.Fatalf("round %d racer %d: %v", round, i, err)
			}
			switch {
			case line == fence.Reserved.String():
				won++
			case line == "refused "+verdict.CodeIdentityReservedLive, line == "refused "+verdict.CodeIdentityReservedUnknown,
				line == "refused "+verdict.CodeIdentityFenceContended:
			default:
				t.Fatalf("round %d racer %d: %q", round, i, line)
			}
		}
		for i, in := range stdins {
			in.Close()
			if err := cmds[i].Wait(); err != nil {
				t.Errorf("racer %d: %v", i, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d processes reserved the identity", round, won)
		}
	}
}

func readLine(r *bufio.Reader, d time.Duration) (string, error) {
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() { s, err := r.ReadString('\n'); ch <- res{strings.TrimSpace(s), err} }()
	select {
	case x := <-ch:
		return x.s, x.err
	case <-time.After(d):
		return "", fmt.Errorf("no answer within %v", d)
	}
}
