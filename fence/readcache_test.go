package fence

import (
	"context"
	"testing"
)

// racedSource is a ReadSource whose reservation row is deleted by a commit
// that lands between the version's look and the row's read: the version
// still says nothing changed when the row is already gone.
type racedSource struct {
	id      Identity
	deleted bool // the racing commit landed
	version int64
}

func (s *racedSource) Version(context.Context) (int64, error) { return s.version, nil }
func (s *racedSource) Reserved(context.Context) ([]Identity, error) {
	if s.deleted {
		return nil, nil
	}
	return []Identity{s.id}, nil
}
func (s *racedSource) Reservation(context.Context, Identity) (Reservation, bool, error) {
	s.deleted, s.version = true, s.version+1 // the commit lands now
	return Reservation{}, false, nil
}
func (s *racedSource) JournalSince(context.Context, int64, int) ([]JournalRow, error) {
	return nil, nil
}
func (s *racedSource) JournalNewest(context.Context, int, int) ([]JournalRow, error) {
	return nil, nil
}
func (s *racedSource) JournalFor(context.Context, Identity, int) ([]JournalRow, error) {
	return nil, nil
}
func (s *racedSource) Reset() {}

// TestReadCacheRowVanishedIsStaleNotUnavailable: a reservation row deleted
// between the cache's version look and its read of the row is a stale
// cache, read again — it answered an error the daemon reported as
// fence_unavailable to a kill racing a create (found outside-in).
func TestReadCacheRowVanishedIsStaleNotUnavailable(t *testing.T) {
	src := &racedSource{id: Identity{StateDir: "/s", SessionID: "a"}, version: 1}
	c := NewReadCache(src)
	out, err := c.Reads(context.Background(), src.id, 5)
	if err != nil || out.Reservation != nil || string(out.ReservationJSON) != "null" {
		t.Fatalf("reads after the row's removal: %+v %v", out, err)
	}
}
