package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// scaleEndSteps splits each measured end of the scale run ("agent killed →
// ended verdict") into the steps the daemon's wire log shows (`serve
// --wire-log`, -scale-wire): from the kill to the end's pipeline (capture-pane,
// kill-session, has-session) being sent — the pidfd's wake, the stop's fence
// write and proof, and, where the exit was not read from the process itself,
// tmux's reap and the census's read by id of the session, measured on its own
// — then the pipeline's round trip, and from its answer to the verdict
// (MarkEnded) and to the follow stream.
type scaleEndSteps struct {
	toPipeline, read, pipeline, finish, stream samples
	pokes, subLines                            int // reap pokes and census subscription lines inside the measured ends
	unmatched                                  int
	// listed and clear split the pipeline's round trips by whether a
	// list-sessions (the census's poll above 1,000 sessions, or a full
	// re-list) was in tmux's hands at some moment of it.
	listed, clear samples
	// captured is the pipeline's start to its capture-pane's answer: the
	// part of the round trip an end's output tail needs (the rest is the
	// removal and its proof).
	captured samples
}

// wireEvent is one line of the wire log: a command sent (with its reply's
// end filled in) or a notification received.
type wireEvent struct {
	cmd  *wireCmd
	note string
	at   time.Time
}

// readWireEvents reads the whole wire log in order.
func readWireEvents(path string) ([]wireEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var evs []wireEvent
	var fifo []*wireCmd
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		ts, dir, rest, ok := splitWire(sc.Text())
		if !ok {
			continue
		}
		switch {
		case dir == ">":
			c := &wireCmd{verb: strings.Trim(strings.SplitN(rest, " ", 2)[0], `"'`), line: rest, sent: ts}
			fifo = append(fifo, c)
			evs = append(evs, wireEvent{cmd: c, at: ts})
		case (strings.HasPrefix(rest, "%end ") || strings.HasPrefix(rest, "%error ")) && strings.HasSuffix(rest, " 1") && len(fifo) > 0:
			fifo[0].done = ts
			fifo = fifo[1:]
		case strings.HasPrefix(rest, "%"):
			evs = append(evs, wireEvent{note: strings.SplitN(rest, " ", 2)[0], at: ts})
		}
	}
	return evs, sc.Err()
}

// attributeScaleEnds fills the steps of each end from the wire log's events.
func attributeScaleEnds(marks []endMark, evs []wireEvent) scaleEndSteps {
	var st scaleEndSteps
	lists := listCmds(evs)
	for _, m := range marks {
		if m.id == "" || !st.one(m, evs, lists) {
			st.unmatched++
		}
	}
	return st
}

// one attributes one end; false when the wire log does not show its steps.
func (st *scaleEndSteps) one(m endMark, evs []wireEvent, lists []*wireCmd) bool {
	names := regexp.MustCompile(`\` + m.id + `([^0-9]|$)`)
	var first, lastRead, capture, kill, has *wireCmd
	for _, e := range evs {
		if e.at.Before(m.kill) || e.at.After(m.stamp) {
			continue
		}
		if e.cmd == nil {
			if e.note == "%subscription-changed" {
				st.subLines++
			}
			continue
		}
		c := e.cmd
		if c.verb == "run-shell" && kill == nil {
			st.pokes++
		}
		if !names.MatchString(c.line) {
			continue
		}
		switch {
		case c.verb == "kill-session":
			kill = c
		case kill != nil && c.verb == "has-session":
			has = c
		case c.verb == "capture-pane":
			capture = c
		case kill == nil:
			if first == nil {
				first = c
			}
			lastRead = c
		}
	}
	if kill == nil || has == nil || has.done.IsZero() {
		return false
	}
	pipe := kill.sent
	if capture != nil && capture.sent.Before(pipe) {
		pipe = capture.sent
	}
	if first != nil && !lastRead.done.IsZero() {
		st.read = append(st.read, lastRead.done.Sub(first.sent))
	}
	st.toPipeline = append(st.toPipeline, pipe.Sub(m.kill))
	st.pipeline = append(st.pipeline, has.done.Sub(pipe))
	if capture != nil && !capture.done.IsZero() {
		st.captured = append(st.captured, capture.done.Sub(pipe))
	}
	if listDuring(lists, pipe, has.done) {
		st.listed = append(st.listed, has.done.Sub(pipe))
	} else {
		st.clear = append(st.clear, has.done.Sub(pipe))
	}
	st.finish = append(st.finish, m.stamp.Sub(has.done))
	st.stream = append(st.stream, m.read.Sub(m.stamp))
	return true
}

// listCmds picks the wire log's list-sessions commands, in the order sent.
func listCmds(evs []wireEvent) []*wireCmd {
	var out []*wireCmd
	for _, e := range evs {
		if e.cmd != nil && e.cmd.verb == "list-sessions" {
			out = append(out, e.cmd)
		}
	}
	return out
}

// listDuring reports whether one of lists was sent before to and answered
// after from (or not at all): tmux's one thread had it to evaluate while the
// pipeline between from and to waited.
func listDuring(lists []*wireCmd, from, to time.Time) bool {
	for _, c := range lists {
		if c.sent.After(to) {
			return false
		}
		if c.done.IsZero() || c.done.After(from) {
			return true
		}
	}
	return false
}

// scaleEndRows adds the breakdown to the report.
func scaleEndRows(rep *report, wirePath string, ends endResult) {
	evs, err := readWireEvents(wirePath)
	if err != nil {
		rep.errs = append(rep.errs, "wire log unreadable: "+err.Error())
		return
	}
	st := attributeScaleEnds(ends.marks, evs)
	step := func(name string, s samples) {
		rep.add(row{fig: "5a. end step: " + name + fmt.Sprintf(" (n=%d)", len(s)),
			ours: fmt.Sprintf("p50 %s / p90 %s / p99 %s", ms(s.p50()), ms(s.q(0.9)), ms(s.p99())),
			base: "—", ratio: "—", goal: "—", met: "info"})
	}
	step("kill → the end's pipeline sent (the exit seen, the stop's fence write and proof; a census read where one was made)", st.toPipeline)
	step("of which the census's read by id of the session, first sent → last answered (ends that had one)", st.read)
	step("the end's pipeline (capture-pane, kill-session, has-session) round trip", st.pipeline)
	step("of which the capture-pane answered (the pipeline sent → its first reply)", st.captured)
	step("of which with a list-sessions in flight in tmux (a census poll or re-list)", st.listed)
	step("of which with none", st.clear)
	step("has-session answered → verdict @timestamp (MarkEnded)", st.finish)
	step("verdict @timestamp → read on the follow stream", st.stream)
	rep.extra = append(rep.extra, fmt.Sprintf("End steps: %d ends matched in the wire log, %d not; %d reap pokes and %d census subscription lines inside the measured ends.",
		len(st.toPipeline), st.unmatched, st.pokes, st.subLines))
}
