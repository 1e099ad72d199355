package tmuxctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

func TestConnBasics(t *testing.T) {
	cfg := testConfig(t)
	var wire lockedBuffer
	cfg.WireLog = &wire
	c := dialT(t, cfg)
	drain(c)
	info := c.Info()
	if info.PID <= 0 || info.StartTime <= 0 || info.Version == "" || info.Socket == "" {
		t.Fatalf("bad identity %+v", info)
	}
	if info.ControlSessionID == "" || info.ClientPID <= 0 || !info.VersionAtLeast(3, 3) {
		t.Fatalf("bad identity %+v", info)
	}
	r, err := c.Command(bg(), "display-message", "-p", "#{pid}")
	if err != nil || len(r.Lines) != 1 || r.Lines[0] != itoa(info.PID) || r.Flags != 1 {
		t.Fatalf("display: %+v %v", r, err)
	}
	r, err = c.Command(bg(), "show-options", "-t", info.ControlSessionID, "-v", "@skc-control")
	if err != nil || strings.Join(r.Lines, "|") != "1" {
		t.Fatalf("control tag: %+v %v", r, err)
	}
	_, err = c.Command(bg(), "kill-session", "-t", "$999")
	var ce *CommandError
	if !errors.As(err, &ce) || len(ce.Lines) == 0 || !strings.Contains(ce.Command, "kill-session") {
		t.Fatalf("want CommandError, got %v", err)
	}
	// A parse error is one %error block too, and the FIFO stays in step.
	if _, err := c.Command(bg(), "no-such-command"); !errors.As(err, &ce) {
		t.Fatalf("want CommandError, got %v", err)
	}
	if _, err := c.Command(bg(), "A=b"); !errors.Is(err, ErrUnencodable) {
		t.Fatalf("assignment as command: %v", err)
	}
	if r, err := c.Command(bg(), "display-message", "-p", "still in step"); err != nil || r.Lines[0] != "still in step" {
		t.Fatalf("after errors: %+v %v", r, err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !errors.Is(c.Err(), ErrClosed) {
		t.Fatalf("Err after Close: %v", c.Err())
	}
	if !waitGone(info.ClientPID, 10*time.Second) {
		t.Fatal("client process left behind")
	}
	if _, err := c.Command(bg(), "display-message", "-p", "x"); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("after close: %v", err)
	}
	w := wire.String()
	if !strings.Contains(w, "> \"display-message\" \"-p\" \"#{pid}\"") || !strings.Contains(w, "< %begin ") {
		t.Fatalf("wire log lacks traffic:\n%s", w)
	}
	noChildrenLeft(t)
}

func TestConnPipelined(t *testing.T) {
	c := dialT(t, testConfig(t))
	drain(c)
	const n = 1000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			want := fmt.Sprintf("n=%d", i)
			r, err := c.Command(bg(), "display-message", "-p", want)
			if err != nil {
				errs <- err
			} else if len(r.Lines) != 1 || r.Lines[0] != want {
				errs <- fmt.Errorf("command %d got %q", i, r.Lines)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A command that times out stays in the FIFO: its late reply is consumed and
// dropped, and the next command gets its own reply.
func TestConnTimeoutKeepsFIFO(t *testing.T) {
	cfg := testConfig(t)
	c := dialT(t, cfg)
	drain(c)
	// wait-for blocks this client's command queue until signalled (docs/tmux-facts.md §2).
	if _, err := c.Command(bg(), "wait-for", "skc-test"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg(), 50*time.Millisecond)
	_, err := c.Command(ctx, "display-message", "-p", "late")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want deadline exceeded, got %v", err)
	}
	tmuxRun(t, cfg.Socket, "wait-for", "-S", "skc-test")
	r, err := c.Command(bg(), "display-message", "-p", "mine")
	if err != nil || len(r.Lines) != 1 || r.Lines[0] != "mine" {
		t.Fatalf("FIFO out of step: %+v %v", r, err)
	}
}

// SIGKILL of the server fails pending commands with ErrServerExited.
func TestConnServerKilled(t *testing.T) {
	cfg := testConfig(t)
	c := dialT(t, cfg)
	drain(c)
	if _, err := c.Command(bg(), "wait-for", "skc-never"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func() {
			_, err := c.Command(bg(), "display-message", "-p", "pending")
			errc <- err
		}()
	}
	waitFor(t, "3 pending commands", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.fifo)-c.fifoHead == 3
	})
	if err := syscall.Kill(c.Info().PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := <-errc; !errors.Is(err, ErrServerExited) {
			t.Fatalf("pending command: %v", err)
		}
	}
	<-c.Done()
	var ee *ExitError
	if !errors.As(c.Err(), &ee) || ee.Reason != "server exited unexpectedly" {
		t.Fatalf("Err = %v", c.Err())
	}
	c.Close()
	noChildrenLeft(t)
}

// The control session killed by someone else, and the control client
// detached by another client, both end the connection with a bare %exit.
func TestConnEndedByOthers(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"control-session-killed", []string{"kill-session", "-t", "=skc-control"}},
		{"detached-by-other", []string{"detach-client", "-s", "=skc-control"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			c := dialT(t, cfg)
			var notes []Notification
			var mu sync.Mutex
			go func() {
				for n := range c.Notifications() {
					mu.Lock()
					notes = append(notes, n)
					mu.Unlock()
				}
			}()
			tmuxRun(t, cfg.Socket, tc.args...)
			<-c.Done()
			var ee *ExitError
			if !errors.As(c.Err(), &ee) || ee.Reason != "" {
				t.Fatalf("Err = %v", c.Err())
			}
			if _, err := c.Command(bg(), "display-message", "-p", "x"); !errors.Is(err, ErrNotConnected) || errors.Is(err, ErrServerExited) {
				t.Fatalf("command after end: %v", err)
			}
			waitFor(t, "%exit notification", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(notes) > 0 && notes[len(notes)-1].Name == NoteExit
			})
			c.Close()
			noChildrenLeft(t)
		})
	}
}

// Close sends stdin EOF: commands already sent still get their replies.
func TestConnCloseStdinEOF(t *testing.T) {
	c := dialT(t, testConfig(t))
	drain(c)
	errc := make(chan error, 1)
	go func() {
		r, err := c.Command(bg(), "display-message", "-p", "before-close")
		if err == nil && (len(r.Lines) != 1 || r.Lines[0] != "before-close") {
			err = fmt.Errorf("got %q", r.Lines)
		}
		errc <- err
	}()
	waitFor(t, "command queued", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(errc) == 1 || len(c.fifo)-c.fifoHead == 1
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil && !errors.Is(err, ErrServerExited) {
		t.Fatal(err)
	}
	noChildrenLeft(t)
}

// The control client dies with the process that started it (Pdeathsig on
// a locked OS thread): a helper process dials, is SIGKILLed, and its tmux
// client must go too.
func TestConnPdeathsig(t *testing.T) {
	cfg := testConfig(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperDial$")
	cmd.Env = append(os.Environ(), "SKC_TMUXCTL_HELPER_SOCK="+cfg.Socket)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(string(buf[:n]), "client ")))
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper said %q", buf[:n])
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !waitGone(pid, 20*time.Second) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatal("tmux -C client outlived its parent")
	}
}

// TestHelperDial is the helper process of TestConnPdeathsig.
func TestHelperDial(t *testing.T) {
	sock := os.Getenv("SKC_TMUXCTL_HELPER_SOCK")
	if sock == "" {
		t.Skip("helper process only")
	}
	// Dial from a goroutine that then exits, so that only the locked-thread
	// design keeps Pdeathsig from firing early.
	ch := make(chan *Conn)
	go func() {
		c, err := Dial(bg(), Config{Tmux: tmuxtest.Bin(), Socket: sock, ConfigFile: "/dev/null"})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		ch <- c
	}()
	c := <-ch
	fmt.Printf("client %d\n", c.Info().ClientPID)
	time.Sleep(time.Hour)
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestDialErrors(t *testing.T) {
	cfg := testConfig(t)
	bad := cfg
	bad.Tmux = "/nonexistent/tmux"
	if _, err := Dial(bg(), bad); err == nil {
		t.Fatal("Dial with a missing binary succeeded")
	}
	bad = cfg
	bad.ControlSession = "h#{pid}"
	if _, err := Dial(bg(), bad); err == nil {
		t.Fatal("Dial with a format in the control session name succeeded")
	}
	if _, err := Dial(bg(), Config{}); err == nil {
		t.Fatal("Dial without a socket succeeded")
	}
	noChildrenLeft(t)
}

// Hook output arrives as bare lines outside any block (docs/tmux-facts.md §1.3): it is
// logged and skipped, and the FIFO stays in step.
func TestConnBareLinesFromHooks(t *testing.T) {
	cfg := testConfig(t)
	var wire lockedBuffer
	cfg.WireLog = &wire
	c := dialT(t, cfg)
	drain(c)
	if _, err := c.Command(bg(), "set-hook", "-g", "session-created", "display-message -p hook-print-xyz"); err != nil {
		t.Fatal(err)
	}
	tmuxRun(t, cfg.Socket, "new-session", "-d", "-s", "other", "cat")
	waitFor(t, "hook output on the wire", func() bool {
		return strings.Contains(wire.String(), "< hook-print-xyz")
	})
	for i := 0; i < 20; i++ {
		want := fmt.Sprintf("after-hook-%d", i)
		if r, err := c.Command(bg(), "display-message", "-p", want); err != nil || r.Lines[0] != want {
			t.Fatalf("after hook output: %+v %v", r, err)
		}
	}
}

// A client that hangs on close is killed by pid after CloseTimeout.
func TestConnCloseKillsHungClient(t *testing.T) {
	cfg := testConfig(t)
	cfg.CloseTimeout = 300 * time.Millisecond
	c := dialT(t, cfg)
	drain(c)
	pid := c.Info().ClientPID
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err == nil {
		t.Fatal("Close of a hung client reported a clean exit")
	}
	if !waitGone(pid, 10*time.Second) {
		t.Fatal("hung client not killed")
	}
	noChildrenLeft(t)
}
