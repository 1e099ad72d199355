package fence

import (
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// TestNextStarts: a policy restart keeps the start limit's window and the
// failures and adds its start; a person's restart request counts as a start
// but opens a fresh window with no failures (it overrides a give-up, which
// would otherwise come again at the first end); a create starts over.
func TestNextStarts(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	old := Published{Restart: RestartInfo{Restarts: 4, Failures: 5, Starts: []time.Time{t0, t0.Add(time.Second)}}}
	now := t0.Add(time.Minute)
	if r := nextStarts(old, true, verdict.ReasonRestart, now); r.Restarts != 5 || r.Failures != 5 || len(r.Starts) != 3 || !r.Starts[2].Equal(now) {
		t.Errorf("policy restart: %+v", r)
	}
	if r := nextStarts(old, true, verdict.ReasonManualRestart, now); r.Restarts != 5 || r.Failures != 0 || len(r.Starts) != 1 || !r.Starts[0].Equal(now) {
		t.Errorf("manual restart: %+v", r)
	}
	if r := nextStarts(old, true, "", now); r.Restarts != 0 || r.Failures != 0 || len(r.Starts) != 1 {
		t.Errorf("create: %+v", r)
	}
}
