// Package runartifacts is the `run-artifacts` consumer group: it copies a
// run's enrichment and completion JSON from Postgres to the blob store, so
// they outlive the row and can be handed out by reference.
//
//   - to_status ready: runs/{run_id}/enrichment.json from
//     automation_runs.enrichment_json; the ref goes to enrichment_artifact_ref;
//   - any terminal to_status with completion_json set:
//     runs/{run_id}/completion.json; the ref goes to completion_artifact_ref.
//
// The run's event log gets an artifact_written row only when the ref
// changes, in the transaction that stores it, so a duplicate delivery or a
// topic replay writes the same bytes to the same key again and adds no row.
//
// This is its own consumer group on runs.lifecycle, apart from the notifier:
// a storage outage makes this group retry (and eventually dead-letter the
// record, to be replayed) without delaying any notification — the known
// limitation of the original system, where one outbox item did both.
package runartifacts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/internal/blobstore"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/runsdb"
	"github.com/proliferate/proliferate/schemas"
)

// Deps are what the handler needs.
type Deps struct {
	Pool  *pgxpool.Pool
	Store blobstore.Store
	Log   *slog.Logger
}

// Artifact kinds (data.kind of artifact_written log rows).
const (
	KindEnrichment = "enrichment"
	KindCompletion = "completion"
)

// Key is the blob key of a run's artifact of kind.
func Key(runID, kind string) string { return "runs/" + runID + "/" + kind + ".json" }

// Handler returns the run-artifacts group's handler.
func Handler(d Deps) consumers.Handler {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context, m *consumers.Message) error {
		if m.Event == nil {
			return consumers.Permanent(errors.New("runartifacts: record was not decoded"))
		}
		ev, ok := m.Event.Payload.(*schemas.RunLifecycle)
		if !ok {
			return nil
		}
		switch {
		case ev.ToStatus == runs.StatusReady:
			return d.write(ctx, m.Event.OrgID, ev.RunID, KindEnrichment)
		case runs.Terminal(ev.ToStatus):
			return d.write(ctx, m.Event.OrgID, ev.RunID, KindCompletion)
		}
		return nil
	}
}

func (d Deps) write(ctx context.Context, orgID, runID, kind string) error {
	var data []byte
	var err error
	if kind == KindEnrichment {
		data, err = runsdb.New(d.Pool).RunEnrichmentJSON(ctx, runsdb.RunEnrichmentJSONParams{ID: runID, OrgID: orgID})
	} else {
		data, err = runsdb.New(d.Pool).RunCompletionJSON(ctx, runsdb.RunCompletionJSONParams{ID: runID, OrgID: orgID})
	}
	if errors.Is(err, pgx.ErrNoRows) {
		d.Log.Warn("run artifact skipped: run not found (deleted?)", "run_id", runID, "kind", kind)
		return nil
	}
	if err != nil {
		return fmt.Errorf("runartifacts: read %s of run %s: %w", kind, runID, err)
	}
	if data == nil {
		return nil // nothing to store (e.g. a run that failed before enrichment or without a completion)
	}
	ref, err := d.Store.Put(ctx, Key(runID, kind), data, "application/json")
	if err != nil {
		return fmt.Errorf("runartifacts: store %s of run %s: %w", kind, runID, err)
	}
	sum := sha256.Sum256(data)
	return pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
		var err error
		if kind == KindEnrichment {
			_, err = runsdb.New(tx).SetRunEnrichmentRef(ctx, runsdb.SetRunEnrichmentRefParams{ID: runID, Ref: ref})
		} else {
			_, err = runsdb.New(tx).SetRunCompletionRef(ctx, runsdb.SetRunCompletionRefParams{ID: runID, Ref: ref})
		}
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // already recorded: a duplicate or a replay
		}
		if err != nil {
			return fmt.Errorf("runartifacts: save %s ref of run %s: %w", kind, runID, err)
		}
		if err := runs.LogEvent(ctx, tx, runID, "artifact_written", "", "", map[string]any{
			"kind": kind, "ref": ref, "bytes": len(data), "sha256": hex.EncodeToString(sum[:])}); err != nil {
			return err
		}
		d.Log.Info("run artifact written", "run_id", runID, "kind", kind, "ref", ref, "bytes", len(data))
		return nil
	})
}
