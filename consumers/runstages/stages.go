// Package runstages holds the stages of an automation run: the run-enricher
// and run-executor consumer groups (both on runs.lifecycle, keyed by run id)
// and the run finalizer (a periodic pass under a Postgres advisory lock).
//
// Every stage follows one rule: read the run, do the stage's work, and apply
// the transition with runs.Apply (a compare-and-set on the status under a
// row lock) in ONE transaction with the event-log rows and the next
// runs.lifecycle event (outbox). A redelivered or replayed record finds the
// run already past the stage and does nothing; a crash before the commit
// leaves the run where it was, and the redelivery does the work again.
//
// External calls (creating a session, sending the prompt) happen outside the
// transaction and are idempotent by key (run:{id}:session, run:{id}:prompt),
// so repeating them after a crash is harmless.
//
//	queued ──enricher──▶ enriching ──▶ ready          (one transaction)
//	                                └─▶ failed         (enrichment_failed)
//	ready ──executor──▶ running, then the prompt       (session_created, target_resolved)
//	                 └─▶ failed                        (missing_configuration, session_rejected)
//	running ──agent's automation.complete──▶ succeeded | failed | needs_human
//	live ──finalizer──▶ timed_out (deadline) | failed (inactivity, no completion, sandbox dead)
package runstages

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/schemas"
)

// Deps are what the stages need.
type Deps struct {
	Pool     *pgxpool.Pool
	Codec    *schemas.Codec
	Sessions runs.Sessions
	Log      *slog.Logger
}

func (d Deps) logger() *slog.Logger {
	if d.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return d.Log
}

// lifecycle extracts the run.lifecycle payload of a record.
func lifecycle(m *consumers.Message) (*schemas.RunLifecycle, error) {
	if m.Event == nil {
		return nil, consumers.Permanent(errors.New("record was not decoded"))
	}
	ev, ok := m.Event.Payload.(*schemas.RunLifecycle)
	if !ok {
		return nil, consumers.Permanent(fmt.Errorf("unexpected %s event on runs.lifecycle", m.Event.EventType))
	}
	return ev, nil
}

// inTx runs fn in a transaction; runs.ErrStale and runs.ErrNotFound from fn
// mean "someone else already did it" (or the run was deleted with its
// automation): the transaction rolls back and the record is done.
func inTx(ctx context.Context, pool *pgxpool.Pool, fn func(tx pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, pool, fn)
	if errors.Is(err, runs.ErrStale) || errors.Is(err, runs.ErrNotFound) {
		return nil
	}
	return err
}
