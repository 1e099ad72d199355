package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skc-supervisor/skc-supervisor/internal/pgtest"
)

// fleetDB starts a private PostgreSQL server for the test (skipping it, with
// the reason, when none can be started) and returns a fence URL on it.
func fleetDB(t *testing.T) string {
	t.Helper()
	srv := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url, err := srv.CreateDB(ctx, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// TestFleetTwoHosts: two daemons (two homes, two tmux servers, two host
// names) share one PostgreSQL fence (SKC_FENCE, SKC_HOST): an identity
// created on host A answers existing on host B with A's session (its host
// and an attach hint for it), and B starts nothing; each
// host lists its own sessions; after A kills it, B creates it; the pane
// helpers find the fleet's fence through the home's fence.conf.
func TestFleetTwoHosts(t *testing.T) {
	url := fleetDB(t)
	a := NewHome(t).Start(t, DaemonOpts{Env: []string{"SKC_FENCE=" + url, "SKC_HOST=host-a"}})
	b := NewHome(t).Start(t, DaemonOpts{Args: []string{"--fence", url, "--host-name", "host-b"}})
	spec := NewSpec(t, "fleet-1")
	sess := a.MustCreate(t, spec, "published")
	if sess.Host != "host-a" {
		t.Fatalf("host-a's session says host %q", sess.Host)
	}
	eb := b.MustCreate(t, spec, "existing")
	if eb.Host != "host-a" || eb.Name != sess.Name || eb.ID != sess.ID || eb.Generation != sess.Generation ||
		eb.AttachHint != "skc-supervisor attach '"+sess.Name+"'" {
		t.Fatalf("create on host-b: want host-a's session %+v, got %+v", sess, eb)
	}
	if l := a.List(t); len(l.Sessions) != 1 || l.Sessions[0].Name != sess.Name {
		t.Fatalf("host-a lists %+v", l.Sessions)
	}
	if l := b.List(t); len(l.Sessions) != 0 {
		t.Fatalf("host-b lists %+v, want none of host-a's", l.Sessions)
	}
	var conf struct{ Fence, Host string }
	raw, err := os.ReadFile(a.Dir + "/fence.conf")
	if err != nil || json.Unmarshal(raw, &conf) != nil || conf.Fence != url || conf.Host != "host-a" {
		t.Fatalf("fence.conf of host-a: %s %v", raw, err)
	}
	if r := a.CLI(t, "kill", "--json", sess.Name); r.Code != 0 {
		t.Fatalf("kill on host-a\n%s", r)
	}
	sb := b.MustCreate(t, spec, "published")
	if sb.Name == sess.Name {
		t.Fatalf("host-b's session reuses host-a's name %s", sb.Name)
	}
	// Host-b's pane helper found the fleet's fence (fence.conf) and recorded
	// its start there, as host-b.
	waitFor(t, "host-b's helper start in the fleet's fence", func() bool {
		return helperStarts(t, url, "host-b") == 1
	})
	if l := b.List(t); len(l.Sessions) != 1 || l.Sessions[0].Name != sb.Name {
		t.Fatalf("host-b lists %+v", l.Sessions)
	}
	a.Stop(t)
	b.Stop(t)
}

// helperStarts counts the pane helpers of host that recorded their start.
func helperStarts(t *testing.T, url, host string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM postmortems WHERE host = $1`, host).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFor polls cond with a generous deadline (no timed assertions).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestFleetDatabaseStoppedMidBurst: two hosts race to create the same
// identities while the shared PostgreSQL is stopped in the middle of the
// burst. Creates that meet the stopped database fail closed (never a
// success without the fence); once it is started again, creates resume on
// both hosts without a restart of either daemon, and every identity ends
// with exactly one session in the whole fleet.
func TestFleetDatabaseStoppedMidBurst(t *testing.T) {
	srv := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	url, err := srv.CreateDB(ctx, "fleet")
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	hosts := []*Daemon{
		NewHome(t).Start(t, DaemonOpts{Env: []string{"SKC_FENCE=" + url, "SKC_HOST=host-a"}}),
		NewHome(t).Start(t, DaemonOpts{Env: []string{"SKC_FENCE=" + url, "SKC_HOST=host-b"}}),
	}
	const n = 6
	specs := make([]Spec, n)
	for i := range specs {
		specs[i] = NewSpec(t, fmt.Sprint("burst-", i))
	}
	first := make(chan struct{}, 2*n)
	var mu sync.Mutex
	answers := map[string]int{}
	var wg sync.WaitGroup
	for _, s := range specs {
		for _, d := range hosts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := d.runCLI(t, CLIOpts{}, s.Args()...)
				if err != nil {
					t.Errorf("%s\n%v", r, err)
				}
				var a Answer
				_ = decodeOne(r.Stdout, &a)
				key := a.Status
				if a.Error != nil {
					key += "/" + a.Error.Code
				}
				mu.Lock()
				answers[key]++
				mu.Unlock()
				first <- struct{}{}
			}()
		}
	}
	<-first // the burst is under way: stop the database in its middle
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	t.Logf("answers during the burst: %v", answers)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		settleIdentity(t, hosts, s)
	}
	checkOnePerIdentity(t, hosts, n)
}

// settleIdentity creates s on the hosts in turn until one answers published
// or existing: a host refused because the identity runs on the other, or
// because the other holds a row from the burst, hands over to the other.
func settleIdentity(t *testing.T, hosts []*Daemon, s Spec) {
	t.Helper()
	deadline := time.Now().Add(waitDeadline)
	for i := 0; time.Now().Before(deadline); i++ {
		d := hosts[i%len(hosts)]
		r := d.CLI(t, s.Args()...)
		var a Answer
		if err := decodeOne(r.Stdout, &a); err != nil {
			t.Fatalf("%v\n%s", err, r)
		}
		if r.Code == 0 && (a.Status == "published" || a.Status == "existing") {
			d.NoteSession(t)
			return
		}
		if a.Error == nil {
			t.Fatalf("unexpected answer\n%s", r)
		}
		switch a.Error.Code {
		case "identity_reserved_unknown", "identity_reserved_live",
			"identity_fence_contended", "fence_unavailable":
		default:
			t.Fatalf("unexpected refusal after the database returned\n%s", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("identity %s not settled on either host", s.SessionID)
}

// checkOnePerIdentity: across every host's tmux, each of the n identities
// has exactly one agent session.
func checkOnePerIdentity(t *testing.T, hosts []*Daemon, n int) {
	t.Helper()
	per := map[string][]string{}
	for _, d := range hosts {
		for _, s := range d.AgentSessions(t) {
			per[s.Identity] = append(per[s.Identity], s.Name)
		}
	}
	if len(per) != n {
		t.Errorf("%d identities have sessions, want %d: %v", len(per), n, per)
	}
	for id, names := range per {
		if len(names) != 1 {
			t.Errorf("identity %s has %d sessions in the fleet: %v", id, len(names), names)
		}
	}
}
