package backend_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/api"
	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

// createAgent makes one session running argv through the API.
func (d *daemon) createAgent(b *testing.B, id string, argv ...string) string {
	body, _ := json.Marshal(map[string]any{"state_dir": filepath.Join(d.home, "agents"),
		"session_id": id, "argv": argv, "cwd": "/"})
	code, resp, err := d.do(http.MethodPost, "/v1/sessions", body)
	if err != nil || code != http.StatusCreated {
		b.Fatalf("create: %v %d %s", err, code, resp)
	}
	var cr api.CreateResponse
	_ = json.Unmarshal(resp, &cr)
	return cr.Session.Name
}

// follow opens GET …/output?follow=1 and returns a channel of decoded data
// (a gap arrives as a nil slice) and a stop function.
func (d *daemon) follow(b *testing.B, name string) (<-chan []byte, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://skc/v1/sessions/"+name+"/output?follow=1", nil)
	resp, err := d.hc.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("follow: %v %v", resp, err)
	}
	out := make(chan []byte, 1024)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var l struct {
				Data string `json:"data_b64"`
			}
			_ = json.Unmarshal(sc.Bytes(), &l)
			data, _ := base64.StdEncoding.DecodeString(l.Data)
			select {
			case out <- data:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, cancel
}

// until reads ch until want has been seen (in the last bytes).
func until(b *testing.B, ch <-chan []byte, want []byte) int {
	var window []byte
	n := 0
	for !bytes.Contains(window, want) {
		data, ok := <-ch
		if !ok {
			b.Fatalf("stream ended before %q", want)
		}
		n += len(data)
		window = append(window, data...)
		if len(window) > 4096 {
			window = window[len(window)-len(want)-64:]
		}
	}
	return n
}

func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

// BenchmarkTalk measures BENCHMARKS.md's "Talking to agents" figures on the
// real stack in this process: screen via the API against a `tmux capture-pane
// -p` fork; input until the pane echoes it, via the API against `tmux
// send-keys` forks; output throughput of a follower against `cat` of the same
// bytes to a pipe.
//
//	go test -run '^$' -bench Talk -benchtime 200x ./api/backend/
func BenchmarkTalk(b *testing.B) {
	d := startDaemon(b, 0)
	name := d.createAgent(b, "talk-cat", "/bin/cat")
	b.Run("screen", func(b *testing.B) {
		var viaAPI, forked []time.Duration
		for i := 0; i < b.N; i++ {
			dt, _ := d.get(b, "/v1/sessions/"+name+"/screen")
			viaAPI = append(viaAPI, dt)
			forked = append(forked, d.fork(b, "capture-pane", "-p", "-t", "="+name+":"))
		}
		b.ReportMetric(float64(pct(viaAPI, .5).Microseconds()), "api-p50-µs")
		b.ReportMetric(float64(pct(forked, .5).Microseconds()), "fork-p50-µs")
		b.ReportMetric(float64(pct(forked, .5))/float64(pct(viaAPI, .5)), "fork/api")
	})
	b.Run("input-visible", func(b *testing.B) {
		ch, stop := d.follow(b, name)
		defer stop()
		var viaAPI, forked []time.Duration
		for i := 0; i < b.N; i++ {
			tok := "tok" + strconv.Itoa(i) + "x"
			body, _ := json.Marshal(api.InputRequest{Text: tok, Enter: true})
			t0 := time.Now()
			if code, resp, err := d.do(http.MethodPost, "/v1/sessions/"+name+"/input", body); err != nil || code != 200 {
				b.Fatalf("input: %v %d %s", err, code, resp)
			}
			until(b, ch, []byte(tok+"\r\n"+tok)) // the tty's echo, then cat's copy
			viaAPI = append(viaAPI, time.Since(t0))
			tok = "frk" + strconv.Itoa(i) + "x"
			t0 = time.Now()
			d.fork(b, "send-keys", "-t", "="+name+":", "-l", tok)
			d.fork(b, "send-keys", "-t", "="+name+":", "Enter")
			until(b, ch, []byte(tok+"\r\n"+tok))
			forked = append(forked, time.Since(t0))
		}
		b.ReportMetric(float64(pct(viaAPI, .5).Microseconds()), "api-p50-µs")
		b.ReportMetric(float64(pct(viaAPI, .99).Microseconds()), "api-p99-µs")
		b.ReportMetric(float64(pct(forked, .5).Microseconds()), "fork-p50-µs")
		b.ReportMetric(float64(pct(forked, .99).Microseconds()), "fork-p99-µs")
	})
}

// floodScript writes size bytes of text lines once it reads a line, then a
// marker.
func floodScript(size int) string {
	return fmt.Sprintf("read x; head -c %d /dev/zero | tr '\\0' 'x' | fold -w 76; echo FLOOD-DONE; sleep 100000", size)
}

// BenchmarkTalkOutput is the follower's throughput: a pane writes 20 MB of text
// lines; one follower reads the stream through the API. Reported: MB/s seen by
// the follower (until the marker), the share of bytes it got (the rest
// dropped), and the same bytes through `cat` to a pipe.
//
//	go test -run '^$' -bench TalkOutput -benchtime 3x ./api/backend/
func BenchmarkTalkOutput(b *testing.B) {
	const size = 20 << 20
	d := startDaemon(b, 0)
	for i := 0; i < b.N; i++ {
		name := d.createAgent(b, "flood-"+strconv.Itoa(i), "/bin/sh", "-c", floodScript(size))
		ch, stop := d.follow(b, name)
		t0 := time.Now()
		body, _ := json.Marshal(api.InputRequest{Enter: true})
		if code, resp, err := d.do(http.MethodPost, "/v1/sessions/"+name+"/input", body); err != nil || code != 200 {
			b.Fatalf("input: %v %d %s", err, code, resp)
		}
		got := until(b, ch, []byte("FLOOD-DONE"))
		dt := time.Since(t0)
		stop()
		t1 := time.Now()
		cmd := exec.Command("sh", "-c", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' 'x' | fold -w 76 | cat > /dev/null", size))
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		pipe := time.Since(t1)
		b.ReportMetric(float64(size)/dt.Seconds()/1e6, "follow-MB/s")
		b.ReportMetric(float64(got)/float64(size), "got/written")
		b.ReportMetric(float64(size)/pipe.Seconds()/1e6, "pipe-MB/s")
	}
}

// BenchmarkTalkFollowers100 is the daemon's CPU with 100 followers: 10 busy
// agents (each printing a line every 10 ms), 10 API followers each, for 10 s;
// against the same agents with no follower. Reported: CPU of this process
// (the daemon AND the 100 HTTP readers: an upper bound for the daemon) and of
// the tmux server, in % of one core.
//
//	go test -run '^$' -bench TalkFollowers100 -benchtime 1x ./api/backend/
func BenchmarkTalkFollowers100(b *testing.B) {
	d := startDaemon(b, 0)
	var names []string
	for i := 0; i < 10; i++ {
		names = append(names, d.createAgent(b, "busy-"+strconv.Itoa(i), "/bin/sh", "-c",
			"i=0; while :; do i=$((i+1)); echo \"busy line $i of an agent that keeps talking\"; sleep 0.01; done"))
	}
	window := 10 * time.Second
	for i := 0; i < b.N; i++ {
		selfIdle, tmuxIdle := cpuOver(b, d, window)
		var stops []func()
		var wg sync.WaitGroup
		for _, n := range names {
			for j := 0; j < 10; j++ {
				ch, stop := d.follow(b, n)
				stops = append(stops, stop)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range ch {
					}
				}()
			}
		}
		self, tmux := cpuOver(b, d, window)
		for _, s := range stops {
			s()
		}
		wg.Wait()
		b.ReportMetric(selfIdle, "daemon-cpu%-0")
		b.ReportMetric(self, "daemon-cpu%-100")
		b.ReportMetric(tmuxIdle, "tmux-cpu%-0")
		b.ReportMetric(tmux, "tmux-cpu%-100")
	}
}

// cpuOver is the CPU this process and the tmux server used over window, in % of one core.
func cpuOver(b *testing.B, d *daemon, window time.Duration) (self, tmux float64) {
	pid := tmuxPID(b, d)
	var r0, r1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	t0, w0 := procCPU(pid), time.Now()
	time.Sleep(window)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	t1, wall := procCPU(pid), time.Since(w0)
	used := time.Duration(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano())
	return 100 * used.Seconds() / wall.Seconds(), 100 * (t1 - t0).Seconds() / wall.Seconds()
}

func tmuxPID(b *testing.B, d *daemon) int {
	out, err := tmuxtest.Command("-S", d.tmuxSock, "display-message", "-p", "#{pid}").Output()
	if err != nil {
		b.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return pid
}

// procCPU is a process's utime+stime from /proc (clock ticks of 10 ms).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	u, _ := strconv.Atoi(f[11])
	s, _ := strconv.Atoi(f[12])
	return time.Duration(u+s) * 10 * time.Millisecond
}
