package runstages

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/internal/repos/reposdb"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/enrich"
	"github.com/proliferate/proliferate/internal/runs/runsdb"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
)

// Enricher is the run-enricher group's handler: a queued run is enriched
// (queued → enriching → ready, or → failed when the trigger event lacks a
// title or context) in one transaction. Enrichment is pure, so there is no
// reason to commit the enriching status on its own: a crash leaves the run
// queued and the redelivery enriches it; both transitions are still in the
// event log and on runs.lifecycle, in order.
func Enricher(d Deps) consumers.Handler {
	log := d.logger()
	return func(ctx context.Context, m *consumers.Message) error {
		ev, err := lifecycle(m)
		if err != nil {
			return err
		}
		if ev.ToStatus != runs.StatusQueued {
			return nil
		}
		return inTx(ctx, d.Pool, func(tx pgx.Tx) error {
			run, err := runs.Lock(ctx, tx, "", ev.RunID)
			if err != nil {
				return err
			}
			if run.Status != runs.StatusQueued {
				return nil // already enriched (a redelivery or a replay)
			}
			in, err := enrichInput(ctx, tx, run)
			if err != nil {
				return err
			}
			run, err = runs.Apply(ctx, tx, d.Codec, run, runs.Move{From: []string{runs.StatusQueued}, To: runs.StatusEnriching})
			if err != nil {
				return err
			}
			payload, berr := enrich.Build(in)
			var eerr *enrich.Error
			if errors.As(berr, &eerr) {
				log.Info("run failed enrichment", "run_id", run.ID, "reason", eerr.Reason, "error", eerr.Message)
				_, err := runs.Apply(ctx, tx, d.Codec, run, runs.Move{From: []string{runs.StatusEnriching}, To: runs.StatusFailed,
					Reason: "enrichment_failed", Stage: runs.StageEnrichment, ErrorCode: eerr.Reason, ErrorMessage: eerr.Message})
				return err
			}
			if berr != nil {
				return consumers.Permanent(fmt.Errorf("enrich run %s: %w", run.ID, berr))
			}
			raw, err := json.Marshal(payload)
			if err != nil {
				return consumers.Permanent(fmt.Errorf("encode enrichment of run %s: %w", run.ID, err))
			}
			if err := runsdb.New(tx).SaveRunEnrichment(ctx, runsdb.SaveRunEnrichmentParams{ID: run.ID, Enrichment: raw}); err != nil {
				return fmt.Errorf("save enrichment of run %s: %w", run.ID, err)
			}
			if err := runs.LogEvent(ctx, tx, run.ID, "enrichment_saved", "", "", map[string]any{
				"version": enrich.Version, "suggested_repo_id": payload.SuggestedRepoID}); err != nil {
				return err
			}
			_, err = runs.Apply(ctx, tx, d.Codec, run, runs.Move{From: []string{runs.StatusEnriching}, To: runs.StatusReady})
			return err
		})
	}
}

// enrichInput loads what enrichment reads: the trigger event, the automation
// and the organization's repositories.
func enrichInput(ctx context.Context, tx pgx.Tx, run runs.Run) (enrich.Input, error) {
	var in enrich.Input
	// The analysis the trigger processor stored for this event (see
	// consumers/triggerprocessor), if any.
	ev, err := triggersdb.New(tx).EnrichmentEvent(ctx, triggersdb.EnrichmentEventParams{ID: run.TriggerEventID, AutomationID: run.AutomationID})
	if errors.Is(err, pgx.ErrNoRows) {
		return in, runs.ErrNotFound
	}
	if err != nil {
		return in, fmt.Errorf("load trigger event of run %s: %w", run.ID, err)
	}
	in.Provider, in.EventType, in.ProviderEventType, in.Title = ev.Provider, ev.NormalizedEventType, ev.ProviderEventType, ev.Title
	in.AutomationID, in.AutomationName = ev.AutomationID, ev.AutomationName
	ctxRaw, url, ext, filter, analysis := ev.ParsedContext, ev.Url, ev.ExternalEventID, ev.LLMFilterPrompt, ev.LLMAnalysisPrompt
	analysisOutcome, analysisDetail := ev.AnalysisOutcome, ev.AnalysisDetail
	in.URL, in.ExternalID = deref(url), deref(ext)
	in.HasLLMFilter, in.HasLLMAnalysis = deref(filter) != "", deref(analysis) != ""
	if analysisOutcome != nil {
		detail := deref(analysisDetail)
		if *analysisOutcome == "done" {
			in.Analysis = &enrich.LLMAnalysis{Status: "done", Text: &detail}
		} else {
			in.Analysis = &enrich.LLMAnalysis{Status: "failed", Error: &detail}
		}
	}
	if len(ctxRaw) > 0 {
		if err := json.Unmarshal(ctxRaw, &in.Context); err != nil {
			return in, consumers.Permanent(fmt.Errorf("trigger event context of run %s: %w", run.ID, err))
		}
	}
	rows, err := reposdb.New(tx).OrgRepoNames(ctx, run.OrgID)
	if err != nil {
		return in, fmt.Errorf("load repos of org %s: %w", run.OrgID, err)
	}
	in.Repos = make([]enrich.Repo, len(rows))
	for i, r := range rows {
		in.Repos[i] = enrich.Repo{ID: r.ID, FullName: r.GithubRepoName}
	}
	return in, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
