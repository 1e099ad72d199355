package postgres

import (
	"errors"
	"testing"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/internal/pgtest"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

func openAs(t *testing.T, url string, h fence.Host) *Store {
	t.Helper()
	s, err := Open(url, fence.Options{Host: h}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestHostNameIsOneDaemons: a second daemon registering a host name another
// running daemon holds is refused (invalid_request, field host) — it took the
// first one's generations for its own and stopped them all (found outside-in)
// — and gets the name once the first is gone. A holder from an earlier boot
// of the same machine is over, and its hold is ended.
func TestHostNameIsOneDaemons(t *testing.T) {
	url := pgtest.DB(t)
	wait := hostLockWait
	hostLockWait = 300 * time.Millisecond
	t.Cleanup(func() { hostLockWait = wait })
	ctx := ctxT(t)
	h := fence.Host{Name: "dup", MachineID: "m1", BootID: "b1"}
	first := openAs(t, url, h)
	if err := first.RegisterHost(ctx); err != nil {
		t.Fatal(err)
	}
	second := openAs(t, url, h)
	err := second.RegisterHost(ctx)
	if verdict.CodeOf(err) != verdict.CodeInvalidRequest {
		t.Fatalf("a second daemon of the same name: %v, want invalid_request", err)
	}
	var ve *verdict.Error
	if !errors.As(err, &ve) || ve.Details["field"] != "host" {
		t.Fatalf("refusal %#v", err)
	}
	// The database's lock lost (PostgreSQL restarting ends every
	// connection): the machine's hold still refuses a second daemon.
	if _, err := first.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 2 AND classid = $1::int4::oid`, hostLockSpace); err != nil {
		t.Fatal(err)
	}
	if err := second.RegisterHost(ctx); verdict.CodeOf(err) != verdict.CodeInvalidRequest {
		t.Fatalf("a second daemon of the name while the database's lock is lost: %v, want invalid_request", err)
	}
	first.Close()
	if err := second.RegisterHost(ctx); err != nil {
		t.Fatalf("the name once its holder closed: %v", err)
	}
	// The machine rebooted: the holder's boot (b1) is over, and so is its
	// hold on the machine (released here by hand: one process plays both).
	dropLocal(second)
	rebooted := openAs(t, url, fence.Host{Name: "dup", MachineID: "m1", BootID: "b2"})
	if err := rebooted.RegisterHost(ctx); err != nil {
		t.Fatalf("after a reboot of the name's machine: %v", err)
	}
	// Another machine of the same name is not over.
	dropLocal(rebooted)
	other := openAs(t, url, fence.Host{Name: "dup", MachineID: "m2", BootID: "b9"})
	if err := other.RegisterHost(ctx); verdict.CodeOf(err) != verdict.CodeInvalidRequest {
		t.Fatalf("another machine of the same name: %v, want invalid_request", err)
	}
}

// dropLocal releases s's hold of its name on this machine, as the end of a
// machine's boot (or another machine) would.
func dropLocal(s *Store) {
	if s.localName != nil {
		s.localName.Close()
		s.localName = nil
	}
}
