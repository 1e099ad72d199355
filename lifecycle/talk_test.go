package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// echoSession starts an echo agent (talk_agent_test.go) and waits until its
// terminal is raw; it returns the session's Ref and the file of bytes it read.
func (e *env) echoSession(t *testing.T, name string, extra ...string) (Ref, string) {
	t.Helper()
	file := filepath.Join(e.home, name+".in")
	_, res := e.create(t, name, append([]string{"agent", "echo", file}, extra...)...)
	waitFor(t, "echo agent ready", func() bool {
		_, err := os.Stat(file + ".ready")
		return err == nil
	})
	return Ref{Name: res.Session.Name}, file
}

// readFile waits until file holds want bytes and returns them.
func readFile(t *testing.T, file string, n int) []byte {
	t.Helper()
	var b []byte
	waitFor(t, "agent input", func() bool {
		b, _ = os.ReadFile(file)
		return len(b) >= n
	})
	return b
}

func codeOf(err error) string { return verdict.CodeOf(err) }

// collect reads sub until its data contains want.
func collect(t *testing.T, sub *OutputSub, want []byte) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var got []byte
	for !bytes.Contains(got, want) {
		items, ok := sub.Next(ctx)
		if !ok {
			t.Fatalf("output stream ended before %q; got %q", want, got)
		}
		for _, it := range items {
			got = append(got, it.Data...)
		}
	}
	return got
}

// TestTalkHostileRoundTrip: text that looks like tmux formats, key names and
// shell, control characters and non-ASCII arrive at the agent byte for byte, and
// come back on the screen and in the output stream.
func TestTalkHostileRoundTrip(t *testing.T) {
	e := startEnv(t, "", "", false)
	ref, file := e.echoSession(t, "hostile")
	ctx := context.Background()
	sub, err := e.m.FollowOutput(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	text := `#{pane_pid} #(id) C-c $(id) ; \ "q' ~x -l é日本🎉` + "\x01\x03\x1b[A\x7f\t"
	if err := e.m.Input(ctx, ref, Input{Text: text, Enter: true}); err != nil {
		t.Fatal(err)
	}
	want := text + "\r"
	if got := readFile(t, file, len(want)); string(got) != want {
		t.Fatalf("agent read %q, want %q", got, want)
	}
	printable := `#{pane_pid} #(id) C-c $(id) ; \ "q' ~x -l é日本🎉`
	collect(t, sub, []byte(printable+"^A^C^[[A^?^I"))
	waitFor(t, "screen shows the text", func() bool {
		s, err := e.m.Screen(ctx, ref, 0, false)
		return err == nil && strings.Contains(strings.Join(s.Lines, "\n"), printable)
	})
	// A multi-line text is pasted: unbracketed here (the agent did not ask).
	before := len(want)
	if err := e.m.Input(ctx, ref, Input{Text: "one\ntwo\n"}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, file, before+8); string(got[before:]) != "one\ntwo\n" {
		t.Fatalf("paste read %q", got[before:])
	}
	// Keys are key names.
	if err := e.m.Input(ctx, ref, Input{Keys: []string{"C-c", "Up", "a", "M-x"}}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, file, before+8+1+3+1+2); string(got[before+8:]) != "\x03\x1b[Aa\x1bx" {
		t.Fatalf("keys read %q", got[before+8:])
	}
}

func TestTalkBracketedPaste(t *testing.T) {
	e := startEnv(t, "", "", false)
	ref, file := e.echoSession(t, "paste", "bp")
	if err := e.m.Input(context.Background(), ref, Input{Text: "a\nb"}); err != nil {
		t.Fatal(err)
	}
	want := "\x1b[200~a\nb\x1b[201~"
	if got := readFile(t, file, len(want)); string(got) != want {
		t.Fatalf("agent read %q, want %q", got, want)
	}
	// A CR is a line end too, and a text's own markers cannot end the paste
	// early (what followed would be typed: found outside-in).
	if err := e.m.Input(context.Background(), ref, Input{Text: "c\rd\x1b[201~rm -rf x\n"}); err != nil {
		t.Fatal(err)
	}
	next := "\x1b[200~c\rdrm -rf x\n\x1b[201~"
	if got := readFile(t, file, len(want)+len(next)); string(got[len(want):]) != next {
		t.Fatalf("agent read %q, want %q", got[len(want):], next)
	}
}

// TestTalkBadInput: refusals name their field and send nothing.
func TestTalkBadInput(t *testing.T) {
	e := startEnv(t, "", "", false)
	ref, file := e.echoSession(t, "bad")
	ctx := context.Background()
	cases := []struct {
		in    Input
		field string
	}{
		{Input{Text: "a\x00b"}, "text"},
		{Input{Text: "a\xffb"}, "text"},
		{Input{Text: strings.Repeat("x", MaxInputText+1)}, "text"},
		{Input{Keys: []string{"Enter", "NoSuchKey"}}, "keys"},
		{Input{Keys: []string{"C-C-c"}}, "keys"},
		{Input{Keys: []string{"#{pane_pid}"}}, "keys"},
		{Input{Text: "x", Keys: []string{"Enter"}}, "keys"},
		{Input{}, "text"},
	}
	for _, c := range cases {
		err := e.m.Input(ctx, ref, c.in)
		var ve *verdict.Error
		if !errors.As(err, &ve) || ve.Code != verdict.CodeInvalidRequest || ve.Details["field"] != c.field {
			t.Errorf("%+.40v: got %v, want invalid_request on %s", c.in, err, c.field)
		}
	}
	if _, err := e.m.Screen(ctx, ref, MaxScreenLines+1, false); codeOf(err) != verdict.CodeInvalidRequest {
		t.Errorf("lines too large: %v", err)
	}
	if err := e.m.Input(ctx, Ref{Name: "no-such-session"}, Input{Text: "x"}); codeOf(err) != verdict.CodeNotFound {
		t.Errorf("unknown session: %v", err)
	}
	if b, _ := os.ReadFile(file); len(b) != 0 {
		t.Fatalf("the agent read %q from refused inputs", b)
	}
}

// TestTalkConcurrentSenders: 8 senders each send a distinct 1 KiB block (a
// control byte in the middle makes each block several tmux commands); every
// block arrives whole.
func TestTalkConcurrentSenders(t *testing.T) {
	e := startEnv(t, "", "", false)
	ref, file := e.echoSession(t, "senders")
	blocks := make([]string, 8)
	for i := range blocks {
		c := string(rune('a' + i))
		blocks[i] = strings.Repeat(c, 511) + "\x01" + strings.Repeat(c, 512)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(blocks))
	for _, b := range blocks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- e.m.Input(context.Background(), ref, Input{Text: b})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got := string(readFile(t, file, 8*1024))
	if len(got) != 8*1024 {
		t.Fatalf("read %d bytes", len(got))
	}
	seen := map[string]bool{}
	for i := 0; i < len(got); i += 1024 {
		chunk := got[i : i+1024]
		found := false
		for _, b := range blocks {
			if chunk == b && !seen[b] {
				seen[b], found = true, true
			}
		}
		if !found {
			t.Fatalf("block at %d is not one whole block: %.80q", i, chunk)
		}
	}
}

// TestTalkSlowFollower: a follower that never reads while the agent writes 100
// MB: the agent finishes, the daemon's heap stays bounded, and the follower is
// told what it lost.
func TestTalkSlowFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 100 MB through tmux")
	}
	e := startEnv(t, "", "", false)
	done := filepath.Join(e.home, "flood.done")
	start := filepath.Join(e.home, "flood.go")
	_, res := e.create(t, "flood", "agent", "flood", "100000000", done, start)
	ref := Ref{Name: res.Session.Name}
	slow, err := e.m.FollowOutput(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	_ = os.WriteFile(start, nil, 0o600)
	var peak uint64
	var ms runtime.MemStats
	waitFor100MB(t, done, func() {
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
	})
	// Bound: the follower's buffer (1 MiB) plus tmuxctl's read buffers and the
	// rest of the daemon; far below the 100 MB written.
	if peak > 48<<20 {
		t.Errorf("heap in use peaked at %d MiB while the agent wrote 100 MB", peak>>20)
	}
	var data, dropped int64
	unknown := false
	for {
		// Everything queued or lost is ready now; a Next that waits 5 s has
		// found nothing more.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		items, ok := slow.Next(ctx)
		cancel()
		if !ok {
			break
		}
		for _, it := range items {
			data += int64(len(it.Data))
			dropped += it.Dropped
			unknown = unknown || it.Paused
		}
	}
	// 100 MB in 64-byte lines; the pane's terminal turns each LF into CR LF.
	const written = 100000000 / 64 * 65
	switch {
	// How much arrives after the agent finished depends on how far tmux lagged
	// behind it (it keeps feeding the follower while the test drains the
	// queue), so the delivered amount is not bounded here; the memory bound is
	// the heap check above.
	case dropped == 0 || data >= written:
		t.Fatalf("follower got %d bytes and was told of %d dropped", data, dropped)
	case !unknown && data+dropped != written:
		// Without a tmux pause, every byte is either delivered or counted.
		t.Fatalf("got %d + dropped %d = %d bytes, the pane wrote %d", data, dropped, data+dropped, written)
	}
	t.Logf("peak heap %d MiB; follower got %d bytes, told of %d dropped (tmux paused: %v)",
		peak>>20, data, dropped, unknown)
}

// waitFor100MB waits (up to 10 minutes: 100 MB through tmux on a loaded
// machine) for done to exist, sampling as it goes.
func waitFor100MB(t *testing.T, done string, sample func()) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		sample()
		if _, err := os.Stat(done); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent did not finish writing")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTalkWaitText: wait --text returns once the agent shows the text, not on
// other output.
func TestTalkWaitText(t *testing.T) {
	e := startEnv(t, "", "", false)
	ref, _ := e.echoSession(t, "waittext")
	ctx := context.Background()
	got := make(chan error, 1)
	go func() {
		_, err := e.m.Wait(ctx, ref, WaitRequest{Text: "MARK-42"})
		got <- err
	}()
	if err := e.m.Input(ctx, ref, Input{Text: "other text", Enter: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "screen shows the other text", func() bool {
		s, err := e.m.Screen(ctx, ref, 0, false)
		return err == nil && strings.Contains(strings.Join(s.Lines, "\n"), "other text")
	})
	select {
	case err := <-got:
		t.Fatalf("wait returned (%v) before the text was shown", err)
	default:
	}
	if err := e.m.Input(ctx, ref, Input{Text: "MARK-42"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("wait --text did not return")
	}
	// Already shown: returns at once from the screen.
	if res, err := e.m.Wait(ctx, ref, WaitRequest{Text: "MARK-42", Timeout: time.Minute}); err != nil || res.Status != "text" {
		out, xerr := execTmuxHome(e.home, "list-clients", "-F", "#{client_pid} #{client_flags}")
		t.Fatalf("second wait: %v %v; tmux now: %q %v", res, err, out, xerr)
	}
}

// TestTalkWaitTextWrapped: text already on the screen across a wrap (the
// end of a line longer than the pane is wide) is found by the screen read,
// as it is in the stream when written after the wait began: the read did not
// join wrapped rows, so the answer depended on timing. Found outside-in.
func TestTalkWaitTextWrapped(t *testing.T) {
	e := startEnv(t, "", "", false)
	_, res := e.create(t, "wrapped", "agent", "wrap")
	ref, ctx := Ref{Name: res.Session.Name}, context.Background()
	waitFor(t, "the line shown, wrapped", func() bool {
		s, err := e.m.Screen(ctx, ref, 0, false)
		joined := strings.Join(s.Lines, "\n")
		return err == nil && strings.Contains(joined, "WRAP\nMARK")
	})
	// The timeout only bounds a failure: the text was written before the
	// wait, so no output will come to find it in.
	if r, err := e.m.Wait(ctx, ref, WaitRequest{Text: "WRAPMARK", Timeout: 20 * time.Second}); err != nil || r.Status != "text" {
		t.Fatalf("wait for text wrapped on the screen: %+v %v", r, err)
	}
}

// TestTalkWaitIdle: wait --idle returns once the agent stops writing. It may
// return earlier only if the output really paused for the idle time (a loaded
// machine can stall the agent): an observer on the same feed must then have
// seen such a gap, else it is a bug.
func TestTalkWaitIdle(t *testing.T) {
	e := startEnv(t, "", "", false)
	stop := filepath.Join(e.home, "tick.stop")
	_, res := e.create(t, "idle", "agent", "tick", stop)
	ref := Ref{Name: res.Session.Name}
	obs, err := e.m.FollowOutput(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	const idle = 300 * time.Millisecond
	var mu sync.Mutex
	stopped := false
	type answer struct {
		err          error
		at           time.Time
		afterStopped bool
	}
	got := make(chan answer, 1)
	waitFor(t, "ticking", func() bool {
		s, err := e.m.Screen(context.Background(), ref, 0, false)
		return err == nil && strings.Contains(strings.Join(s.Lines, "\n"), "tick 2")
	})
	begun := time.Now()
	go func() {
		_, err := e.m.Wait(context.Background(), ref, WaitRequest{Idle: idle})
		at := time.Now()
		mu.Lock()
		got <- answer{err: err, at: at, afterStopped: stopped}
		mu.Unlock()
	}()
	waitFor(t, "ticks", func() bool {
		s, err := e.m.Screen(context.Background(), ref, 0, false)
		return err == nil && strings.Contains(strings.Join(s.Lines, "\n"), "tick 40")
	})
	mu.Lock()
	stopped = true
	_ = os.WriteFile(stop, nil, 0o600)
	mu.Unlock()
	var a answer
	select {
	case a = <-got:
	case <-time.After(60 * time.Second):
		t.Fatal("wait --idle did not return")
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.afterStopped {
		return
	}
	checkIdleGap(t, obs, begun, a.at, idle)
}

// checkIdleGap: a wait --idle that returned at `at` while the agent was still
// ticking is right only if the feed shows a gap of at least idle between begun
// and at.
func checkIdleGap(t *testing.T, obs *OutputSub, begun, at time.Time, idle time.Duration) {
	t.Helper()
	items, _ := obs.take()
	last, gap := begun, time.Duration(0)
	for _, it := range items {
		if it.Data == nil || it.At.After(at) {
			continue
		}
		if it.At.After(last) {
			gap = max(gap, it.At.Sub(last))
			last = it.At
		}
	}
	gap = max(gap, at.Sub(last))
	if gap < idle {
		t.Fatalf("wait --idle returned while the agent was writing (longest gap %v < %v)", gap, idle)
	}
	t.Logf("the agent stalled for %v while ticking; the early return was right", gap)
}

// TestTalkWaitExitAndGone: wait --exit returns the ended verdict, also when
// it starts after the end (CONTRACT: "for --exit: 0 with the ended verdict");
// an idle wait on a gone session, and an exit wait on a name that never was,
// are not_found.
func TestTalkWaitExitAndGone(t *testing.T) {
	e := startEnv(t, "", "", false)
	ref, _ := e.echoSession(t, "waitexit")
	id, _ := e.identity("waitexit")
	byID := Ref{Identity: &id} // found also when the kill wins the race with the wait
	got := make(chan WaitResult, 1)
	go func() {
		res, err := e.m.Wait(context.Background(), byID, WaitRequest{Exit: true})
		if err != nil {
			t.Error(err)
		}
		got <- res
	}()
	if _, err := e.m.Kill(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-got:
		if res.Status != "exited" || res.Verdict == nil || res.Verdict.Verdict != verdict.VerdictEnded {
			t.Fatalf("wait --exit: %+v", res)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("wait --exit did not return")
	}
	if _, err := e.m.Wait(context.Background(), ref, WaitRequest{Idle: time.Second}); codeOf(err) != verdict.CodeNotFound {
		t.Fatalf("wait --idle on a gone session: %v", err)
	}
	// --exit on a session that has ended already answers with its verdict,
	// by identity and by the name the session had.
	for _, r := range []Ref{byID, ref} {
		res, err := e.m.Wait(context.Background(), r, WaitRequest{Exit: true})
		if err != nil || res.Status != "exited" || res.Verdict == nil || res.Verdict.Verdict != verdict.VerdictEnded ||
			res.Verdict.Session == nil || res.Verdict.Session.Name != ref.Name {
			t.Fatalf("wait --exit on an ended session (%+v): %+v %v", r, res, err)
		}
	}
	if _, err := e.m.Wait(context.Background(), Ref{Name: ref.Name + "x"}, WaitRequest{Exit: true}); codeOf(err) != verdict.CodeNotFound {
		t.Fatalf("wait --exit on a name that never was: %v", err)
	}
}

// TestTalkTailOfKilled: a killed session's ended verdict carries its last lines.
func TestTalkTailOfKilled(t *testing.T) {
	e := startEnv(t, "", "", false)
	_, res := e.create(t, "tail", "agent", "lines", "100")
	ref := Ref{Name: res.Session.Name}
	waitFor(t, "lines shown", func() bool {
		s, err := e.m.Screen(context.Background(), ref, 0, false)
		return err == nil && strings.Contains(strings.Join(s.Lines, "\n"), "line 100")
	})
	k, err := e.m.Kill(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	tail := k.Verdict.OutputTail
	if !strings.HasSuffix(tail, "line 100") || !strings.HasPrefix(tail, "line 51\n") || strings.Count(tail, "\n") != 49 {
		t.Fatalf("tail %q", tail)
	}
}

// TestTalkTailWhileDaemonDown: an agent that exits while the daemon is down,
// its dead pane kept by tmux (remain-on-exit), gets its tail in the ended
// verdict the next daemon writes.
func TestTalkTailWhileDaemonDown(t *testing.T) {
	e := startEnv(t, "", "", false)
	gofile := filepath.Join(e.home, "exit.go")
	id, res := e.create(t, "downtail", "agent", "linesexit", "70", gofile)
	ref := Ref{Name: res.Session.Name}
	if _, err := e.m.commandIn(context.Background(), e.m.lifeOf(e.census.Snapshot().Info.PID, e.census.Snapshot().Info.StartTime),
		"set-option", "-t", res.Session.ID, "remain-on-exit", "on"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "lines shown", func() bool {
		s, err := e.m.Screen(context.Background(), ref, 0, false)
		return err == nil && strings.Contains(strings.Join(s.Lines, "\n"), "line 70")
	})
	home := e.home
	e.close()
	_ = os.WriteFile(gofile, nil, 0o600)
	waitFor(t, "pane dead", func() bool {
		out, _ := execTmuxHome(home, "display-message", "-p", "-t", res.Session.ID, "#{pane_dead}")
		return strings.TrimSpace(out) == "1"
	})
	e2 := startEnv(t, home, "", false)
	if err := e2.m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := e2.ended(t, id)
	if !strings.HasSuffix(rec.OutputTail, "line 70") || !strings.Contains(rec.OutputTail, "line 21\n") {
		t.Fatalf("tail %q", rec.OutputTail)
	}
}

// TestTalkTailOfExited: an agent that exits by itself while the daemon runs
// gets its tail in the ended verdict — captured in the same pipeline as the
// kill of its dead pane, before the kill — and its session is gone by the
// time the verdict (which frees the identity) is written.
func TestTalkTailOfExited(t *testing.T) {
	e := startEnv(t, "", "", false)
	gofile := filepath.Join(e.home, "exit.go")
	id, res := e.create(t, "exittail", "agent", "linesexit", "70", gofile)
	ref := Ref{Name: res.Session.Name}
	waitFor(t, "lines shown", func() bool {
		s, err := e.m.Screen(context.Background(), ref, 0, false)
		return err == nil && strings.Contains(strings.Join(s.Lines, "\n"), "line 70")
	})
	_ = os.WriteFile(gofile, nil, 0o600)
	rec := e.ended(t, id)
	if rec.Reason != verdict.ReasonAgentExited || !strings.HasSuffix(rec.OutputTail, "line 70") ||
		!strings.Contains(rec.OutputTail, "line 21\n") {
		t.Fatalf("reason %s, tail %q", rec.Reason, rec.OutputTail)
	}
	if out, err := execTmuxHome(e.home, "has-session", "-t", res.Session.ID); err == nil {
		t.Fatalf("session %s still there after its ended verdict: %s", res.Session.ID, out)
	}
}

func TestSanitizeTail(t *testing.T) {
	lines := []string{"a\x1b[31mb\x07", "\tc  ", "é\xff日", "", ""}
	if got := SanitizeTail(lines); got != "a[31mb\n c\né日" {
		t.Fatalf("%q", got)
	}
	long := []string{strings.Repeat("é", 10000)}
	if got := SanitizeTail(long); len(got) > tailBytes || !strings.HasPrefix(got, "é") {
		t.Fatalf("long line: %d bytes", len(got))
	}
	many := make([]string, 200)
	for i := range many {
		many[i] = strings.Repeat("x", 100)
	}
	if got := SanitizeTail(many); len(got) > tailBytes || strings.Count(got, "\n")+1 > tailLines {
		t.Fatalf("many lines: %d bytes", len(got))
	}
}

// TestValidateWaitText: wait text refuses every control character — C0, DEL
// and C1 (found outside-in: U+0085 was accepted) — and takes other non-ASCII.
func TestValidateWaitText(t *testing.T) {
	for _, bad := range []string{"a\x01b", "a\tb", "a\x7fb", "a\u0085b", "a\u009bb", "a\u0080", "a\xffb"} {
		err := ValidateWait(WaitRequest{Text: bad})
		var ve *verdict.Error
		if !errors.As(err, &ve) || ve.Code != verdict.CodeInvalidRequest || ve.Details["field"] != "text" {
			t.Errorf("text %q: %v; want invalid_request on text", bad, err)
		}
	}
	for _, good := range []string{"ready>", "é日 \u00a0x", "$ #{pane_pid}"} {
		if err := ValidateWait(WaitRequest{Text: good}); err != nil {
			t.Errorf("text %q: %v", good, err)
		}
	}
}

// TestValidKey: the keys tmux 3.3a and 3.7c both encode are accepted, and
// those either types as its letters, drops or strips a modifier from are
// refused (the table was read off both by typing each key into a pane).
func TestValidKey(t *testing.T) {
	for _, k := range []string{"Enter", "C-c", "C-C", "M-x", "C-M-a", "S-Up", "C-S-Home", "C-M-S-F5", "F1", "F12",
		"a", "~", ";", "BSpace", "Escape", "M-Enter", "M-BSpace", "C-Space", "C-M-Space", "C-@", "C-[", "C-\\",
		"C-?", "C-_", "C-/", "M-/", "M-;", "KP0", "M-KPEnter", "PgDn", "IC"} {
		if !ValidKey(k) {
			t.Errorf("%q refused", k)
		}
	}
	for _, k := range []string{"", "F0", "F13", "F01", "F+1", "C-", "C-C-c", "ab", " ", "Space ", "#{x}", "é", "C-é", "0x03",
		"S-Enter", "S-a", "S-C-a", "C-S-a", "M-S-x", "S-;", "C-~", "S-Space", "C-;", "C-1", "C-Tab", "C-#",
		"C-Enter", "C-BSpace", "C-KP0", "C-M-/", "C-.", "S-Tab", "X-a"} {
		if ValidKey(k) {
			t.Errorf("%q accepted", k)
		}
	}
}

// execTmux runs one tmux command on the home's private server (a fork: the
// test reads tmux without the daemon, which is down).
func execTmuxHome(home string, args ...string) (string, error) {
	out, err := tmuxtest.Command(append([]string{"-S", filepath.Join(home, "tmux.sock")}, args...)...).Output()
	return string(out), err
}

// TestTalkFollowersShareOneClient: followers of one session share one tmux
// client, which leaves (and its goroutines with it) with the last follower.
func TestTalkFollowersShareOneClient(t *testing.T) {
	e := startEnv(t, "", "", false)
	ref, _ := e.echoSession(t, "share")
	before := goleak.IgnoreCurrent()
	subs := make([]*OutputSub, 5)
	for i := range subs {
		var err error
		if subs[i], err = e.m.FollowOutput(context.Background(), ref); err != nil {
			t.Fatal(err)
		}
	}
	clients := func() int {
		out, _ := execTmuxHome(e.home, "list-clients", "-F", "#{client_pid}")
		return len(strings.Fields(out))
	}
	if n := e.m.Follows(); n != 1 || clients() != 2 {
		t.Fatalf("%d followers attached, %d tmux clients; want 1 and 2 (with the daemon's own)", n, clients())
	}
	if err := e.m.Input(context.Background(), ref, Input{Text: "shared"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range subs {
		collect(t, s, []byte("shared"))
		s.Close()
	}
	waitFor(t, "the follower client gone", func() bool { return e.m.Follows() == 0 && clients() == 1 })
	goleak.VerifyNone(t, before)
}

// TestTalkDeadPane: input to a dead pane (kept by remain-on-exit; end detection
// not running here, so it stays) is agent_not_running; screen still reads it.
func TestTalkDeadPane(t *testing.T) {
	e := startEnv(t, "", "", true)
	gofile := filepath.Join(e.home, "dead.go")
	_, res := e.create(t, "dead", "agent", "linesexit", "3", gofile)
	ref := Ref{Name: res.Session.Name}
	if _, err := execTmuxHome(e.home, "set-option", "-t", res.Session.ID, "remain-on-exit", "on"); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(gofile, nil, 0o600)
	waitFor(t, "pane dead", func() bool {
		s, err := e.m.Screen(context.Background(), ref, 0, false)
		return err == nil && s.PaneDead
	})
	err := e.m.Input(context.Background(), ref, Input{Text: "x"})
	if codeOf(err) != verdict.CodeAgentNotRunning || verdict.Classify(codeOf(err)).HTTP != 409 {
		t.Fatalf("input to a dead pane: %v", err)
	}
}

// TestTalkCloseFollowers: at stop every follower client is detached and waited
// for; open streams end.
func TestTalkCloseFollowers(t *testing.T) {
	e := startEnv(t, "", "", false)
	ref, _ := e.echoSession(t, "closeall")
	sub, err := e.m.FollowOutput(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.m.CloseFollowers(ctx)
	if n := e.m.Follows(); n != 0 {
		t.Fatalf("%d followers still attached", n)
	}
	if _, ok := sub.Next(ctx); ok {
		t.Fatal("the stream did not end")
	}
}

// TestTalkInputInCopyMode: text reaches the agent while a human has the pane in
// copy mode (send-keys would have driven copy mode instead).
func TestTalkInputInCopyMode(t *testing.T) {
	e := startEnv(t, "", "", false)
	ref, file := e.echoSession(t, "copymode")
	if _, err := execTmuxHome(e.home, "copy-mode", "-t", "="+ref.Name+":"); err != nil {
		t.Fatal(err)
	}
	if out, _ := execTmuxHome(e.home, "display-message", "-p", "-t", "="+ref.Name+":", "#{pane_in_mode}"); strings.TrimSpace(out) != "1" {
		t.Fatalf("pane not in copy mode: %q", out)
	}
	if err := e.m.Input(context.Background(), ref, Input{Text: "q hello", Enter: true}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, file, 8); string(got) != "q hello\r" {
		t.Fatalf("agent read %q", got)
	}
}

// TestTalkScreenANSI: ansi keeps colours as escape sequences; without it the
// text is plain. History lines come before the screen.
func TestTalkScreenANSI(t *testing.T) {
	e := startEnv(t, "", "", false)
	_, res := e.create(t, "color", "agent", "color")
	ref := Ref{Name: res.Session.Name}
	var plain Screen
	waitFor(t, "text shown", func() bool {
		var err error
		plain, err = e.m.Screen(context.Background(), ref, 0, false)
		return err == nil && len(plain.Lines) > 0 && plain.Lines[0] == "red plain"
	})
	colored, err := e.m.Screen(context.Background(), ref, 0, true)
	if err != nil || !strings.Contains(colored.Lines[0], "\x1b[31mred") {
		t.Fatalf("ansi screen %q, %v", colored.Lines, err)
	}
	if plain.Cursor.Y != 1 || plain.Cursor.X != 0 || plain.PaneDead {
		t.Fatalf("cursor %+v dead %v", plain.Cursor, plain.PaneDead)
	}
	_, res2 := e.create(t, "hist", "agent", "lines", "200")
	ref2 := Ref{Name: res2.Session.Name}
	waitFor(t, "history", func() bool {
		s, err := e.m.Screen(context.Background(), ref2, MaxScreenLines, false)
		return err == nil && len(s.Lines) > 0 && s.Lines[0] == "line 1" && strings.Contains(strings.Join(s.Lines, "\n"), "line 200")
	})
}

// TestTalkFollowerChurn: followers attaching right after others detached, and
// a kill of a followed session, never take tmux down. tmux 3.3a crashes when it
// writes %client-detached to a control client that is still identifying; before
// closeFollower serialised attach and detach, this loop killed the server within
// a few rounds.
func TestTalkFollowerChurn(t *testing.T) {
	e := startEnv(t, "", "", false)
	ref, _ := e.echoSession(t, "churn")
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		s1, err := e.m.FollowOutput(ctx, ref)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		s1.Close()
		s2, err := e.m.FollowOutput(ctx, ref)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if _, err := e.m.Screen(ctx, ref, 0, false); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		s2.Close()
	}
	sub, err := e.m.FollowOutput(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := e.m.Kill(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if _, ok := sub.Next(ctx); ok {
		t.Fatal("the stream of a killed session did not end")
	}
	if _, err := execTmuxHome(e.home, "display-message", "-p", "#{pid}"); err != nil {
		t.Fatalf("tmux server gone: %v", err)
	}
}
