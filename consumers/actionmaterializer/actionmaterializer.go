// Package actionmaterializer is the action-materializer consumer group: it
// builds the organization's audit trail in Postgres (audit_events, owned by
// internal/audit) from actions.invocations (every state change of an action
// an agent asked for, with who approved or denied it) and audit.events
// (secrets, members, API keys, integrations, action modes).
//
// Design:
//
//   - Batch mode: the runner hands over up to MaxBatch records of one
//     partition; the handler inserts their rows in one statement.
//   - Idempotent: every row is keyed by its event id (ON CONFLICT DO
//     NOTHING), so redelivery and replay insert nothing new. The trail is
//     read by time, not by arrival, so the order rows arrive in does not
//     matter.
//   - A record that can never become a row (not decodable, ids that are
//     not UUIDs, another event type) is reported through
//     consumers.FailedRecords as permanent and the runner dead-letters it
//     while the rest of the batch applies. A database error fails the
//     batch; the runner retries its records.
package actionmaterializer

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/internal/audit"
)

// Deps configure the handler.
type Deps struct {
	Pool *pgxpool.Pool
}

// BatchHandler applies batches of actions.invocations and audit.events
// records (the runner must decode them: consumers.Config.Codec).
func BatchHandler(d Deps) consumers.BatchHandler {
	return func(ctx context.Context, msgs []*consumers.Message) error {
		failed := consumers.FailedRecords{}
		rows := make([]audit.Row, 0, len(msgs))
		for _, m := range msgs {
			if m.Event == nil {
				failed[m] = consumers.Permanent(errors.New("action materializer: record not decoded (the runner needs a codec)"))
				continue
			}
			r, err := audit.RowFromEvent(m.Event)
			if err != nil {
				failed[m] = consumers.Permanent(err)
				continue
			}
			rows = append(rows, r)
		}
		if _, err := audit.Apply(ctx, d.Pool, rows); err != nil {
			return err
		}
		if len(failed) > 0 {
			return failed
		}
		return nil
	}
}
