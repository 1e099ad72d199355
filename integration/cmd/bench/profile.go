package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// serverTimes reads the daemon's own request log (serve logs every request
// with its duration) and returns the server-side handling time per route, so
// transport and client cost can be told apart from the daemon's work.
func serverTimes(d *daemon) map[string]samples {
	f, err := os.Open(filepath.Join(d.home, "daemon.log"))
	if err != nil {
		return nil
	}
	defer f.Close()
	out := map[string]samples{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct {
			Msg      string  `json:"message"`
			Method   string  `json:"method"`
			Path     string  `json:"path"`
			Duration float64 `json:"duration"` // zerolog: milliseconds
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != "request" {
			continue
		}
		route := l.Path
		if strings.HasPrefix(route, "/v1/sessions/") {
			route = "/v1/sessions/{name}"
		}
		k := l.Method + " " + route
		out[k] = append(out[k], time.Duration(l.Duration*float64(time.Millisecond)))
	}
	return out
}

// serverTimesMarkdown is the table of serverTimes.
func serverTimesMarkdown(d *daemon) string {
	st := serverTimes(d)
	if len(st) == 0 {
		return ""
	}
	var keys []string
	for k := range st {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("Server-side handling time per route, from the daemon's own request log (the whole run, all sizes):\n\n")
	b.WriteString("| route | requests | p50 | p99 |\n|---|---|---|---|\n")
	for _, k := range keys {
		if strings.Contains(k, "verdicts") {
			continue // the follow stream lasts the whole run
		}
		fmt.Fprintf(&b, "| `%s` | %d | %s | %s |\n", k, len(st[k]), ms(st[k].p50()), ms(st[k].p99()))
	}
	return b.String()
}

// perfRecord samples the stacks of pid (pid 0: every process, to see which
// process the CPU goes to) with `perf record` (when -perf is set and perf
// exists) until the returned stop is called; the profile is for `perf report
// -i FILE` afterwards. stop interrupts perf by pid and waits.
func perfRecord(dir string, pid int, name string) func() {
	if dir == "" {
		return func() {}
	}
	path, err := exec.LookPath("perf")
	if err != nil {
		logf("perf not found; no profile for %s", name)
		return func() {}
	}
	out := filepath.Join(dir, name+".perf")
	target := []string{"-p", fmt.Sprint(pid)}
	if pid == 0 {
		target = []string{"-a"}
	}
	cmd := exec.Command(path, append(append([]string{"record", "-F", "1999", "-g"}, target...), "-o", out)...)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		logf("perf record: %v", err)
		return func() {}
	}
	time.Sleep(300 * time.Millisecond) // perf attaches
	return func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf("profile of %s: perf report -i %s", name, out)
	}
}

// withProfile runs f under perfRecord.
func withProfile(dir string, pid int, name string, f func() error) error {
	stop := perfRecord(dir, pid, name)
	defer stop()
	return f()
}
