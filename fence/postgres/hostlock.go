package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// A host name is one daemon's in a fleet: every row and verdict it writes
// carries the name, and its recovery judges the name's generations by its
// own tmux server. A second daemon under the same name — two homes on one
// machine both keeping the default, the hostname — took the first one's
// generations for its own, found them missing from its server and stopped
// every one of them (found outside-in). So a daemon holds its name for its
// life: a session-level advisory lock on a connection of its own, which
// PostgreSQL releases when that connection ends — the daemon's exit, even by
// SIGKILL (the kernel closes its socket), or the server's notice that the
// peer is gone (the keepalives below) — never by a timeout of ours.

// hostLockSpace is the first key of the two-key advisory locks on host names
// (the second is the name's hashtext); the migration lock uses the one-key
// form, another key space.
const hostLockSpace int32 = 0x736b6368

// hostLockWait is how long a start waits for a name's holder to go (a daemon
// just killed); a variable for tests.
var hostLockWait = 10 * time.Second

// hostLockCheck is how often the holding connection is checked, and taken
// again once lost.
const hostLockCheck = time.Second

// lockHostName takes this daemon's host name, waiting up to hostLockWait for
// a holder that is going (a daemon just killed: PostgreSQL ends its backend
// once it reads the closed socket). A holder left from an earlier boot of
// this very machine is over (its boot ended), so its backend is ended. A
// name still held after the wait is refused: invalid_request, field host.
func (s *Store) lockHostName(ctx context.Context) error {
	deadline := time.Now().Add(hostLockWait)
	for {
		refusal := s.holdLocalName()
		if refusal == nil {
			conn, held, err := s.tryHostLock(ctx)
			switch {
			case err != nil:
				return s.unavailable("host_lock", err)
			case held:
				s.hostConn = conn
				s.hostStop, s.hostDone = make(chan struct{}), make(chan struct{})
				go s.keepHostLock()
				return nil
			case s.endStaleHolder(ctx):
				continue
			}
			refusal = verdict.Errorf(verdict.CodeInvalidRequest, map[string]any{"field": "host", "host": s.host.Name},
				"host name %q is held by another running daemon on this fleet's database (another home on this "+
					"machine, or another machine of the same name): give each daemon a name of its own "+
					"(serve --host-name, SKC_HOST)", s.host.Name)
		}
		if time.Now().After(deadline) {
			return refusal
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return s.unavailable("host_lock", err)
		}
	}
}

// tryHostLock opens the holding connection and tries the name's lock on it;
// the connection is closed again when the lock is another's.
func (s *Store) tryHostLock(ctx context.Context) (*pgx.Conn, bool, error) {
	conn, err := pgx.ConnectConfig(ctx, s.connCfg.Copy())
	if err != nil {
		return nil, false, err
	}
	// A holder whose machine died without closing its connection is seen
	// gone by the server within ~25 s (ignored on unix sockets, where the
	// server's machine is the host's).
	var held bool
	_, err = conn.Exec(ctx, `SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3`)
	if err == nil {
		err = conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, hashtext($2))`, hostLockSpace, s.host.Name).Scan(&held)
	}
	if err != nil || !held {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, false, err
	}
	return conn, true, nil
}

// endStaleHolder ends the backends holding the name's lock when the fleet's
// record of the name is this machine's in an earlier boot: the daemon that
// took it cannot be running any more. It reports whether it ended any.
func (s *Store) endStaleHolder(ctx context.Context) bool {
	var machine, boot string
	err := s.pool.QueryRow(ctx, `SELECT machine_id, boot_id FROM hosts WHERE name = $1`, s.host.Name).Scan(&machine, &boot)
	if err != nil || machine != s.host.MachineID || boot == s.host.BootID || s.host.MachineID == "" {
		return false
	}
	var ended int
	err = s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = $1::int4::oid
		AND objid = hashtext($2)::oid`, hostLockSpace, s.host.Name).Scan(&ended)
	return err == nil && ended > 0
}

// keepHostLock checks the holding connection every hostLockCheck and takes
// the lock again on a new one when it was lost (the database restarted or
// failed over). Taken meanwhile by a daemon of the same name, it goes on
// trying: the newcomer's start was not refused, and nothing here can stop it.
func (s *Store) keepHostLock() {
	defer close(s.hostDone)
	t := time.NewTicker(hostLockCheck)
	defer t.Stop()
	for {
		select {
		case <-s.hostStop:
			if s.hostConn != nil {
				_ = s.hostConn.Close(context.Background())
			}
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), hostLockCheck)
		if s.hostConn != nil && s.hostConn.Ping(ctx) != nil {
			_ = s.hostConn.Close(ctx)
			s.hostConn = nil
		}
		if s.hostConn == nil {
			if conn, held, err := s.tryHostLock(ctx); err == nil && held {
				s.hostConn = conn
			}
		}
		cancel()
	}
}

// unlockHostName ends the holding connection and the machine's hold (Close).
func (s *Store) unlockHostName() {
	if s.hostStop != nil {
		close(s.hostStop)
		<-s.hostDone
	}
	if s.localName != nil {
		_ = s.localName.Close()
	}
}

// holdLocalName holds the host name on this machine: a listening socket in
// the abstract unix namespace, named for the name and the fleet's database,
// which the kernel releases when the daemon exits (SIGKILL included). The
// database's lock alone vanishes while PostgreSQL restarts: a second daemon
// of the name started in that moment took it before the first took it back,
// and stopped every agent of the first (found outside-in). Two daemons of one
// name on one machine are the usual collision (two homes keeping the default
// hostname), and this hold does not depend on the database. A holder is
// named by its pid (the listener's credentials, read by a connection). Where
// no abstract socket can be bound for another reason, the database's lock
// is the only one.
func (s *Store) holdLocalName() error {
	if s.localName != nil {
		return nil
	}
	sum := sha256.Sum256([]byte(s.url + "\x00" + s.host.Name))
	addr := &net.UnixAddr{Name: "@skc-supervisor/host/" + hex.EncodeToString(sum[:16]), Net: "unix"}
	ln, err := net.ListenUnix("unix", addr)
	if err == nil {
		s.localName = ln
		go func() { // probes only: each is closed at once
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		return nil
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return nil
	}
	details := map[string]any{"field": "host", "host": s.host.Name}
	if pid := listenerPID(addr); pid > 0 {
		details["pid"] = pid
	}
	return verdict.Errorf(verdict.CodeInvalidRequest, details,
		"host name %q is held by another running daemon on this machine (pid %v) for this fleet's database: "+
			"give each daemon a name of its own (serve --host-name, SKC_HOST)", s.host.Name, details["pid"])
}

// listenerPID is the pid of the process listening at addr (0: unknown).
func listenerPID(addr *net.UnixAddr) int {
	c, err := net.DialUnix("unix", nil, addr)
	if err != nil {
		return 0
	}
	defer c.Close()
	raw, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) { cred, _ = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if cred == nil {
		return 0
	}
	return int(cred.Pid)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
