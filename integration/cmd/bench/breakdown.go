package main

import (
	"context"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// breakdown is where the time of a sequential create goes, read from the
// daemon's wire log (`serve --wire-log`): the tmux round trips of the saga and
// what is left for the daemon (HTTP, fence transactions, waiting for the pane
// helper to record its start).
type breakdown struct {
	n                  int
	api                samples // whole POST /v1/sessions
	newSession         samples // new-session sent → its %end
	helperGap          samples // new-session %end → first set-option sent (fence `spawned` + wait for the helper)
	tags               samples // first set-option sent → last set-option's %end (4 tags)
	outside            samples // api − (new-session sent → last tag %end): reserve, helper_invoked, publish, release, HTTP
	cmdRTT             map[string]samples
	relistsDuringBurst int
	ends               endBreakdown
}

// endBreakdown splits "agent killed → ended verdict" with the wire log.
type endBreakdown struct {
	toNotice samples // kill → tmux's %sessions-changed (the agent's exit, pane death, utempter)
	coalesce samples // notification → census re-list sent (the census' quiet period)
	relist   samples // the re-list's round trip
	daemon   samples // re-list done → verdict @timestamp (fence reads, the dead pane's exit, MarkEnded)
	stream   samples // verdict @timestamp → read on the follow stream
}

// endMark is one measured end: when the agent was killed and when its verdict
// was stamped and read.
type endMark struct {
	kill, stamp, read time.Time
	id                string // the session's tmux id ($N), when known
}

// breakdownFigure runs n sequential creates on a fresh daemon with a wire log.
func breakdownFigure(ctx context.Context, r *reaper, bin string, agent []string, n int) (breakdown, error) {
	bd := breakdown{n: n}
	d, err := startDaemon(ctx, r, bin, agent, true)
	if err != nil {
		return bd, err
	}
	f := d.follow(ctx)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		dt, err := timed(func() error { _, err := d.create(ctx); return err })
		if err != nil {
			return bd, err
		}
		bd.api = append(bd.api, dt)
	}
	time.Sleep(300 * time.Millisecond) // the census' trailing re-list lands in the log
	var marks []endMark
	for i := 0; i < n && ctx.Err() == nil; i++ {
		s, _ := d.popOldest()
		target := agentOf(ctx, s.PanePID)
		ch := f.expect(s.Name)
		t0 := time.Now()
		if err := syscall.Kill(target, syscall.SIGTERM); err != nil {
			return bd, err
		}
		select {
		case e := <-ch:
			marks = append(marks, endMark{kill: t0, stamp: e.stamp, read: e.read})
		case <-time.After(10 * time.Second):
			f.forget(s.Name)
		}
		time.Sleep(100 * time.Millisecond) // one end at a time in the log
	}
	cmds, notes, err := readWire(filepath.Join(d.home, "wire.log"))
	if err != nil {
		return bd, err
	}
	bd.attribute(cmds)
	bd.attributeEnds(marks, cmds, notes)
	return bd, nil
}

// attributeEnds finds, for each end, tmux's first %sessions-changed after the
// kill, the census' next list-sessions and the verdict.
func (bd *breakdown) attributeEnds(marks []endMark, cmds []wireCmd, notes []time.Time) {
	for _, m := range marks {
		var notice time.Time
		for _, t := range notes {
			if t.After(m.kill) {
				notice = t
				break
			}
		}
		var rl *wireCmd
		for i := range cmds {
			if cmds[i].verb == "list-sessions" && !cmds[i].sent.Before(notice) && !cmds[i].done.IsZero() {
				rl = &cmds[i]
				break
			}
		}
		if notice.IsZero() || rl == nil || m.stamp.Before(rl.done) {
			continue
		}
		e := &bd.ends
		e.toNotice = append(e.toNotice, notice.Sub(m.kill))
		e.coalesce = append(e.coalesce, rl.sent.Sub(notice))
		e.relist = append(e.relist, rl.done.Sub(rl.sent))
		e.daemon = append(e.daemon, m.stamp.Sub(rl.done))
		e.stream = append(e.stream, m.read.Sub(m.stamp))
	}
}

// wireCmd is one command the daemon sent and the end of its reply.
type wireCmd struct {
	verb, line string
	sent, done time.Time
}

// readWire pairs each sent command line with its reply block (flags 1, FIFO)
// and lists the %sessions-changed notifications, from readWireEvents.
func readWire(path string) ([]wireCmd, []time.Time, error) {
	evs, err := readWireEvents(path)
	if err != nil {
		return nil, nil, err
	}
	var all []wireCmd
	var notes []time.Time
	for _, e := range evs {
		switch {
		case e.cmd != nil:
			all = append(all, *e.cmd)
		case e.note == "%sessions-changed":
			notes = append(notes, e.at)
		}
	}
	return all, notes, nil
}

func splitWire(line string) (time.Time, string, string, bool) {
	f := strings.SplitN(line, " ", 3)
	if len(f) != 3 {
		return time.Time{}, "", "", false
	}
	ts, err := time.Parse(time.RFC3339Nano, f[0])
	return ts, f[1], f[2], err == nil
}

// attribute splits each create into its tmux steps: new-session, then the
// four set-option of that session (pipelined, so in any order on the wire).
// The census admission reads nothing from tmux (census.AdmitCreated).
func (bd *breakdown) attribute(cmds []wireCmd) {
	bd.cmdRTT = map[string]samples{}
	k := 0
	for i, c := range cmds {
		if !c.done.IsZero() {
			bd.cmdRTT[c.verb] = append(bd.cmdRTT[c.verb], c.done.Sub(c.sent))
		}
		if c.verb != "new-session" || !strings.Contains(c.line, "helper") || c.done.IsZero() || k >= len(bd.api) {
			continue
		}
		first, last, n := tagSpan(cmds, i+1)
		if n != 4 {
			continue
		}
		bd.newSession = append(bd.newSession, c.done.Sub(c.sent))
		bd.helperGap = append(bd.helperGap, first.Sub(c.done))
		bd.tags = append(bd.tags, last.Sub(first))
		bd.outside = append(bd.outside, bd.api[k]-last.Sub(c.sent))
		k++
	}
	bd.relistsDuringBurst = len(bd.cmdRTT["list-sessions"])
}

// tagSpan finds the four @skc- set-options after index from (before the next
// new-session): the first one sent, the last reply, and how many.
func tagSpan(cmds []wireCmd, from int) (first, last time.Time, n int) {
	for j := from; j < len(cmds) && n < 4; j++ {
		t := cmds[j]
		if t.verb == "new-session" {
			break
		}
		if t.verb != "set-option" || !strings.Contains(t.line, "@skc-") || t.done.IsZero() {
			continue
		}
		if n == 0 || t.sent.Before(first) {
			first = t.sent
		}
		if t.done.After(last) {
			last = t.done
		}
		n++
	}
	return first, last, n
}

// verbs lists the measured verbs, most frequent first.
func (bd *breakdown) verbs() []string {
	var vs []string
	for v := range bd.cmdRTT {
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool { return len(bd.cmdRTT[vs[i]]) > len(bd.cmdRTT[vs[j]]) })
	return vs
}
