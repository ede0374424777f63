package triggerprocessor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/llmproxy"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/triggers/llmjudge"
	"github.com/proliferate/proliferate/internal/triggers/providers"
	"github.com/proliferate/proliferate/producers/outbox"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// Kinds and outcomes of trigger_llm_results.
const (
	kindFilter     = "filter"
	kindAnalysis   = "analysis"
	outcomeRun     = "run"
	outcomeSkip    = "skip"
	outcomeDone    = "done"
	outcomeError   = "error"
	spendSource    = "trigger-llm"
	maxErrorDetail = 1000
)

// llmResult is one stored answer.
type llmResult struct{ outcome, detail string }

// askModel asks the automation's LLM filter and analysis prompts about ev
// when it would otherwise queue a run, and returns the filter's answer (nil
// without a filter prompt, or when nothing needs asking). Only
// infrastructure errors (the database, the consumer shutting down) are
// returned; the model's failures are answers with outcome "error".
func (p *processor) askModel(ctx context.Context, log *slog.Logger, c candidate, ev runs.Event) (*llmResult, error) {
	if c.filterPrompt == "" && c.analysisPrompt == "" || !c.enabled || !c.automationEnabled {
		return nil, nil
	}
	if ok, _ := providers.Matches(c.provider, c.config, ev); !ok {
		return nil, nil
	}
	// An event already recorded is a redelivery: the transaction will change
	// nothing, so the model is not asked.
	var seen bool
	if err := p.d.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM trigger_events WHERE trigger_id = $1 AND dedup_key = $2)`,
		c.id, ev.DedupKey).Scan(&seen); err != nil {
		return nil, err
	}
	if seen {
		return nil, nil
	}
	jev := llmjudge.Event{Provider: ev.Provider, EventType: first(ev.ProviderEventType, ev.EventType), Title: ev.Title, URL: ev.URL, Context: ev.Context}
	var filter *llmResult
	if c.filterPrompt != "" {
		r, err := p.judged(ctx, log, c, ev.DedupKey, kindFilter, func(ctx context.Context) (llmjudge.Answer, error) {
			return p.d.Judge.Filter(ctx, c.filterPrompt, jev)
		})
		if err != nil {
			return nil, err
		}
		filter = &r
		if r.outcome == outcomeSkip || (r.outcome == outcomeError && !p.d.LLMFailOpen) {
			return filter, nil // no run: no analysis
		}
	}
	if c.analysisPrompt != "" {
		if _, err := p.judged(ctx, log, c, ev.DedupKey, kindAnalysis, func(ctx context.Context) (llmjudge.Answer, error) {
			return p.d.Judge.Analyze(ctx, c.analysisPrompt, jev)
		}); err != nil {
			return nil, err
		}
	}
	return filter, nil
}

// judged returns the stored answer of (trigger, dedup key, kind), or asks
// the model and stores its answer with the spend (an llm.spend event for the
// org in the same transaction). A concurrent writer's answer wins.
func (p *processor) judged(ctx context.Context, log *slog.Logger, c candidate, dedupKey, kind string,
	ask func(context.Context) (llmjudge.Answer, error)) (llmResult, error) {
	if r, ok, err := p.storedAnswer(ctx, c.id, dedupKey, kind); err != nil || ok {
		return r, err
	}
	var a llmjudge.Answer
	var err error
	if p.d.Judge == nil {
		err = errors.New("no model is configured for trigger LLM prompts")
	} else {
		a, err = ask(ctx)
	}
	if ctx.Err() != nil {
		return llmResult{}, ctx.Err() // shutting down: retried, not recorded
	}
	r := llmResult{outcome: outcomeDone, detail: a.Text}
	switch {
	case err != nil:
		r = llmResult{outcome: outcomeError, detail: err.Error()}
		if len(r.detail) > maxErrorDetail {
			r.detail = r.detail[:maxErrorDetail]
		}
		log.Warn("trigger LLM prompt got no usable answer", "trigger_id", c.id, "org_id", c.orgID, "kind", kind, "error", err)
	case kind == kindFilter && a.Run:
		r.outcome = outcomeRun
	case kind == kindFilter:
		r.outcome = outcomeSkip
	}
	cost, known := llmproxy.Cost(a.Usage)
	if a.Usage.Total() == 0 {
		cost = 0
	} else if !known {
		log.Warn("trigger LLM: unknown model priced as the most expensive known model", "model", a.Usage.Model, "cost_usd_micros", cost)
	}
	err = pgx.BeginFunc(ctx, p.d.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO trigger_llm_results (trigger_id, dedup_key, kind, org_id, outcome, detail, model,
				input_tokens, output_tokens, cost_usd_micros)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
			ON CONFLICT (trigger_id, dedup_key, kind) DO NOTHING`,
			c.id, dedupKey, kind, c.orgID, r.outcome, r.detail, a.Usage.Model,
			a.Usage.InputTokens+a.Usage.CacheReadTokens+a.Usage.CacheWriteTokens, a.Usage.OutputTokens, cost)
		if err != nil || tag.RowsAffected() == 0 || a.Usage.Total() == 0 {
			return err
		}
		spend := &schemas.LLMSpend{
			RequestID: uuid.Must(uuid.NewV7()).String(), Model: a.Usage.Model, Provider: ptr("anthropic"),
			InputTokens: a.Usage.InputTokens, OutputTokens: a.Usage.OutputTokens,
			CacheReadTokens: a.Usage.CacheReadTokens, CacheWriteTokens: a.Usage.CacheWriteTokens,
			TotalTokens: a.Usage.Total(), CostUSDMicros: cost,
			StartedAt: a.Started.UTC(), EndedAt: a.Ended.UTC(), Source: spendSource,
		}
		sev := schemas.New(c.orgID, spend)
		sev.EventID = spend.RequestID
		return outbox.AddEvent(ctx, tx, p.d.Codec, topics.LLMSpend, c.orgID, sev)
	})
	if err != nil {
		return llmResult{}, fmt.Errorf("store the %s answer: %w", kind, err)
	}
	// Another delivery may have stored its answer first: that one counts.
	stored, ok, err := p.storedAnswer(ctx, c.id, dedupKey, kind)
	if err != nil || !ok {
		return r, err
	}
	return stored, nil
}

func (p *processor) storedAnswer(ctx context.Context, triggerID, dedupKey, kind string) (llmResult, bool, error) {
	var r llmResult
	err := p.d.Pool.QueryRow(ctx, `SELECT outcome, detail FROM trigger_llm_results
		WHERE trigger_id = $1 AND dedup_key = $2 AND kind = $3`, triggerID, dedupKey, kind).Scan(&r.outcome, &r.detail)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}

func ptr[T any](v T) *T { return &v }
