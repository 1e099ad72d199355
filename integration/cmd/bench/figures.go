package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"
)

// baseline is a second private tmux server, with an open control connection
// (tmuxctl.Conn), on which tmux's own floor is measured.
type baseline struct {
	sock string
	conn *tmuxctl.Conn
	next int
}

func startBaseline(ctx context.Context, r *reaper) (*baseline, error) {
	dir, err := r.newHome()
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "t.sock")
	conn, err := tmuxctl.Dial(ctx, tmuxctl.Config{Socket: sock, ConfigFile: "/dev/null",
		Env: []string{markVar + "=" + dir}, CommandTimeout: 120 * time.Second})
	if err != nil {
		return nil, err
	}
	r.addServer(sock, conn.Info().PID)
	return &baseline{sock: sock, conn: conn}, nil
}

func (b *baseline) name(prefix string) string {
	b.next++
	return prefix + strconv.Itoa(b.next)
}

// ctlCreate is tmux's floor: one new-session over the open control connection.
func (b *baseline) ctlCreate(ctx context.Context, agent []string) error {
	args := append([]string{"new-session", "-d", "-P", "-F", "#{session_id}\t#{pane_pid}",
		"-s", b.name("c"), "-x", "200", "-y", "50", "--"}, agent...)
	_, err := b.conn.Command(ctx, args...)
	return err
}

// forkCreate is the fork way: new-session, three set-option and a has-session,
// each its own `tmux` process, as a shell script or a fork-per-call library does.
func (b *baseline) forkCreate(ctx context.Context, agent []string) error {
	args := append([]string{"new-session", "-d", "-P", "-F", "#{session_id}",
		"-s", b.name("f"), "-x", "200", "-y", "50", "--"}, agent...)
	out, err := forkTmux(ctx, b.sock, args...)
	if err != nil {
		return err
	}
	id := strings.TrimSpace(string(out))
	for _, tag := range [][2]string{{"@skc-generation", "1"}, {"@skc-reservation", randHex(16)}, {"@skc-identity", randHex(32)}} {
		if _, err := forkTmux(ctx, b.sock, "set-option", "-t", id, tag[0], tag[1]); err != nil {
			return err
		}
	}
	_, err = forkTmux(ctx, b.sock, "has-session", "-t", id)
	return err
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// timed runs f and returns how long it took.
func timed(f func() error) (time.Duration, error) {
	t0 := time.Now()
	err := f()
	return time.Since(t0), err
}

// createFigures measures figures 1 and 2: n creates on each side, the three
// sides interleaved and their order rotated, so drifts in load hit all three.
func createFigures(ctx context.Context, d *daemon, ctl, fork *baseline, n int) (api, floor, forked samples, err error) {
	sides := []func() error{
		func() error { _, err := d.create(ctx); return err },
		func() error { return ctl.ctlCreate(ctx, d.agent) },
		func() error { return fork.forkCreate(ctx, d.agent) },
	}
	out := []*samples{&api, &floor, &forked}
	for i := 0; i < n; i++ {
		for k := 0; k < 3; k++ {
			s := (i + k) % 3
			dt, err := timed(sides[s])
			if err != nil {
				return nil, nil, nil, fmt.Errorf("create figure, side %d, round %d: %w", s, i, err)
			}
			*out[s] = append(*out[s], dt)
		}
	}
	return api, floor, forked, ctx.Err()
}

// endResult is figure 5: from killing an agent to reading its ended verdict on
// the follow stream (read), and to the verdict's own @timestamp (stamp).
type endResult struct {
	read, stamp samples
	missed      int       // no verdict within 10 s
	marks       []endMark // each end with its session's tmux id (scaleEndBreakdown)
}

// endFigure kills the oldest session's agent n times, each time waiting for its
// ended verdict; with replace it creates a new session after each, so the
// server stays at the same size.
func endFigure(ctx context.Context, d *daemon, f *follower, n int, replace bool) (endResult, error) {
	var res endResult
	for i := 0; i < n && ctx.Err() == nil; i++ {
		s, ok := d.popOldest()
		if !ok {
			return res, errors.New("no live session left to end")
		}
		target := agentOf(ctx, s.PanePID)
		ch := f.expect(s.Name)
		t0 := time.Now()
		if err := syscall.Kill(target, syscall.SIGTERM); err != nil {
			f.forget(s.Name)
			return res, fmt.Errorf("kill agent %d of %s: %w", target, s.Name, err)
		}
		select {
		case e := <-ch:
			res.read = append(res.read, e.read.Sub(t0))
			res.stamp = append(res.stamp, e.stamp.Sub(t0))
			res.marks = append(res.marks, endMark{kill: t0, stamp: e.stamp, read: e.read, id: s.ID})
		case <-time.After(10 * time.Second):
			f.forget(s.Name)
			res.missed++
		case <-ctx.Done():
			return res, ctx.Err()
		}
		if replace {
			if _, err := d.create(ctx); err != nil {
				return res, err
			}
		}
	}
	return res, ctx.Err()
}

// agentOf waits (bounded) for the agent of a pane: the pane's process itself
// once the pane helper has exec'd it (its comm is no longer the helper's), or
// — a binary from before the exec, with a resident helper — the helper's
// child. Without either by the deadline, the pane's process is the target.
func agentOf(ctx context.Context, panePID int) int {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if comm := readTrim(fmt.Sprintf("/proc/%d/comm", panePID)); comm != "" && comm != helperComm {
			return panePID
		}
		if kids := children(panePID); len(kids) > 0 {
			return kids[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	return panePID
}

// helperComm is the pane helper's /proc/PID/comm (the binary's name).
const helperComm = "skc-supervisor"

// burst runs par copies of f at once (released together) and returns the wall
// time until the last one returned.
func burst(par int, f func() error) (time.Duration, error) {
	start := make(chan struct{})
	errs := make(chan error, par)
	var wg sync.WaitGroup
	for i := 0; i < par; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs <- f()
		}()
	}
	time.Sleep(5 * time.Millisecond) // let every goroutine reach the gate
	t0 := time.Now()
	close(start)
	wg.Wait()
	wall := time.Since(t0)
	close(errs)
	for err := range errs {
		if err != nil {
			return wall, err
		}
	}
	return wall, nil
}

// concurrentFigure is figure 6: rounds of par concurrent API creates of
// distinct identities, interleaved with rounds of par new-session commands
// pipelined on one control connection; rates in sessions/s.
func concurrentFigure(ctx context.Context, d *daemon, ctl *baseline, rounds, par int) (api, tmux []float64, err error) {
	for r := 0; r < rounds && ctx.Err() == nil; r++ {
		sides := []func() error{
			func() error { _, err := d.create(ctx); return err },
			func() error { return ctl.ctlCreate(ctx, d.agent) },
		}
		for k := 0; k < 2; k++ {
			s := (r + k) % 2
			wall, err := burst(par, sides[s])
			if err != nil {
				return api, tmux, fmt.Errorf("concurrent creates, side %d: %w", s, err)
			}
			rate := float64(par) / wall.Seconds()
			if s == 0 {
				api = append(api, rate)
			} else {
				tmux = append(tmux, rate)
			}
		}
	}
	return api, tmux, ctx.Err()
}

// listFmt is the list a fork-per-call tool would ask for (docs/tmux-facts.md §10's format).
const listFmt = "#{session_id}\t#{session_name}\t#{session_created}\t#{session_attached}\t#{@skc-identity}"

// listFigure is figure 4: GET /v1/sessions against a `tmux list-sessions -F`
// fork on the daemon's own tmux server (same sessions), interleaved.
func listFigure(ctx context.Context, d *daemon, reps int) (api, forked samples, apiBytes, forkBytes int, err error) {
	for i := 0; i < reps && ctx.Err() == nil; i++ {
		dt, err := timed(func() error { n, err := d.list(ctx); apiBytes = n; return err })
		if err != nil {
			return nil, nil, 0, 0, err
		}
		api = append(api, dt)
		dt, err = timed(func() error {
			out, err := forkTmux(ctx, d.tmuxSock, "list-sessions", "-F", listFmt)
			forkBytes = len(out)
			return err
		})
		if err != nil {
			return nil, nil, 0, 0, err
		}
		forked = append(forked, dt)
	}
	return api, forked, apiBytes, forkBytes, ctx.Err()
}

// lookupFigure is figure 3: GET /v1/sessions/{name} against a `tmux
// has-session -t =NAME` fork on the daemon's tmux server, interleaved, with
// GET /v1/ping in the same loop: the round trip of an HTTP request that does
// nothing, the floor any lookup through the API stands on.
func lookupFigure(ctx context.Context, d *daemon, reps int) (api, forked, ping samples, err error) {
	for i := 0; i < reps && ctx.Err() == nil; i++ {
		s := d.pick(i * 7)
		dt, err := timed(func() error { return d.lookup(ctx, s.Name) })
		if err != nil {
			return nil, nil, nil, err
		}
		api = append(api, dt)
		dt, err = timed(func() error { _, err := forkTmux(ctx, d.tmuxSock, "has-session", "-t", "="+s.Name); return err })
		if err != nil {
			return nil, nil, nil, err
		}
		forked = append(forked, dt)
		dt, err = timed(func() error { _, _, err := d.do(ctx, http.MethodGet, "/v1/ping", nil); return err })
		if err != nil {
			return nil, nil, nil, err
		}
		ping = append(ping, dt)
	}
	return api, forked, ping, ctx.Err()
}
