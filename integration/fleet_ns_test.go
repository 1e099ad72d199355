package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The fleet's scenarios with hosts that are really apart: three daemons on
// one PostgreSQL fence, each host in its own pid, mount and UTS namespace
// with its own boot id and machine id (NSHost). Agents are `sleep TOKEN`
// with a token of their own, counted in this test's /proc, which sees every
// host's processes; sessions are counted in the three tmux servers.

// fleetRaceRounds is how many rounds TestFleetHostsRace runs: 10 in `make
// test` (each round is 48 CLI processes racing, 1-2 s on 2 cores), the
// issue's 50 under SKC_SOAK (`make soak`).
func fleetRaceRounds() int {
	if os.Getenv("SKC_SOAK") != "" {
		return 50
	}
	return 10
}

// nsFleet starts a PostgreSQL fence and one namespaced host per name, each
// with a daemon running. It skips t (one line) where namespaces or
// PostgreSQL cannot be had.
func nsFleet(t *testing.T, names ...string) (string, []*NSHost, []*Daemon) {
	t.Helper()
	needNamespaces(t)
	url := fleetDB(t)
	var hosts []*NSHost
	var daemons []*Daemon
	for _, name := range names {
		h := NewNSHost(t, name, url)
		hosts = append(hosts, h)
		daemons = append(daemons, h.Start(t, DaemonOpts{}))
	}
	return url, hosts, daemons
}

// agentToken is an argument of `sleep` no other test's agent uses, so that
// the agents of one identity can be counted in /proc.
func agentToken() string {
	return strconv.Itoa(100_000_000 + rand.IntN(800_000_000))
}

// agentSpec is a create of identity id whose agent is `sleep token`.
func agentSpec(t *testing.T, id, token string) Spec {
	s := NewSpec(t, id)
	s.Argv = []string{"sleep", token}
	return s
}

// hostOf is the host whose pid namespace holds pid, nil when none does.
func hostOf(hosts []*NSHost, pid int) *NSHost {
	for _, h := range hosts {
		if h.In(pid) {
			return h
		}
	}
	return nil
}

// waitOneAgent waits until the identity of token has exactly one agent in
// the whole machine, and requires it to run on host want.
func waitOneAgent(t *testing.T, hosts []*NSHost, token string, want *NSHost) {
	t.Helper()
	WaitFor(t, waitDeadline, "one agent fleet-wide", func() error {
		pids := sleepers(token)
		if len(pids) != 1 {
			return fmt.Errorf("%d agents: %v", len(pids), pids)
		}
		if h := hostOf(hosts, pids[0]); h != want {
			return fmt.Errorf("the agent (pid %d) runs on %v, want %s", pids[0], nameOf(h), want.Name)
		}
		return nil
	})
}

func nameOf(h *NSHost) string {
	if h == nil {
		return "no host's namespace"
	}
	return h.Name
}

// checkHostRows: the fence's hosts table has each host's boot id and
// machine id, as the daemon inside the host's namespaces read them.
func checkHostRows(t *testing.T, url string, hosts []*NSHost) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, h := range hosts {
		var machine, boot string
		if err := conn.QueryRow(ctx, `SELECT machine_id, boot_id FROM hosts WHERE name = $1`, h.Name).Scan(&machine, &boot); err != nil {
			t.Fatalf("host %s's row: %v", h.Name, err)
		}
		if boot != h.BootID || machine != h.MachineID {
			t.Fatalf("host %s's row: machine id %q, boot id %q; want %q, %q", h.Name, machine, boot, h.MachineID, h.BootID)
		}
	}
}

// raceAnswers is what one round's racers answered: "published", "existing"
// or "refused/<code>" → count, and the host that published.
type raceAnswers struct {
	mu        sync.Mutex
	n         map[string]int
	publisher []*NSHost
	odd       map[string]string // the first answer of each key a racer may not get, whole
}

func (a *raceAnswers) add(key string, h *NSHost, r Result) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n[key]++
	if key == "published" {
		a.publisher = append(a.publisher, h)
	}
	if _, seen := a.odd[key]; !fleetAnswers[key] && !seen {
		a.odd[key] = h.Name + ": " + r.String()
	}
}

// fleetAnswers are the answers a racer may get on a fleet: the one create
// that publishes, the ones that meet its session, and the fleet's refusals
// while another host holds the identity.
var fleetAnswers = map[string]bool{"published": true, "existing": true,
	"refused/identity_existing_owner": true, "refused/identity_reserved_live": true,
	"refused/identity_reserved_unknown": true, "refused/identity_fence_contended": true}

// raceRound runs perHost concurrent creates of spec on every host and
// returns their answers; every racer must answer one JSON document.
func raceRound(t *testing.T, hosts []*NSHost, spec Spec, perHost int) *raceAnswers {
	ans := &raceAnswers{n: map[string]int{}, odd: map[string]string{}}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, h := range hosts {
		for range perHost {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				r, err := h.runCLI(t, CLIOpts{}, spec.Args()...)
				var a Answer
				if err == nil {
					err = decodeOne(r.Stdout, &a)
				}
				if err != nil {
					t.Errorf("racer on %s: %v\n%s", h.Name, err, r)
					return
				}
				key := a.Status
				if a.Error != nil {
					key += "/" + a.Error.Code
				}
				ans.add(key, h, r)
			}()
		}
	}
	close(start)
	wg.Wait()
	return ans
}

// TestFleetHostsRace: three hosts, each in its own namespaces, race 16
// creates each of one identity, round after round (10 rounds in make test,
// 50 under SKC_SOAK). Every racer answers published, existing or refused
// with a fleet code; exactly one publishes; the identity then has exactly
// one agent in the whole machine — on the publisher's host, never two at
// once while the round runs (sampled from /proc) — and one session in the
// three tmux servers.
func TestFleetHostsRace(t *testing.T) {
	url, hosts, daemons := nsFleet(t, "host-a", "host-b", "host-c")
	checkHostRows(t, url, hosts)
	const perHost = 16
	rounds := fleetRaceRounds()
	for round := range rounds {
		token := agentToken()
		spec := agentSpec(t, fmt.Sprint("race-", round), token)
		stop := make(chan struct{})
		most := watchAgents(token, stop, 20*time.Millisecond)
		ans := raceRound(t, hosts, spec, perHost)
		t.Logf("round %d: %v", round, ans.n)
		total := 0
		for k, n := range ans.n {
			total += n
			if !fleetAnswers[k] {
				t.Errorf("round %d: answer %q: %v\n%s", round, k, ans.n, ans.odd[k])
			}
		}
		if total != perHost*len(hosts) || len(ans.publisher) != 1 {
			close(stop)
			t.Fatalf("round %d: %d answers, %d published; want %d answers, exactly 1 published: %v",
				round, total, len(ans.publisher), perHost*len(hosts), ans.n)
		}
		waitOneAgent(t, hosts, token, ans.publisher[0])
		close(stop)
		if m := most.Load(); m > 1 {
			t.Fatalf("round %d: %d agents of the identity ran at once", round, m)
		}
		for _, h := range hosts {
			h.NoteSession(t)
		}
		checkOnePerIdentity(t, daemons, round+1)
	}
}

// TestFleetFaultPoints: host A's daemon is SIGKILLed at each point of a
// create, hosts B and C up. While A is down, B and C never start a second
// session: their creates are refused for host-a, and the identity's agents
// (none, or the one A's tmux server kept) all live in A's namespace. A's
// restarted daemon resolves its attempt as on one host; then the identity
// has exactly one agent, on A, and one session, which B and C meet as
// host-a's. The hosts stay up across the points, as a fleet
// does; each point has its own identity.
func TestFleetFaultPoints(t *testing.T) {
	_, hosts, daemons := nsFleet(t, "host-a", "host-b", "host-c")
	a, others := hosts[0], daemons[1:]
	daemons[0].Stop(t) // A's daemons are started per point, each with its fault
	identities := 0    // of the points run so far (-run may pick some)
	for _, fp := range faultPoints {
		t.Run(fp.point, func(t *testing.T) {
			identities++
			token := agentToken()
			stop := make(chan struct{})
			most := watchAgents(token, stop, 20*time.Millisecond)
			defer close(stop)
			d := a.Start(t, DaemonOpts{Fault: "after:" + fp.point})
			spec := agentSpec(t, "fault-"+fp.point, token)
			r := a.CLI(t, spec.Args()...)
			if st := d.WaitExit(t, stopDeadline); st == nil || signalOf(st) != syscall.SIGKILL {
				d.Kill(t)
				t.Fatalf("host-a did not die at after:%s (%v)\ncreate: %s", fp.point, st, r)
			}
			a.NoteSession(t)
			for _, o := range others {
				checkHeldBy(t, o, spec, "host-a", "", "while host-a is down after "+fp.point)
			}
			for _, pid := range sleepers(token) {
				if !a.In(pid) {
					t.Errorf("after:%s: an agent (pid %d) runs on %s while host-a is down", fp.point, pid, nameOf(hostOf(hosts, pid)))
				}
			}
			d2 := a.Start(t, DaemonOpts{})
			second := d2.MustCreate(t, spec, fp.second)
			for _, o := range others {
				checkHeldBy(t, o, spec, "host-a", second.Name, "after host-a's restart")
			}
			waitOneAgent(t, hosts, token, a)
			if m := most.Load(); m > 1 {
				t.Errorf("after:%s: %d agents of the identity ran at once", fp.point, m)
			}
			checkOnePerIdentity(t, append([]*Daemon{d2}, others...), identities)
			d2.Stop(t)
		})
	}
}

// checkHeldBy: a create of spec on d meets the identity held by host: 409
// identity_reserved_unknown (a row of host's that cannot be proven dead from
// here) or identity_existing_owner with details.host, or — as the contract
// plans for a session published elsewhere — existing with session.host.
// Where name is not "", the session met must be that one.
func checkHeldBy(t *testing.T, d *Daemon, spec Spec, host, name, when string) {
	t.Helper()
	r := d.CLI(t, spec.Args()...)
	var ans struct {
		Status  string `json:"status"`
		Session *struct {
			Name string `json:"name"`
			Host string `json:"host"`
		} `json:"session"`
		Error *APIError `json:"error"`
	}
	if err := decodeOne(r.Stdout, &ans); err != nil {
		t.Fatalf("%s: %v\n%s", when, err, r)
	}
	switch {
	case ans.Status == "existing" && ans.Session != nil && r.Code == 0:
		if ans.Session.Host != host || (name != "" && ans.Session.Name != name) {
			t.Fatalf("%s: existing %s on %q, want %q on %s\n%s", when, ans.Session.Name, ans.Session.Host, name, host, r)
		}
	case ans.Error != nil && r.Code == 3 && ans.Error.Code == "identity_existing_owner":
		if ans.Error.Details["host"] != host || (name != "" && ans.Error.Details["session_name"] != name) {
			t.Fatalf("%s: refused for %v, want %q on %s\n%s", when, ans.Error.Details, name, host, r)
		}
	case ans.Error != nil && r.Code == 3 && ans.Error.Code == "identity_reserved_unknown":
		if ans.Error.Details["host"] != host || name != "" {
			t.Fatalf("%s: refused for %v, want %s's session %q\n%s", when, ans.Error.Details, host, name, r)
		}
	default:
		t.Fatalf("%s: want the identity held by %s\n%s", when, host, r)
	}
}

// TestFleetTmuxServerDeath: host A's tmux server is SIGKILLed under the
// identity's session (found by the pid A's daemon reports, which is A's
// namespace's, mapped to this test's). A's daemon resolves its generation
// (one ended verdict, the agent gone) and only then may host B create the
// identity, while C is refused for B; there is never a session, or an
// agent, on two hosts.
func TestFleetTmuxServerDeath(t *testing.T) {
	_, hosts, daemons := nsFleet(t, "host-a", "host-b", "host-c")
	a, b, c := daemons[0], daemons[1], daemons[2]
	token := agentToken()
	spec := agentSpec(t, "fleet-tmux-death", token)
	sess := a.MustCreate(t, spec, "published")
	waitOneAgent(t, hosts, token, hosts[0])
	checkHeldBy(t, b, spec, "host-a", sess.Name, "host-a's session live")
	inner := a.List(t).Census.ServerPID
	server := hosts[0].OuterPID(inner)
	if server == 0 {
		t.Fatalf("host-a's tmux server (pid %d in its namespace) not found from outside", inner)
	}
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", server)); !strings.HasPrefix(string(comm), "tmux") {
		t.Fatalf("pid %d (host-a's %d) is %q, not a tmux server", server, inner, comm)
	}
	if err := syscall.Kill(server, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	v := a.WaitVerdict(t, "host-a's ended verdict of "+sess.Name, endedFor(sess.Name))
	if v.Event.Reason != "server_exited" && v.SKC.ExitKind != "owner_lost" {
		t.Errorf("ended verdict %s: want reason server_exited or exit_kind owner_lost", v)
	}
	WaitFor(t, waitDeadline, "host-a's agent gone", func() error {
		if pids := sleepers(token); len(pids) != 0 {
			return fmt.Errorf("agents %v", pids)
		}
		return nil
	})
	sb := b.MustCreate(t, spec, "published")
	if sb.Name == sess.Name {
		t.Errorf("host-b's session reuses host-a's name %s", sb.Name)
	}
	checkHeldBy(t, c, spec, "host-b", sb.Name, "host-b's session live")
	waitOneAgent(t, hosts, token, hosts[1])
	if len(a.AgentSessions(t)) != 0 {
		t.Errorf("host-a still has agent sessions after its server died")
	}
	checkOnePerIdentity(t, daemons, 1)
}
