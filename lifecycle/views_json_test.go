package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// stable returns what enc encodes once two encodings of the structured result
// around the encoded one agree (the census may re-list in between), failing
// unless the encoded bytes equal them.
func stable(t *testing.T, what string, structured func() ([]byte, error), encoded func() ([]byte, error)) ([]byte, error) {
	t.Helper()
	for try := 0; try < 50; try++ {
		before, err := structured()
		got, gerr := encoded()
		after, _ := structured()
		if err != nil || gerr != nil {
			if verdict.CodeOf(err) != verdict.CodeOf(gerr) {
				t.Fatalf("%s: structured error %v, encoded error %v", what, err, gerr)
			}
			return nil, gerr
		}
		if bytes.Equal(before, after) {
			if !bytes.Equal(got, before) {
				t.Fatalf("%s: encoded\n%s\nstructured\n%s", what, got, before)
			}
			return got, nil
		}
	}
	t.Fatalf("%s: never stable", what)
	return nil, nil
}

func listJSON(t *testing.T, e *env) string {
	t.Helper()
	b, err := stable(t, "list", func() ([]byte, error) {
		l, err := e.m.List(context.Background())
		if err != nil {
			return nil, err
		}
		return json.Marshal(l)
	}, func() ([]byte, error) { return e.m.AppendListJSON(context.Background(), nil) })
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// showJSON checks AppendShowJSON against Show and the verdicts against a direct
// read of the journal; it returns the decoded answer, or the error's code.
func showJSON(t *testing.T, e *env, ref Ref, id fence.Identity) (ShowResult, string) {
	t.Helper()
	b, err := stable(t, "show", func() ([]byte, error) {
		sh, err := e.m.Show(context.Background(), ref)
		if err != nil {
			return nil, err
		}
		return json.Marshal(sh)
	}, func() ([]byte, error) {
		b, err := e.m.AppendShowJSON(context.Background(), []byte("x"), ref)
		if !bytes.HasPrefix(b, []byte("x")) {
			t.Fatalf("show appended to %q", b)
		}
		return b[1:], err
	})
	if err != nil {
		return ShowResult{}, verdict.CodeOf(err)
	}
	var sh ShowResult
	if err := json.Unmarshal(b, &sh); err != nil {
		t.Fatalf("show: %v: %s", err, b)
	}
	want, _ := json.Marshal(e.verdicts(id))
	if got, _ := json.Marshal(sh.Verdicts); !bytes.Equal(got, want) {
		t.Fatalf("show's verdicts\n%s\njournal's\n%s", got, want)
	}
	return sh, ""
}

func verdictList(sh ShowResult) string {
	var v []string
	for _, r := range sh.Verdicts {
		v = append(v, r.Verdict)
	}
	return strings.Join(v, ",")
}

// TestEncodedViewsFollowChanges: the encoded list and show are byte for byte
// the structured ones, and every create, kill and agent end is reflected by the
// next read — after the identity's verdicts were cached by an earlier show.
func TestEncodedViewsFollowChanges(t *testing.T) {
	e := startEnv(t, "", "", false)
	idA, resA := e.create(t, "ja")
	idB, resB := e.create(t, "jb")
	if l := listJSON(t, e); !strings.Contains(l, resA.Session.Name) || !strings.Contains(l, resB.Session.Name) {
		t.Fatalf("list after creates: %s", l)
	}
	if sh, code := showJSON(t, e, Ref{Name: resA.Session.Name}, idA); code != "" || verdictList(sh) != "published" {
		t.Fatalf("show a: %s %+v", code, sh)
	}
	showJSON(t, e, Ref{Identity: &idB}, idB)

	if _, err := e.m.Kill(context.Background(), Ref{Name: resA.Session.Name}); err != nil {
		t.Fatal(err)
	}
	if _, code := showJSON(t, e, Ref{Name: resA.Session.Name}, idA); code != verdict.CodeNotFound {
		t.Fatalf("show after kill: %q", code)
	}
	if l := listJSON(t, e); strings.Contains(l, resA.Session.Name) {
		t.Fatalf("list after kill: %s", l)
	}
	_, resA2 := e.create(t, "ja")
	if sh, code := showJSON(t, e, Ref{Identity: &idA}, idA); code != "" || verdictList(sh) != "published,ended,published" ||
		sh.Session.Name != resA2.Session.Name {
		t.Fatalf("show after re-create: %s %+v", code, sh)
	}

	var agent int
	waitFor(t, "agent start", func() bool { agent = agentPID(resB.Session.PanePID); return agent != 0 })
	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.ended(t, idB)
	// The identity's history outlives its session: session null, verdicts kept.
	if sh, code := showJSON(t, e, Ref{Identity: &idB}, idB); code != "" || sh.Session != nil ||
		verdictList(sh) != "published,ended" {
		t.Fatalf("show after the agent's end: %q %+v", code, sh)
	}
	_, resB2 := e.create(t, "jb")
	if sh, code := showJSON(t, e, Ref{Name: resB2.Session.Name}, idB); code != "" || verdictList(sh) != "published,ended,published" {
		t.Fatalf("show after re-create: %s %+v", code, sh)
	}
	if l := listJSON(t, e); strings.Contains(l, resB.Session.Name) || !strings.Contains(l, resB2.Session.Name) {
		t.Fatalf("list after end and re-create: %s", l)
	}
}
