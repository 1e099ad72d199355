package api

import (
	"context"
	"net"

	"golang.org/x/sys/unix"
)

// PeerCred is the kernel's SO_PEERCRED answer for one connection: who was at
// the other end when it connected. Unlike anything in the request, it cannot
// be forged by the caller.
type PeerCred struct {
	PID int32
	UID uint32
	GID uint32
}

type peerKey struct{}

// withPeerCred is http.Server.ConnContext: it reads SO_PEERCRED once per
// connection and stores it in the connection's context. A connection whose
// credentials cannot be read carries none and is refused by the guard.
func withPeerCred(ctx context.Context, c net.Conn) context.Context {
	cred, err := ReadPeerCred(c)
	if err != nil {
		return ctx
	}
	return WithPeer(ctx, cred)
}

// WithPeer returns ctx carrying cred (tests use it to drive Handler directly).
func WithPeer(ctx context.Context, cred PeerCred) context.Context {
	return context.WithValue(ctx, peerKey{}, cred)
}

// PeerFrom returns the peer credentials of the request's connection.
func PeerFrom(ctx context.Context) (PeerCred, bool) {
	cred, ok := ctx.Value(peerKey{}).(PeerCred)
	return cred, ok
}

// ReadPeerCred reads SO_PEERCRED from a unix connection.
func ReadPeerCred(c net.Conn) (PeerCred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return PeerCred{}, &net.OpError{Op: "peercred", Net: c.LocalAddr().Network(), Err: unix.EAFNOSUPPORT}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return PeerCred{}, err
	}
	var ucred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		ucred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return PeerCred{}, err
	}
	if serr != nil {
		return PeerCred{}, serr
	}
	return PeerCred{PID: ucred.Pid, UID: ucred.Uid, GID: ucred.Gid}, nil
}
