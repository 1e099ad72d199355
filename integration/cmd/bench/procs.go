package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/skc-supervisor/skc-supervisor/proctree"
)

// markVar is put in the environment of every daemon and tmux server the bench
// starts; tmux copies it into every pane, so helpers and agents carry it too.
// The final sweep kills by pid exactly the processes that carry our mark, which
// guards against pid reuse and never touches anyone else's processes.
const markVar = "SKCB_MARK"

// reaper remembers everything the bench started so that it can be stopped, by
// pid, at the end — also after an error, a panic or a signal.
type reaper struct {
	mu      sync.Mutex
	daemons []*exec.Cmd
	servers []tmuxServer
	homes   []string // temp dirs; each is also a process mark
	closers []func() // run after the daemons stopped (a PostgreSQL server they used)
	log     func(format string, args ...any)
}

// addCloser registers f to run in teardown once the daemons are stopped and
// before the tmux servers are killed: a database the daemons used outlives
// them, so that none of them sees it vanish while shutting down.
func (r *reaper) addCloser(f func()) {
	r.mu.Lock()
	r.closers = append(r.closers, f)
	r.mu.Unlock()
}

// tmuxServer is a tmux server we caused to start: its socket and pid.
type tmuxServer struct {
	sock string
	pid  int
}

func (r *reaper) addHome(dir string) {
	r.mu.Lock()
	r.homes = append(r.homes, dir)
	r.mu.Unlock()
}

func (r *reaper) addDaemon(c *exec.Cmd) {
	r.mu.Lock()
	r.daemons = append(r.daemons, c)
	r.mu.Unlock()
}

func (r *reaper) addServer(sock string, pid int) {
	r.mu.Lock()
	r.servers = append(r.servers, tmuxServer{sock: sock, pid: pid})
	r.mu.Unlock()
}

// newHome makes a short private temp dir (socket paths stay far below 107 bytes).
func (r *reaper) newHome() (string, error) {
	dir, err := os.MkdirTemp("", "skcb")
	if err != nil {
		return "", err
	}
	r.addHome(dir)
	return dir, nil
}

// teardown stops daemons (SIGTERM, then SIGKILL), kills tmux servers
// (kill-server, then SIGKILL by pid), sweeps every marked process and removes
// the homes. It reports what it did, for the "clean teardown" figure.
func (r *reaper) teardown() teardownReport {
	r.mu.Lock()
	daemons, servers, homes, closers := r.daemons, r.servers, r.homes, r.closers
	r.daemons, r.servers, r.homes, r.closers = nil, nil, nil, nil
	r.mu.Unlock()
	var rep teardownReport
	t0 := time.Now()
	for _, c := range daemons {
		stopDaemon(c)
	}
	rep.daemons = time.Since(t0)
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
	t1 := time.Now()
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Add(1)
		go func() { defer wg.Done(); killServer(s) }()
	}
	wg.Wait()
	rep.servers = time.Since(t1)
	t2 := time.Now()
	for _, h := range homes {
		rep.swept += sweep(h)
		removeCgroups(h)
	}
	rep.sweep = time.Since(t2)
	for _, h := range homes {
		if err := os.RemoveAll(h); err == nil {
			rep.homesRemoved++
		}
	}
	rep.homes = len(homes)
	rep.total = time.Since(t0)
	return rep
}

// retire stops one daemon and kills its tmux server and every process of its
// home now, instead of in teardown (the home itself stays until teardown):
// a mode that is done with a daemon gives its ptys back to the machine.
func (r *reaper) retire(d *daemon) {
	r.mu.Lock()
	r.daemons = slices.DeleteFunc(r.daemons, func(c *exec.Cmd) bool { return c == d.cmd })
	r.servers = slices.DeleteFunc(r.servers, func(s tmuxServer) bool { return s.sock == d.tmuxSock })
	r.mu.Unlock()
	stopDaemon(d.cmd)
	killServer(tmuxServer{sock: d.tmuxSock, pid: d.serverPID})
	sweep(d.home)
	removeCgroups(d.home)
}

// removeCgroups removes the empty generation cgroups of home's daemon and its
// cgroup base: a daemon stopped with thousands of sessions leaves their
// cgroups (the next daemon of that home would sweep them; none comes), and
// every scale run left ~3,900 on the machine, slowing the kernel's cgroup
// work for whatever ran next.
func removeCgroups(home string) {
	if base, err := proctree.BaseFor(home); err == nil {
		proctree.RemoveBaseTree(base)
	}
}

// teardownReport is what teardown did and how long each step took.
type teardownReport struct {
	daemons, servers, sweep, total time.Duration
	swept                          int // processes still alive after the servers died (killed by pid)
	homes, homesRemoved            int
}

// stopDaemon sends SIGTERM (the daemon finishes in-flight creates within 10 s)
// and SIGKILL after 15 s.
func stopDaemon(c *exec.Cmd) {
	if c.Process == nil {
		return
	}
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	_ = c.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = c.Process.Kill()
		<-done
	}
}

// killServer asks the server to exit (kill-server waits for a utempter `del` per
// live pane: ~50 s at 4,000 panes, docs/tmux-facts.md §10), then SIGKILLs it by pid.
func killServer(s tmuxServer) {
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "tmux", "-S", s.sock, "kill-server")
	cmd.Env = tmuxEnv()
	_ = cmd.Run()
	if s.pid > 0 && !waitGone(s.pid, 10*time.Second) {
		_ = syscall.Kill(s.pid, syscall.SIGKILL)
		waitGone(s.pid, 10*time.Second)
	}
}

// sweep SIGKILLs every live process carrying mark and waits (bounded) until
// they are gone; it returns how many it found.
func sweep(mark string) int {
	pids := marked(mark)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(marked(mark)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	return len(pids)
}

// marked lists live, non-zombie processes whose environment holds markVar=mark.
func marked(mark string) []int {
	want := []byte(markVar + "=" + mark + "\x00")
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || zombie(pid) {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(append(env, 0), want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// waitGone polls until pid no longer exists (or is a zombie) or d passes.
func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if syscall.Kill(pid, 0) != nil || zombie(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tmuxEnv is our environment without TMUX (we must never talk to a tmux we
// happen to run inside) and without SKC_* settings.
func tmuxEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "TMUX=") || strings.HasPrefix(kv, "TMUX_PANE=") || strings.HasPrefix(kv, "SKC_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// children returns the pids of pid's children (its main thread's, which is
// where a single-threaded fork in the helper's runAgent lands, and every
// other thread's: Go forks from any thread).
func children(pid int) []int {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// statusKB reads a "Name:   N kB" field of /proc/pid/status.
func statusKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, errors.New(field + " not found")
}

// rollupKB reads a field of /proc/pid/smaps_rollup (Pss, Private_Dirty …).
func rollupKB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// forkTmux runs one `tmux -S sock args…` process and returns its stdout.
func forkTmux(ctx context.Context, sock string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "tmux", append([]string{"-S", sock}, args...)...)
	cmd.Env = forkEnv
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("tmux %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// forkEnv is computed once: building it per fork would bill the fork side for
// our own bookkeeping.
var forkEnv = tmuxEnv()
