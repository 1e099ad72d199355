package fence

import "time"

// Options tune an engine's handle; the zero value is the production
// configuration. Every engine takes them (sqlite.Open(path, opt)), so tests
// inject owners, liveness and clocks the same way whatever the storage.
type Options struct {
	// BusyTimeout bounds how long a transition waits for another writer
	// (default 250 ms). Beyond it the answer is identity_fence_contended.
	BusyTimeout time.Duration
	// Lease is the diagnostic lease written with each row (default 1 minute).
	// It is informational only: expiry never authorizes takeover.
	Lease time.Duration
	// Liveness replaces the real owner liveness check (tests).
	Liveness func(pid int, incarnation string) Live
	// Self replaces this process's (pid, incarnation) as a row owner (tests
	// play several owners in one process). An error refuses Reserve with
	// identity_incarnation_unavailable.
	Self func() (pid int, incarnation string, err error)
	// Now replaces the clock (tests).
	Now func() time.Time
	// Host is this process's host as an owner: its empty fields are this
	// machine's (LocalHost: the hostname, /etc/machine-id, the boot id).
	// The daemon sets Name from SKC_HOST / --host-name; tests play other
	// hosts and boots.
	Host Host
}

// WithDefaults fills in the zero fields: what an engine's Open does first.
func (opt Options) WithDefaults() Options {
	if opt.BusyTimeout <= 0 {
		opt.BusyTimeout = 250 * time.Millisecond
	}
	if opt.Lease <= 0 {
		opt.Lease = time.Minute
	}
	if opt.Liveness == nil {
		opt.Liveness = Liveness
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return opt
}
