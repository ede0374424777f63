package sessions

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/sessions/sessionsdb"
	"github.com/proliferate/proliferate/schemas"
)

// RecordLimit emits a limit_exceeded session event: the session's sandbox
// hit a resource limit (out of memory, process limit). The session's
// state is unchanged (a dead agent is the gateway's to restart).
func (s *Store) RecordLimit(ctx context.Context, id string, limit schemas.SandboxLimit) error {
	if !isUUID(id) {
		return ErrNotFound
	}
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		sess, err := scan(sessionsdb.New(tx).SessionByID(ctx, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("record limit of session %s: %w", id, err)
		}
		return s.emit(ctx, tx, sess, schemas.SessionKindLimitExceeded, func(e *schemas.SessionEvent) { e.Limit = &limit })
	})
}
