package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/api"
)

// TestListTextShowsState: the human `ls` says each managed session's state,
// so a generation that is stopping (with or without its session) reads so,
// and "-" for a session that is not ours.
func TestListTextShowsState(t *testing.T) {
	var b bytes.Buffer
	printList(&b, api.ListResponse{Census: api.CensusInfo{Synced: true}, Sessions: []api.Session{
		{Name: "skc-a", ID: "$1", Managed: true, StateDir: "/s", SessionID: "a", Generation: 2, Authoritative: true, State: "running"},
		{Name: "skc-b", ID: "$2", Managed: true, StateDir: "/s", SessionID: "b", Generation: 1, Authoritative: true,
			PaneDead: true, State: "stopping"},
		{Name: "mine", ID: "$3"},
	}})
	lines := strings.Split(b.String(), "\n")
	if len(lines) < 4 || !strings.Contains(lines[0], "STATE") {
		t.Fatalf("ls:\n%s", b.String())
	}
	for i, want := range []string{"running", "stopping", "-"} {
		f := strings.Fields(lines[i+1])
		if len(f) < 4 || f[3] != want {
			t.Errorf("line %q: state %q", lines[i+1], want)
		}
	}
}
