// Package llmgate applies an automation's LLM filter and analysis prompts to
// a trigger event before a run is queued, for the webhook trigger processor
// and the poller alike. Each answer is kept in trigger_llm_results per
// (trigger, dedup key, kind) with its tokens and cost, and an llm.spend event
// for the org goes to the outbox in the same transaction (the billing rater
// charges it like any LLM spend); an event already recorded for the trigger
// is not asked about again, so a redelivery neither asks nor bills twice.
package llmgate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/llmproxy"
	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/triggers/llmgate/llmgatedb"
	"github.com/proliferate/proliferate/internal/triggers/llmjudge"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
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

// Gate asks the model. A nil Judge cannot answer: filters then follow
// FailOpen and analyses are recorded as failed.
type Gate struct {
	Pool  *pgxpool.Pool
	Codec *schemas.Codec
	Judge *llmjudge.Judge
	// FailOpen queues a run when the filter has no usable answer (timeout,
	// error, malformed answer); false skips it (runs.SkipLLMFilterFailed).
	FailOpen bool
	Log      *slog.Logger
}

// Trigger is the trigger an event matched, with its automation's prompts
// ("" when unset).
type Trigger struct {
	ID, OrgID                    string
	FilterPrompt, AnalysisPrompt string
}

// Skip says that the event must not start a run: Reason is the trigger
// event's skip reason, Detail goes into its context under DetailKey.
type Skip struct {
	Reason, DetailKey, Detail string
}

// Apply returns ev with the skip's detail in its context (a copy).
func (s *Skip) Apply(ev runs.Event) runs.Event {
	ctx := make(map[string]any, len(ev.Context)+1)
	for k, v := range ev.Context {
		ctx[k] = v
	}
	ctx[s.DetailKey] = s.Detail
	ev.Context = ctx
	return ev
}

// llmResult is one stored answer.
type llmResult struct{ outcome, detail string }

// Ask asks the trigger's LLM filter and analysis prompts about ev, which
// matched the trigger's structural filters, and returns a Skip when it must
// not start a run (nil: queue it). Nothing is asked without prompts, or when
// the event is already recorded for the trigger (a redelivery). Only
// infrastructure errors (the database, ctx ending) are returned; the
// model's failures are answers with outcome "error".
func (p *Gate) Ask(ctx context.Context, c Trigger, ev runs.Event) (*Skip, error) {
	if p == nil || c.FilterPrompt == "" && c.AnalysisPrompt == "" {
		return nil, nil
	}
	log := p.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// An event already recorded is a redelivery: the transaction will change
	// nothing, so the model is not asked.
	seen, err := triggersdb.New(p.Pool).TriggerEventRecorded(ctx, triggersdb.TriggerEventRecordedParams{TriggerID: c.ID, DedupKey: ev.DedupKey})
	if err != nil {
		return nil, err
	}
	if seen {
		return nil, nil
	}
	jev := llmjudge.Event{Provider: ev.Provider, EventType: cmp.Or(ev.ProviderEventType, ev.EventType), Title: ev.Title, URL: ev.URL, Context: ev.Context}
	if c.FilterPrompt != "" {
		r, err := p.judged(ctx, log, c, ev.DedupKey, kindFilter, func(ctx context.Context) (llmjudge.Answer, error) {
			return p.Judge.Filter(ctx, c.FilterPrompt, jev)
		})
		if err != nil {
			return nil, err
		}
		switch {
		case r.outcome == outcomeSkip:
			return &Skip{Reason: runs.SkipLLMFilterRejected, DetailKey: "llm_filter_reason", Detail: r.detail}, nil
		case r.outcome == outcomeError && !p.FailOpen:
			return &Skip{Reason: runs.SkipLLMFilterFailed, DetailKey: "skip_detail", Detail: r.detail}, nil
		}
	}
	if c.AnalysisPrompt != "" {
		if _, err := p.judged(ctx, log, c, ev.DedupKey, kindAnalysis, func(ctx context.Context) (llmjudge.Answer, error) {
			return p.Judge.Analyze(ctx, c.AnalysisPrompt, jev)
		}); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// judged returns the stored answer of (trigger, dedup key, kind), or asks
// the model and stores its answer with the spend (an llm.spend event for the
// org in the same transaction). Concurrent deliveries of one event (other
// partitions, other replicas) wait on a session advisory lock of the answer's
// key, held on one connection while the model is asked, so the model is
// asked, and the org billed, once.
func (p *Gate) judged(ctx context.Context, log *slog.Logger, c Trigger, dedupKey, kind string,
	ask func(context.Context) (llmjudge.Answer, error)) (llmResult, error) {
	if r, ok, err := p.storedAnswer(ctx, p.Pool, c.ID, dedupKey, kind); err != nil || ok {
		return r, err
	}
	conn, err := p.Pool.Acquire(ctx)
	if err != nil {
		return llmResult{}, err
	}
	defer conn.Release()
	lockKey := c.ID + "/" + kind + "/" + dedupKey // a UUID and a fixed kind first: unambiguous
	if err := llmgatedb.New(conn).LockLLMAnswer(ctx, lockKey); err != nil {
		return llmResult{}, fmt.Errorf("lock the %s answer: %w", kind, err)
	}
	defer func() {
		// A cancelled ctx must not leave the lock on a pooled connection.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := llmgatedb.New(conn).UnlockLLMAnswer(uctx, lockKey); err != nil {
			_ = conn.Conn().Close(uctx) // the session (and its lock) ends with it
		}
	}()
	if r, ok, err := p.storedAnswer(ctx, conn, c.ID, dedupKey, kind); err != nil || ok {
		return r, err
	}
	var a llmjudge.Answer
	if p.Judge == nil {
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
		log.Warn("trigger LLM prompt got no usable answer", "trigger_id", c.ID, "org_id", c.OrgID, "kind", kind, "error", err)
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
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		n, err := llmgatedb.New(tx).InsertLLMResult(ctx, llmgatedb.InsertLLMResultParams{
			TriggerID: c.ID, DedupKey: dedupKey, Kind: kind, OrgID: c.OrgID, Outcome: r.outcome, Detail: r.detail, Model: a.Usage.Model,
			InputTokens:  a.Usage.InputTokens + a.Usage.CacheReadTokens + a.Usage.CacheWriteTokens,
			OutputTokens: a.Usage.OutputTokens, CostUsdMicros: cost})
		if err != nil || n == 0 || a.Usage.Total() == 0 {
			return err
		}
		spend := &schemas.LLMSpend{
			RequestID: uuid.Must(uuid.NewV7()).String(), Model: a.Usage.Model, Provider: ptr("anthropic"),
			InputTokens: a.Usage.InputTokens, OutputTokens: a.Usage.OutputTokens,
			CacheReadTokens: a.Usage.CacheReadTokens, CacheWriteTokens: a.Usage.CacheWriteTokens,
			TotalTokens: a.Usage.Total(), CostUSDMicros: cost,
			StartedAt: a.Started.UTC(), EndedAt: a.Ended.UTC(), Source: spendSource,
		}
		sev := schemas.New(c.OrgID, spend)
		sev.EventID = spend.RequestID
		return outbox.AddEvent(ctx, tx, p.Codec, topics.LLMSpend, c.OrgID, sev)
	})
	if err != nil {
		return llmResult{}, fmt.Errorf("store the %s answer: %w", kind, err)
	}
	return r, nil
}

// storedAnswer reads the recorded answer through q (a pool or a connection).
func (p *Gate) storedAnswer(ctx context.Context, q llmgatedb.DBTX, triggerID, dedupKey, kind string) (llmResult, bool, error) {
	row, err := llmgatedb.New(q).StoredLLMResult(ctx, llmgatedb.StoredLLMResultParams{TriggerID: triggerID, DedupKey: dedupKey, Kind: kind})
	r := llmResult{outcome: row.Outcome, detail: row.Detail}
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}

func ptr[T any](v T) *T { return &v }
