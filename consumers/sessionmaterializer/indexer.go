package sessionmaterializer

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/transcript"
)

// Indexer keeps the search index of session histories up with them: the
// group's batches only queue their new rows for search (computing the
// full-text vector is most of a row's cost, and the history must not
// wait for it), and the Indexer, which runs next to the group in the
// worker, computes them (transcript.IndexSearch). Several Indexers, in
// one process or many, share the queue; whatever one leaves (a crash, a
// failed statement) the next look takes.
type Indexer struct {
	Pool *pgxpool.Pool
	Log  *slog.Logger
	// Batch bounds the rows indexed per statement; default 1000.
	Batch int
	// Interval is how long it waits after finding the queue empty (or
	// after a failure) before it looks again; default 200ms, so a row is
	// searchable within about that of being materialized.
	Interval time.Duration
}

// Run indexes until ctx ends; it returns nil then.
func (ix *Indexer) Run(ctx context.Context) error {
	batch, every, log := ix.Batch, ix.Interval, ix.Log
	if batch <= 0 {
		batch = 1000
	}
	if every <= 0 {
		every = 200 * time.Millisecond
	}
	if log == nil {
		log = slog.Default()
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n, err := transcript.IndexSearch(ctx, ix.Pool, batch)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			log.Warn("session search indexer: indexing failed; retrying", "error", err)
			t.Reset(every)
		case n == batch:
			t.Reset(0) // more queued
		default:
			t.Reset(every)
		}
	}
}
