package census

import "context"

// syncLock serialises the census's lists (full, id-only) and admissions. It is
// a mutex a waiter can give up on: an admission must not be held past its
// create's deadline by a list stuck on a frozen tmux, and it must take the lock
// the moment a list releases it — the polling TryLock it replaces slept in
// 1 ms steps, which was most of an admission's cost while lists were frequent.
type syncLock chan struct{}

func newSyncLock() syncLock { return make(syncLock, 1) }

// Lock waits for the lock.
func (l syncLock) Lock() { l <- struct{}{} }

// LockCtx waits for the lock until ctx ends.
func (l syncLock) LockCtx(ctx context.Context) error {
	select {
	case l <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TryLock takes the lock if it is free and reports whether it did.
func (l syncLock) TryLock() bool {
	select {
	case l <- struct{}{}:
		return true
	default:
		return false
	}
}

// Unlock releases the lock.
func (l syncLock) Unlock() { <-l }
