package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

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

// TestShowTextBetweenGenerations: show's text of an identity waiting out its
// restart delay says its state, policy and next start, and that it is not
// authoritative because it is between two generations — not as if its tags
// were wrong; ls does not flag it "(not authoritative)" either.
func TestShowTextBetweenGenerations(t *testing.T) {
	due := time.Now().Add(3 * time.Second)
	s := api.Session{Name: "skc-w", ID: "$4", Managed: true, StateDir: "/s", SessionID: "w", Generation: 1,
		State: "exited", Restart: "on-failure", NextStartAt: &due, PaneDead: true}
	var b bytes.Buffer
	printShow(&b, api.ShowResponse{Session: &s})
	for _, want := range []string{"state:", "exited (next start in", "restart:", "on-failure (0)", "next_start_at:",
		"false (between two generations)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("show text lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	printList(&b, api.ListResponse{Census: api.CensusInfo{Synced: true}, Sessions: []api.Session{s}})
	if strings.Contains(b.String(), "not authoritative") {
		t.Errorf("ls flags a waiting identity:\n%s", b.String())
	}
}
