package integration

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestFleetRemoteSession: a session that host A runs is shown from host B
// (by name and by identity, from the fence's record: host, attach hint, the
// identity's verdicts), and every verb that acts on a session refuses it on
// B with remote_session naming host-a (409, exit 1) — kill, restart,
// screen, send, output, wait, attach — while it keeps running on A, where
// the same verbs work.
func TestFleetRemoteSession(t *testing.T) {
	url := fleetDB(t)
	a := NewHome(t).Start(t, DaemonOpts{Env: []string{"SKC_FENCE=" + url, "SKC_HOST=host-a"}})
	b := NewHome(t).Start(t, DaemonOpts{Env: []string{"SKC_FENCE=" + url, "SKC_HOST=host-b"}})
	spec := NewSpec(t, "fleet-remote")
	sess := a.MustCreate(t, spec, "published")
	ident := []string{"--state-dir", spec.StateDir, "--session-id", spec.SessionID}
	for _, ref := range [][]string{{sess.Name}, ident} {
		r := b.CLI(t, append([]string{"show", "--json"}, ref...)...)
		var show struct {
			Session  *Session         `json:"session"`
			Verdicts []map[string]any `json:"verdicts"`
		}
		mustJSON(t, r, &show)
		if r.Code != 0 || show.Session == nil || show.Session.Host != "host-a" || show.Session.Name != sess.Name ||
			show.Session.AttachHint == "" || show.Session.Generation != sess.Generation || len(show.Verdicts) == 0 {
			t.Fatalf("show %v on host-b: want host-a's session and its verdicts\n%s", ref, r)
		}
	}
	refusals := [][]string{
		{"kill", "--json", sess.Name},
		append([]string{"kill", "--json"}, ident...),
		{"restart", "--json", sess.Name},
		append([]string{"restart", "--json"}, ident...),
		{"screen", "--json", sess.Name},
		{"send", "--json", sess.Name, "--", "hello"},
		{"wait", "--json", sess.Name, "--exit", "--timeout", "30s"},
		{"wait", "--json", sess.Name, "--idle", "1s", "--timeout", "30s"},
	}
	for _, args := range refusals {
		ans := expectError(t, b.CLI(t, args...), 1, "error", "remote_session", "")
		if ans.Error != nil && ans.Error.Details["host"] != "host-a" {
			t.Errorf("%v: details %v, want host host-a", args, ans.Error.Details)
		}
	}
	for _, args := range [][]string{{"output", sess.Name}, {"attach", sess.Name}} {
		if r := b.CLI(t, args...); r.Code != 1 || !strings.Contains(r.Stderr, "remote_session") ||
			!strings.Contains(r.Stderr, "host-a") {
			t.Errorf("%v on host-b: want exit 1, remote_session naming host-a\n%s", args, r)
		}
	}
	// Nothing happened to it: host-a still runs it and acts on it.
	if l := a.List(t); len(l.Sessions) != 1 || l.Sessions[0].Name != sess.Name || l.Sessions[0].State != "running" ||
		l.Sessions[0].Host != "host-a" {
		t.Fatalf("host-a lists %+v", l.Sessions)
	}
	if r := a.CLI(t, "screen", "--json", sess.Name); r.Code != 0 {
		t.Fatalf("screen on host-a\n%s", r)
	}
	if r := a.CLI(t, "kill", "--json", sess.Name); r.Code != 0 {
		t.Fatalf("kill on host-a\n%s", r)
	}
	// Its generation ended: host-b may create the identity now.
	if got := b.MustCreate(t, spec, "published"); got.Host != "host-b" {
		t.Fatalf("host-b's session says host %q", got.Host)
	}
	a.Stop(t)
	b.Stop(t)
}

// TestFleetForgetHost: host A dies for good (its daemon and tmux server
// SIGKILLed) while it runs an identity: host B answers existing with A's
// session and cannot create it, until an operator on B runs `fence forget
// --host host-a`: then B creates it, and B's verdicts hold the one released
// verdict (reason host_forgotten) naming A's generation. B cannot forget
// itself (exit 2) and a host with nothing is not_found (exit 4).
func TestFleetForgetHost(t *testing.T) {
	url := fleetDB(t)
	ha := NewHome(t)
	a := ha.Start(t, DaemonOpts{Env: []string{"SKC_FENCE=" + url, "SKC_HOST=host-a"}})
	b := NewHome(t).Start(t, DaemonOpts{Env: []string{"SKC_FENCE=" + url, "SKC_HOST=host-b"}})
	spec := NewSpec(t, "fleet-forget")
	sess := a.MustCreate(t, spec, "published")
	server := a.List(t).Census.ServerPID
	a.Kill(t)
	if err := syscall.Kill(server, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if got := b.MustCreate(t, spec, "existing"); got.Host != "host-a" || got.Name != sess.Name {
		t.Fatalf("host-b before the forget: %+v", got)
	}
	expectError(t, b.CLI(t, "fence", "forget", "--json", "--host", "host-b"), 2, "invalid", "invalid_request", "host")
	expectError(t, b.CLI(t, "fence", "forget", "--json", "--host", "host-z"), 4, "error", "not_found", "")
	expectError(t, b.CLI(t, "fence", "forget", "--json"), 2, "invalid", "invalid_request", "host")
	r := b.CLI(t, "fence", "forget", "--json", "--host", "host-a")
	var fg struct {
		Status     string            `json:"status"`
		Host       string            `json:"host"`
		Identities []json.RawMessage `json:"identities"`
		Verdict    Verdict           `json:"verdict"`
	}
	mustJSON(t, r, &fg)
	if r.Code != 0 || fg.Status != "forgotten" || fg.Host != "host-a" || len(fg.Identities) != 1 ||
		fg.Verdict.SKC.Verdict != "released" || fg.Verdict.Event.Reason != "host_forgotten" {
		t.Fatalf("fence forget --host host-a\n%s", r)
	}
	nb := b.MustCreate(t, spec, "published")
	if nb.Host != "host-b" || nb.Generation != sess.Generation+1 {
		t.Fatalf("host-b's create after the forget: %+v (host-a's was generation %d)", nb, sess.Generation)
	}
	v := b.WaitVerdict(t, "host-b's forget verdict", func(v Verdict) bool { return v.Event.Reason == "host_forgotten" })
	if v.SKC.Verdict != "released" {
		t.Fatalf("forget verdict %s", v)
	}
	b.Stop(t)
}

// TestFleetListAndVerdicts: three hosts on one PostgreSQL fence, one session
// on each of A and B. `ls --fleet` on any host lists both (each with its
// host; the other host's with an attach hint), plain `ls` only its own;
// `verdicts --fleet` reads every host's verdicts in the fleet-wide order,
// plain `verdicts` only this host's.
func TestFleetListAndVerdicts(t *testing.T) {
	url := fleetDB(t)
	var hosts []*Daemon
	for _, name := range []string{"host-a", "host-b", "host-c"} {
		hosts = append(hosts, NewHome(t).Start(t, DaemonOpts{Env: []string{"SKC_FENCE=" + url, "SKC_HOST=" + name}}))
	}
	a, b, c := hosts[0], hosts[1], hosts[2]
	sa := a.MustCreate(t, NewSpec(t, "fleet-ls-a"), "published")
	sb := b.MustCreate(t, NewSpec(t, "fleet-ls-b"), "published")
	want := map[string]string{sa.Name: "host-a", sb.Name: "host-b"}
	for i, d := range hosts {
		var l List
		mustJSON(t, d.CLI(t, "ls", "--fleet", "--json"), &l)
		got := map[string]string{}
		for _, s := range l.Sessions {
			got[s.Name] = s.Host
			local := s.Host == []string{"host-a", "host-b", "host-c"}[i]
			if local == (s.AttachHint != "") {
				t.Errorf("host %d: session %s of %s has attach hint %q", i, s.Name, s.Host, s.AttachHint)
			}
		}
		if len(got) != 2 || got[sa.Name] != want[sa.Name] || got[sb.Name] != want[sb.Name] {
			t.Errorf("ls --fleet on host %d: %v, want %v", i, got, want)
		}
	}
	if l := c.List(t); len(l.Sessions) != 0 {
		t.Errorf("plain ls on host-c: %+v", l.Sessions)
	}
	if r := c.CLI(t, "ls", "--fleet"); r.Code != 0 || !strings.Contains(r.Stdout, "HOST") ||
		!strings.Contains(r.Stdout, "host-a") || !strings.Contains(r.Stdout, "host-b") {
		t.Errorf("ls --fleet text\n%s", r)
	}
	r := c.CLI(t, "verdicts", "--fleet")
	fleet := parseVerdicts(t, r.Stdout)
	names := map[string]bool{}
	for i, v := range fleet {
		if i > 0 && v.Event.Sequence <= fleet[i-1].Event.Sequence {
			t.Errorf("verdicts --fleet out of order: %d after %d", v.Event.Sequence, fleet[i-1].Event.Sequence)
		}
		if v.SKC.Verdict == "published" {
			names[v.SessionName()] = true
		}
	}
	if r.Code != 0 || !names[sa.Name] || !names[sb.Name] {
		t.Errorf("verdicts --fleet on host-c lacks a host's published verdict\n%s", r)
	}
	for _, v := range parseVerdicts(t, a.CLI(t, "verdicts").Stdout) {
		if v.SKC.Verdict == "published" && v.SessionName() != sa.Name {
			t.Errorf("plain verdicts on host-a shows %s", v.SessionName())
		}
	}
	if r := a.CLI(t, "verdicts", "--fleet", "--since", strconv.FormatInt(fleet[len(fleet)-1].Event.Sequence, 10)); r.Code != 0 ||
		strings.TrimSpace(r.Stdout) != "" {
		t.Errorf("verdicts --fleet --since the last\n%s", r)
	}
	for _, d := range hosts {
		d.Stop(t)
	}
}

// TestFleetRemoteBetweenStarts: an identity that host B keeps between two
// starts (its agent exited, its restart due later) is shown from host A as
// host-b's, with the attach hint (A said it was its own, with none), and a
// wait --exit on A for the ended session's name is not_found, as for any
// name no generation of A wore (it answered B's ended verdict) (found outside-in).
func TestFleetRemoteBetweenStarts(t *testing.T) {
	url := fleetDB(t)
	a, b := fleetHost(t, url, "host-a"), fleetHost(t, url, "host-b")
	spec := NewSpec(t, "fleet-between")
	spec.Argv = []string{"sh", "-c", "exit 3"}
	args := createArgs(spec, "--restart", "always", "--restart-delay", "60s")
	r := b.CLI(t, args...)
	if r.Code != 0 {
		t.Fatalf("create on host-b\n%s", r)
	}
	var created struct {
		Session Session `json:"session"`
	}
	mustJSON(t, r, &created)
	ident := []string{"--state-dir", spec.StateDir, "--session-id", spec.SessionID}
	var show struct {
		Session *Session `json:"session"`
	}
	waitFor(t, "host-b's identity waits for its next start", func() bool {
		mustJSON(t, b.CLI(t, append([]string{"show", "--json"}, ident...)...), &show)
		return show.Session != nil && show.Session.State == "exited"
	})
	r = a.CLI(t, append([]string{"show", "--json"}, ident...)...)
	mustJSON(t, r, &show)
	if show.Session == nil || show.Session.Host != "host-b" || show.Session.AttachHint == "" {
		t.Fatalf("show on host-a of host-b's waiting identity\n%s", r)
	}
	expectError(t, a.CLI(t, "wait", "--json", created.Session.Name, "--exit", "--timeout", "5s"), 4, "error", "not_found", "")
	a.Stop(t)
	b.Stop(t)
}

// TestFleetCreateMeetsRemoteStop: a create on host A that meets host B's
// generation while B stops it (a kill in its grace) is not answered existing
// — that agent is about to end — but waits for B's proof within its wait:
// refused identity_reserved_live with details.stopping past it, published on
// A once B's stop has ended the generation (found outside-in: existing, exit
// 0, and no agent a moment later).
func TestFleetCreateMeetsRemoteStop(t *testing.T) {
	url := fleetDB(t)
	a, b := fleetHost(t, url, "host-a"), fleetHost(t, url, "host-b")
	spec := NewSpec(t, "fleet-remote-stop")
	spec.Argv = []string{"sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"}
	args := createArgs(spec, "--stop-timeout", "10s") // the refusal below comes well within it
	if r := b.CLI(t, args...); r.Code != 0 {
		t.Fatalf("create on host-b\n%s", r)
	}
	ident := []string{"--state-dir", spec.StateDir, "--session-id", spec.SessionID}
	if r := b.CLI(t, append([]string{"wait", "--json", "--text", "ready", "--timeout", "30s"}, ident...)...); r.Code != 0 {
		t.Fatalf("wait for the agent's trap\n%s", r)
	}
	killed := make(chan Result, 1)
	go func() { killed <- b.CLI(t, append([]string{"kill", "--json"}, ident...)...) }()
	var show struct {
		Session *Session `json:"session"`
	}
	waitFor(t, "host-b stopping it", func() bool {
		mustJSON(t, a.CLI(t, append([]string{"show", "--json"}, ident...)...), &show)
		return show.Session != nil && show.Session.State == "stopping"
	})
	spec.Wait = "500ms"
	ans := expectError(t, a.CLI(t, spec.Args()...), 3, "refused", "identity_reserved_live", "")
	if ans.Error != nil && ans.Error.Details["stopping"] != true {
		t.Fatalf("refusal details %v, want stopping", ans.Error.Details)
	}
	spec.Wait = "60s"
	if got := a.MustCreate(t, spec, "published"); got.Host != "host-a" {
		t.Fatalf("host-a's create after host-b's stop: %+v", got)
	}
	if r := <-killed; r.Code != 0 {
		t.Fatalf("kill on host-b\n%s", r)
	}
	a.Stop(t)
	b.Stop(t)
}

// TestFleetCreateWinsAWaitingIdentity: host A creates an identity that host
// B keeps between two starts: A wins it (one agent in the fleet), and B,
// at its due start, removes its kept session and says so (stopped, reason
// published_elsewhere, naming host-a) instead of keeping it forever with its
// dead pane (found outside-in).
func TestFleetCreateWinsAWaitingIdentity(t *testing.T) {
	url := fleetDB(t)
	a, b := fleetHost(t, url, "host-a"), fleetHost(t, url, "host-b")
	spec := NewSpec(t, "fleet-wins-waiting")
	argv := spec.Argv
	spec.Argv = []string{"sh", "-c", "exit 0"}
	args := createArgs(spec, "--restart", "always", "--restart-delay", "10s") // time for host-a's create
	r := b.CLI(t, args...)
	var created struct {
		Session Session `json:"session"`
	}
	mustJSON(t, r, &created)
	ident := []string{"--state-dir", spec.StateDir, "--session-id", spec.SessionID}
	var show struct {
		Session *Session `json:"session"`
	}
	waitFor(t, "host-b's identity waits for its next start", func() bool {
		mustJSON(t, b.CLI(t, append([]string{"show", "--json"}, ident...)...), &show)
		return show.Session != nil && show.Session.State == "exited"
	})
	spec.Argv = argv
	if got := a.MustCreate(t, spec, "published"); got.Host != "host-a" {
		t.Fatalf("host-a's create: %+v", got)
	}
	waitFor(t, "host-b's kept session removed", func() bool {
		out, err := b.Tmux("list-sessions", "-F", "#{session_id}")
		return err == nil && !slices.Contains(strings.Fields(out), created.Session.ID)
	})
	waitFor(t, "host-b's stopped verdict", func() bool {
		r := b.CLI(t, "verdicts", "--json")
		return strings.Contains(r.Stdout, `"reason":"published_elsewhere"`) && strings.Contains(r.Stdout, `"verdict":"stopped"`)
	})
	a.Stop(t)
	b.Stop(t)
}

// fleetHost starts a daemon of host name on the fleet's database url.
func fleetHost(t *testing.T, url, name string) *Daemon {
	t.Helper()
	return NewHome(t).Start(t, DaemonOpts{Env: []string{"SKC_FENCE=" + url, "SKC_HOST=" + name}})
}

// createArgs is spec's create command line with flags before its argv.
func createArgs(spec Spec, flags ...string) []string {
	args := spec.Args()
	n := len(args) - len(spec.Argv) - 1 // before the "--"
	return append(append(args[:n:n], flags...), args[n:]...)
}
