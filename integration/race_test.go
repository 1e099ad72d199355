package integration

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
)

// TestConcurrentCreate: 32 CLI processes create one identity at once. Exactly one
// session exists (tmux says so), exactly one answer is published, every other one
// is existing (the same session) or a refusal by a live reservation.
func TestConcurrentCreate(t *testing.T) {
	t.Parallel()
	testConcurrentCreate(t, 32)
}

// TestSoakConcurrentCreate is TestConcurrentCreate with 128 processes, 10 times.
func TestSoakConcurrentCreate(t *testing.T) {
	needSoak(t)
	for i := range 10 {
		t.Run(fmt.Sprint(i), func(t *testing.T) { testConcurrentCreate(t, 128) })
	}
}

func testConcurrentCreate(t *testing.T, n int) {
	d := StartDaemon(t, DaemonOpts{})
	spec := NewSpec(t, "race-1")
	results := createAtOnce(t, d, spec, n)
	published := tallyRace(t, results)
	agents := d.AgentSessions(t)
	if len(agents) != 1 || agents[0].Name != published.Name {
		t.Errorf("tmux has %d agent sessions %+v, want exactly the published %q", len(agents), agents, published.Name)
	}
	vs := d.Verdicts(t)
	checkVerdictStream(t, vs)
	if got := countVerdicts(vs, func(v Verdict) bool { return v.SKC.Verdict == "published" }); got != 1 {
		t.Errorf("%d published verdicts, want 1", got)
	}
	// Every create ends in exactly one terminal verdict of its own.
	if creates := countVerdicts(vs, func(v Verdict) bool { return v.Event.Action == "create" }); creates != n {
		t.Errorf("%d create verdicts for %d creates, want one each", creates, n)
	}
	status, body := d.Get(t, "/v1/fence")
	var f struct {
		Reservations []json.RawMessage `json:"reservations"`
	}
	if status != 200 || json.Unmarshal(body, &f) != nil || len(f.Reservations) != 0 {
		t.Errorf("fence after the race: %d %s, want no reservation left", status, body)
	}
}

// createAtOnce runs n create processes released together.
func createAtOnce(t *testing.T, d *Daemon, spec Spec, n int) []Result {
	results := make([]Result, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := d.runCLI(t, CLIOpts{}, spec.Args()...)
			if err != nil {
				t.Errorf("%s\n%v", r, err)
			}
			results[i] = r
		}()
	}
	close(start)
	wg.Wait()
	d.NoteSession(t)
	if t.Failed() {
		t.FailNow()
	}
	return results
}

// tallyRace checks the answers of a race: exactly one published, every other
// one existing (the same session) or refused by the live reservation.
func tallyRace(t *testing.T, results []Result) Session {
	counts := map[string]int{}
	var published Session
	names := map[string]bool{}
	for _, r := range results {
		var a Answer
		if err := decodeOne(r.Stdout, &a); err != nil {
			t.Errorf("%v\n%s", err, r)
			continue
		}
		key := a.Status
		if a.Error != nil {
			key += "/" + a.Error.Code
		}
		counts[key+"/exit"+strconv.Itoa(r.Code)]++
		switch {
		case a.Status == "published" && r.Code == 0:
			published = *a.Session
			names[a.Session.Name] = true
		case a.Status == "existing" && r.Code == 0:
			names[a.Session.Name] = true
		case a.Status == "refused" && r.Code == 3 && a.Error != nil && a.Error.Code == "identity_reserved_live":
		default:
			t.Errorf("unexpected answer\n%s", r)
		}
	}
	t.Logf("answers: %v", counts)
	if counts["published/exit0"] != 1 {
		t.Errorf("%d published answers, want exactly 1: %v", counts["published/exit0"], counts)
	}
	if len(names) != 1 {
		t.Errorf("answers name %d different sessions, want 1: %v", len(names), names)
	}
	return published
}

func countVerdicts(vs []Verdict, match func(Verdict) bool) int {
	n := 0
	for _, v := range vs {
		if match(v) {
			n++
		}
	}
	return n
}
