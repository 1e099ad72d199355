package fencetest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// testRemoteOwnerIsUnknown: an owner on another host is never proven dead
// from here — not by its pid (the injected probe says dead), not by its lease
// — so its row blocks Reserve, Reclaim and recovery with
// identity_reserved_unknown naming the host (fail closed). Another host is
// another name, or the same name on another machine.
func testRemoteOwnerIsUnknown(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name        string
		them, us    fence.Host
		wantMachine bool
	}{
		{"other name", fence.Host{Name: "host-a"}, fence.Host{Name: "host-b"}, false},
		{"same name, other machine", fence.Host{Name: "host-a", MachineID: "aaaa"}, fence.Host{Name: "host-a", MachineID: "bbbb"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWorld(t, h)
			a, b := w.OwnerOn(1, tc.them), w.OwnerOn(2, tc.us)
			r := MustReserve(t, a, w.ID("x"), w.Spec("x"))
			if r.Host != tc.them.Name || r.HostBootID == "" || (tc.wantMachine && r.HostMachineID != tc.them.MachineID) {
				t.Fatalf("the row does not carry its owner's host: %+v", r)
			}
			AdvanceTo(t, a, &r, fence.PhaseSpawned)
			w.Set(1, fence.Dead) // what a pid probe here would say: it must not be asked
			res, err := b.Reserve(ctx, w.ID("x"), w.Spec("x"))
			WantCode(t, err, verdict.CodeIdentityReservedUnknown)
			var ve *verdict.Error
			if !errors.As(err, &ve) || ve.Details["host"] != tc.them.Name {
				t.Fatalf("refusal details %v, want host %q (outcome %s)", ve, tc.them.Name, res.Outcome)
			}
			_, err = b.Reclaim(ctx, w.ID("x"), r.ID, w.Spec("x"))
			WantCode(t, err, verdict.CodeIdentityReservedUnknown)
			_, err = b.RecoverAbandoned(ctx, r, failInspector{t})
			WantCode(t, err, verdict.CodeIdentityReservedUnknown)
			rows, err := b.Reservations(ctx)
			if err != nil || len(rows) != 1 || rows[0].ID != r.ID || rows[0].Host != tc.them.Name {
				t.Fatalf("rows after the refusals: %+v %v", rows, err)
			}
		})
	}
}

// testEarlierBootIsDead: a row of this host written in an earlier boot is
// dead whatever a pid probe would say (the pid may belong to another process
// by now): a reserved-phase row is reclaimed in place, a later one goes to
// recovery. In the same boot the probe decides, as before.
func testEarlierBootIsDead(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	before := fence.Host{Name: "host-a", BootID: "boot-1"}
	now := fence.Host{Name: "host-a", BootID: "boot-2"}
	a, b := w.OwnerOn(1, before), w.OwnerOn(2, now)
	r := MustReserve(t, a, w.ID("x"), w.Spec("x")) // owner 1 stays Alive to a probe
	res, err := b.Reserve(ctx, w.ID("x"), w.Spec("x"))
	if err != nil || res.Outcome != fence.Reserved || res.Displaced == nil || res.Displaced.ID != r.ID {
		t.Fatalf("a row of an earlier boot: %+v %v", res, err)
	}
	if res.Reservation.HostBootID != "boot-2" || res.Reservation.Host != "host-a" {
		t.Fatalf("the new row's host: %+v", res.Reservation)
	}
	r2 := MustReserve(t, a, w.ID("y"), w.Spec("y"))
	AdvanceTo(t, a, &r2, fence.PhaseHelperInvoked)
	if res, err := b.Reserve(ctx, w.ID("y"), w.Spec("y")); err != nil || res.Outcome != fence.NeedsRecovery {
		t.Fatalf("a later phase of an earlier boot: %+v %v", res, err)
	}
	c := w.OwnerOn(3, now) // the same boot as b: the probe decides
	r3 := MustReserve(t, b, w.ID("z"), w.Spec("z"))
	_, err = c.Reserve(ctx, w.ID("z"), w.Spec("z"))
	WantCode(t, err, verdict.CodeIdentityReservedLive)
	w.Set(2, fence.Dead)
	if res, err := c.Reserve(ctx, w.ID("z"), w.Spec("z")); err != nil || res.Displaced == nil || res.Displaced.ID != r3.ID {
		t.Fatalf("a dead owner of this boot: %+v %v", res, err)
	}
}

// testPublishedCarriesHost: a published generation records the host it runs
// on (its publisher's), in the table, the cache and `fence --json`.
func testPublishedCarriesHost(t *testing.T, h Harness) {
	w := NewWorld(t, h)
	a := w.OwnerOn(1, fence.Host{Name: "host-a", MachineID: "aaaa"})
	pub := PublishAt(t, a, w, "x", "$1", 55, 1000)
	if pub.Host != "host-a" || pub.HostMachineID != "aaaa" {
		t.Fatalf("published %+v", pub)
	}
	for _, get := range []func() (fence.Published, bool, error){
		func() (fence.Published, bool, error) { return a.PublishedFor(ctx, pub.Identity) },
		func() (fence.Published, bool, error) { return a.CachedPublished(ctx, pub.Identity.Digest()) },
	} {
		if p, ok, err := get(); err != nil || !ok || p.Host != "host-a" || p.HostMachineID != "aaaa" {
			t.Fatalf("read back: %+v %v %v", p, ok, err)
		}
	}
	b, err := json.Marshal(pub)
	if err != nil || !strings.Contains(string(b), `"host":"host-a"`) {
		t.Fatalf("json %s %v", b, err)
	}
}
