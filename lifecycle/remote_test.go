package lifecycle

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/sqlite"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// publishOn publishes a generation of identity name as host, through its own
// fence handle, in a tmux session this daemon's server does not have.
func (e *env) publishOn(t *testing.T, host, name string) (fence.Identity, fence.Published) {
	t.Helper()
	ctx := context.Background()
	other, err := sqlite.Open(filepath.Join(e.home, "fence.sqlite"), fence.Options{Host: fence.Host{Name: host}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	id, spec := e.identity(name)
	rr, err := other.Reserve(ctx, id, spec)
	if err != nil || rr.Outcome != fence.Reserved {
		t.Fatalf("reserve as %s: %+v %v", host, rr, err)
	}
	r := rr.Reservation
	for _, st := range []struct {
		to fence.Phase
		p  fence.Patch
	}{
		{fence.PhaseHelperInvoked, fence.Patch{AttemptName: "skc-remote-" + r.ID}},
		{fence.PhaseSpawned, fence.Patch{TmuxID: "$900", PanePID: 77, ServerPID: 1, ServerStart: 2}},
		{fence.PhaseTagged, fence.Patch{}},
	} {
		if err := other.Advance(ctx, &r, st.to, st.p); err != nil {
			t.Fatalf("advance to %s: %v", st.to, err)
		}
	}
	pub, _, err := other.Publish(ctx, &r, verdict.Record{Action: verdict.ActionCreate,
		Outcome: verdict.OutcomeSuccess, Verdict: verdict.VerdictPublished, Reason: verdict.ReasonCreated,
		Identity: identityRef(id)})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Release(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	return id, pub
}

// TestRemoteSessionShownNotActedOn: a generation another host published is
// shown here from its record (its host, an attach hint for that host), by
// name and by identity; kill, restart, screen, input, output and wait refuse
// it with remote_session naming the host, and nothing is written. This
// host's own sessions carry its host name.
func TestRemoteSessionShownNotActedOn(t *testing.T) {
	e := startEnv(t, "", "", false)
	ctx := context.Background()
	_, local := e.create(t, "local")
	if local.Session.Host == "" || local.Session.Host != e.m.host.Name || local.Session.AttachHint != "" {
		t.Fatalf("a local session's host %q hint %q, want %q and none", local.Session.Host, local.Session.AttachHint, e.m.host.Name)
	}
	id, pub := e.publishOn(t, "host-elsewhere", "remote")
	for _, ref := range []Ref{{Name: pub.SessionName}, {Identity: &id}} {
		res, err := e.m.Show(ctx, ref)
		if err != nil || res.Session == nil || res.Session.Host != "host-elsewhere" ||
			res.Session.AttachHint != "skc-supervisor attach '"+pub.SessionName+"'" ||
			res.Session.Generation != pub.Generation || len(res.Verdicts) == 0 {
			t.Fatalf("show %+v: %+v %v", ref, res.Session, err)
		}
		b, err := e.m.AppendShowJSON(ctx, nil, ref)
		if err != nil || !strings.Contains(string(b), `"host":"host-elsewhere"`) {
			t.Fatalf("show --json %+v: %s %v", ref, b, err)
		}
	}
	if l, err := e.m.List(ctx); err != nil || len(l.Sessions) != 1 || l.Sessions[0].Name != local.Session.Name {
		t.Fatalf("ls: %+v %v, want the local session only", l.Sessions, err)
	}
	l, err := e.m.ListFleet(ctx)
	if err != nil || len(l.Sessions) != 2 || l.Sessions[0].Host != e.m.host.Name ||
		l.Sessions[1].Name != pub.SessionName || l.Sessions[1].Host != "host-elsewhere" {
		t.Fatalf("ls --fleet: %+v %v", l.Sessions, err)
	}
	before := len(e.verdicts(id))
	acts := map[string]func(Ref) error{
		"kill":    func(r Ref) error { _, err := e.m.Kill(ctx, r); return err },
		"restart": func(r Ref) error { _, err := e.m.Restart(ctx, r); return err },
		"screen":  func(r Ref) error { _, err := e.m.Screen(ctx, r, 0, false); return err },
		"input":   func(r Ref) error { return e.m.Input(ctx, r, Input{Text: "x"}) },
		"output": func(r Ref) error {
			sub, err := e.m.FollowOutput(ctx, r)
			if err == nil {
				sub.Close()
			}
			return err
		},
		"wait exit": func(r Ref) error { _, err := e.m.Wait(ctx, r, WaitRequest{Exit: true}); return err },
	}
	for what, act := range acts {
		for _, ref := range []Ref{{Name: pub.SessionName}, {Identity: &id}} {
			err := act(ref)
			if ve := verdict.AsError(err); ve == nil || ve.Code != verdict.CodeRemoteSession ||
				ve.Details["host"] != "host-elsewhere" {
				t.Errorf("%s %+v: %v, want remote_session naming host-elsewhere", what, ref, err)
			}
		}
	}
	if p, ok, err := e.store.PublishedFor(ctx, id); err != nil || !ok || p.Ended || p.Stopping != nil {
		t.Fatalf("the remote generation was touched: %+v %v %v", p, ok, err)
	}
	if after := len(e.verdicts(id)); after != before {
		t.Fatalf("refusals wrote verdicts: %d then %d", before, after)
	}
}

// TestForgetHostFreesItsIdentities: on the SQLite fence too, `fence forget`
// of a host that is gone clears its running generation with one released
// verdict (reason host_forgotten) in the journal, after which the identity
// is created here. This host is refused, and forgetting it again finds
// nothing.
func TestForgetHostFreesItsIdentities(t *testing.T) {
	e := startEnv(t, "", "", false)
	ctx := context.Background()
	id, pub := e.publishOn(t, "host-gone", "stuck")
	_, _, err := e.m.ForgetHost(ctx, e.m.host.Name)
	if ve := verdict.AsError(err); ve == nil || ve.Code != verdict.CodeInvalidRequest || ve.Details["field"] != "host" {
		t.Fatalf("forget this host: %v", err)
	}
	fg, rec, err := e.m.ForgetHost(ctx, "host-gone")
	if err != nil || len(fg.Published) != 1 || fg.Published[0].Generation != pub.Generation ||
		rec.Reason != verdict.ReasonHostForgotten || rec.Verdict != verdict.VerdictReleased || rec.Sequence == 0 {
		t.Fatalf("forget: %+v %+v %v", fg, rec, err)
	}
	recs, err := e.store.VerdictsSince(ctx, rec.Sequence-1, 0)
	if err != nil || len(recs) != 1 || recs[0].Evidence["host"] != "host-gone" {
		t.Fatalf("the forget's verdict in the journal: %+v %v", recs, err)
	}
	if _, _, err := e.m.ForgetHost(ctx, "host-gone"); verdict.CodeOf(err) != verdict.CodeNotFound {
		t.Fatalf("forget again: %v", err)
	}
	_, spec := e.identity("stuck")
	res, err := e.m.Create(ctx, CreateRequest{Identity: id, Spec: spec, Wait: time.Second})
	if err != nil || res.Status != verdict.VerdictPublished || res.Session.Generation != pub.Generation+1 ||
		res.Session.Host != e.m.host.Name {
		t.Fatalf("create after the forget: %+v %v", res, err)
	}
}

// TestReleaseOtherHostsRow: `fence release` of a row another host's process
// holds releases it (nothing here can prove that owner alive) and says its
// liveness is unknown — its pid names nothing on this machine, so "dead"
// (what a local probe of that pid answered) was not true.
func TestReleaseOtherHostsRow(t *testing.T) {
	e := startEnv(t, "", "", false)
	ctx := context.Background()
	other, err := sqlite.Open(filepath.Join(e.home, "fence.sqlite"), fence.Options{Host: fence.Host{Name: "elsewhere"}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	id, spec := e.identity("remote-row")
	rr, err := other.Reserve(ctx, id, spec)
	if err != nil || rr.Outcome != fence.Reserved {
		t.Fatalf("reserve as elsewhere: %+v %v", rr, err)
	}
	rec, err := e.m.Release(ctx, rr.Reservation.ID)
	if err != nil || rec.Verdict != verdict.VerdictReleased {
		t.Fatalf("release: %+v %v", rec, err)
	}
	if rec.Evidence["owner_liveness"] != fence.LiveUnknown.String() {
		t.Fatalf("owner_liveness %v, want %s", rec.Evidence["owner_liveness"], fence.LiveUnknown)
	}
}
