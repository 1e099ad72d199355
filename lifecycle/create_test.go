package lifecycle

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

func TestCreatePublishesAndRunsAgent(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec := e.identity("basic")
	out := spec.Cwd + "/agent.out"
	spec.Argv = []string{spec.Argv[0], "agent", "pwdenv", out}
	spec.Env = []string{"SKC_TEST_VAR=hello world $HOME #{pid}"}
	res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "published" || !res.Session.Authoritative || res.Session.Generation != 1 {
		t.Fatalf("result %+v", res)
	}
	waitFor(t, "agent output", func() bool { _, err := os.Stat(out); return err == nil })
	b, _ := os.ReadFile(out)
	lines := strings.Split(string(b), "\n")
	if lines[0] != spec.Cwd {
		t.Errorf("agent cwd %q, want %q", lines[0], spec.Cwd)
	}
	if !strings.Contains(string(b), "\nSKC_TEST_VAR=hello world $HOME #{pid}\n") {
		t.Errorf("agent env lacks the requested variable byte for byte:\n%s", b)
	}
	again, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
	if err != nil || again.Status != "existing" || again.Session.ID != res.Session.ID {
		t.Fatalf("second create: %+v %v", again, err)
	}
	if n := len(e.sessions(id.Digest())); n != 1 {
		t.Fatalf("%d sessions for the identity", n)
	}
	recs := e.verdicts(id)
	if count(recs, "published") != 1 || count(recs, "existing") != 1 {
		t.Fatalf("verdicts %v", verdictNames(recs))
	}
}

func verdictNames(recs []verdict.Record) []string {
	var s []string
	for _, r := range recs {
		s = append(s, r.Verdict+"/"+r.Code+r.ExitKind)
	}
	return s
}

func TestConcurrentCreatesOneSession(t *testing.T) {
	e := startEnv(t, "", "", false)
	id, spec := e.identity("race")
	const n = 32
	var wg sync.WaitGroup
	results := make([]string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec, Wait: 20 * time.Second})
			if err != nil {
				results[i] = verdict.CodeOf(err)
				return
			}
			results[i] = res.Status
		}(i)
	}
	wg.Wait()
	published := 0
	for _, r := range results {
		switch r {
		case "published":
			published++
		case "existing", verdict.CodeIdentityReservedLive:
		default:
			t.Errorf("unexpected outcome %q", r)
		}
	}
	if published != 1 {
		t.Fatalf("%d published: %v", published, results)
	}
	if s := e.sessions(id.Digest()); len(s) != 1 {
		t.Fatalf("sessions %v", s)
	}
	recs := e.verdicts(id)
	if count(recs, "published") != 1 || len(recs) != n {
		t.Fatalf("verdicts %v", verdictNames(recs))
	}
}
