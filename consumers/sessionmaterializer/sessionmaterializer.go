// Package sessionmaterializer is the session-materializer consumer group:
// it builds the durable history of sessions in
// Postgres (session_messages) from sessions.transcript, and removes a
// deleted session's history when sessions.events says so.
//
// Design:
//
//   - Batch mode: the runner hands over up to MaxBatch records of one
//     partition, in offset order; the handler applies them in one
//     statement (transcript.Apply). The topic is keyed by session id, so a
//     session's records are in one partition, in the order the gateway
//     published them, and the rows' seq follows it: that is the history's
//     order.
//   - Idempotent: every row is keyed by its event id (ON CONFLICT DO
//     NOTHING), so redelivery and replay insert nothing new.
//   - Search off the hot path: the full-text vector was most of a row's
//     cost, so the statement only queues new rows for it
//     (session_message_search_queue) and the Indexer, which the worker
//     runs next to the group, computes it: a row is in the messages API
//     when its batch commits and in search shortly after (about the
//     Indexer's interval, 200 ms, when it keeps up).
//   - A record that is not a well-formed transcript event (ids that are
//     not UUIDs, another event type) can never apply: the batch reports it
//     through consumers.FailedRecords as permanent and the runner
//     dead-letters it, while the rest of the batch applies. A database
//     error fails the batch; the runner retries its records one at a time.
//   - sessions.events records of kind deleted remove the session's rows and
//     tombstone it (a later replay of its transcript inserts nothing); every
//     other sessions.events record is skipped.
package sessionmaterializer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/internal/transcript"
	"github.com/proliferate/proliferate/schemas"
)

// Deps configure the handler.
type Deps struct {
	Pool *pgxpool.Pool
	Log  *slog.Logger
}

// BatchHandler applies batches of sessions.transcript and sessions.events
// records (the runner must decode them: consumers.Config.Codec).
func BatchHandler(d Deps) consumers.BatchHandler {
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	return func(ctx context.Context, msgs []*consumers.Message) error {
		failed := consumers.FailedRecords{}
		var rows []transcript.Row
		var deleted []string
		for _, m := range msgs {
			if m.Event == nil {
				failed[m] = consumers.Permanent(errors.New("session materializer: record not decoded (the runner needs a codec)"))
				continue
			}
			switch p := m.Event.Payload.(type) {
			case *schemas.SessionTranscript:
				r, err := transcript.RowFromEvent(m.Event)
				if err != nil {
					failed[m] = consumers.Permanent(err)
					continue
				}
				rows = append(rows, r)
			case *schemas.SessionEvent:
				if p.Kind == schemas.SessionKindDeleted {
					deleted = append(deleted, p.SessionID)
				}
			default:
				failed[m] = consumers.Permanent(errors.New("session materializer: unexpected event type " + m.Event.EventType))
			}
		}
		// sessions.events and sessions.transcript are different topics, so
		// a batch holds one of them: deletions and inserts never interleave
		// within a batch.
		err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
			// The two topics' partitions are applied concurrently, so a
			// session's deletion and a batch of its entries can run at
			// once: under read committed neither would see the other's
			// uncommitted rows (entries inserted after the tombstone, or
			// left behind by the DELETE). Per-session advisory locks,
			// exclusive for a deletion and shared for inserts, taken in a
			// statement before the writes, order them.
			if err := lockSessions(ctx, tx, deleted, rows); err != nil {
				return err
			}
			for _, id := range deleted {
				if err := transcript.DeleteSession(ctx, tx, id); err != nil {
					return err
				}
			}
			n, err := transcript.Apply(ctx, tx, rows)
			if err != nil {
				return err
			}
			if dup := int64(len(rows)) - n; dup > 0 {
				log.Debug("session materializer: duplicates skipped", "count", dup)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(failed) > 0 {
			return failed
		}
		return nil
	}
}

// lockSessions takes the transaction-scoped advisory lock of every session
// the batch touches, in key order (no deadlock between batches): exclusive
// for deletions, shared for inserts, so inserts of one session never wait
// for each other.
func lockSessions(ctx context.Context, tx pgx.Tx, deleted []string, rows []transcript.Row) error {
	fn, ids := "pg_advisory_xact_lock", deleted
	if len(deleted) == 0 {
		fn = "pg_advisory_xact_lock_shared"
		seen := map[string]bool{}
		for _, r := range rows {
			if !seen[r.P.SessionID] {
				seen[r.P.SessionID] = true
				ids = append(ids, r.P.SessionID)
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `SELECT `+fn+`(k) FROM (SELECT DISTINCT hashtextextended(s, 20) AS k FROM unnest($1::text[]) s ORDER BY k) q`, ids)
	if err != nil {
		return fmt.Errorf("session materializer: lock sessions: %w", err)
	}
	return nil
}
