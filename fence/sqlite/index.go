package sqlite

import (
	"context"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// PublishedByTmux returns the published, not-ended generation living in tmux
// session tmuxID of the server life (serverPID, serverStart): what end detection
// looks up for every session the census sees removed. It is one indexed read
// (identities_tmux), so a mass end of n sessions costs n lookups, not n scans.
// Tmux ids belong to one server life, so the life is part of the key.
func (s *Store) PublishedByTmux(ctx context.Context, serverPID int, serverStart int64, tmuxID string) (fence.Published, bool, error) {
	if tmuxID == "" || serverPID <= 0 {
		return fence.Published{}, false, nil
	}
	if err := s.writable("published"); err != nil {
		return fence.Published{}, false, err
	}
	p, err := scanPublished(s.r.QueryRowContext(ctx, `SELECT `+pubCols+` FROM identities
		WHERE server_pid = ? AND server_start = ? AND tmux_id = ? AND ended = 0
		ORDER BY published_at DESC LIMIT 1`, serverPID, serverStart, tmuxID))
	p, ok, err := noRows(p, err)
	if err != nil {
		return fence.Published{}, false, s.dbErr("published", err)
	}
	return p, ok, nil
}

// VerdictsFor returns the identity's most recent verdicts, up to limit (all of
// them when limit <= 0), oldest first. It reads the verdicts_identity index, so
// its cost follows the identity's verdicts, not the journal's length. Verdicts
// written before schema version 2 are found too: the migration backfilled their
// identity columns from the records.
func (s *Store) VerdictsFor(ctx context.Context, id fence.Identity, limit int) ([]verdict.Record, error) {
	id, err := fence.CanonicalIdentity(id)
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	if err := s.writable("verdicts"); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT sequence, record FROM (
			SELECT sequence, record FROM verdicts WHERE state_dir = ? AND session_id = ?
			ORDER BY sequence DESC LIMIT ?)
		ORDER BY sequence`, id.StateDir, id.SessionID, limit)
	if err != nil {
		return nil, s.dbErr("verdicts", err)
	}
	out, err := s.scanVerdicts(rows)
	if out == nil && err == nil {
		out = []verdict.Record{}
	}
	return out, err
}
