package llmproxy

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/llmproxy/llmproxydb"
	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// spendRetries and spendBackoff bound how long a spend record is retried
// while Postgres is unavailable (about 30 s in all).
const (
	spendRetries = 8
	spendBackoff = 250 * time.Millisecond
)

// SpendSource is LLMSpend.Source for the built-in proxy.
const SpendSource = "llm-proxy"

// recordAsync stores a finished request's spend off the request path.
func (p *Proxy) recordAsync(info *keyInfo, u Usage, started, ended time.Time) {
	cost, known := Cost(u)
	if !known {
		p.d.Logger.Warn("llm-proxy: unknown model priced as the most expensive known model",
			"model", u.Model, "org_id", info.orgID, "session_id", info.sessionID, "cost_usd_micros", cost)
	}
	// Count it locally at once, so this replica's next budget check sees it.
	info.spend.Add(cost)
	p.addUnstored(info.hash, cost)
	sessionID := info.sessionID
	spend := &schemas.LLMSpend{
		RequestID:        uuid.Must(uuid.NewV7()).String(),
		SessionID:        &sessionID,
		Model:            u.Model,
		Provider:         ptr("anthropic"),
		InputTokens:      u.InputTokens,
		OutputTokens:     u.OutputTokens,
		CacheReadTokens:  u.CacheReadTokens,
		CacheWriteTokens: u.CacheWriteTokens,
		TotalTokens:      u.Total(),
		CostUSDMicros:    cost,
		StartedAt:        started.UTC(),
		EndedAt:          ended.UTC(),
		Source:           SpendSource,
	}
	ev := schemas.New(info.orgID, spend)
	// One event per request: the event id is the request id, so a retried
	// transaction that did commit is recognisable downstream.
	ev.EventID = spend.RequestID
	p.spends.Go(func() {
		ctx := context.Background()
		backoff := spendBackoff
		var err error
		defer p.addUnstored(info.hash, -cost)
		for attempt := 1; attempt <= spendRetries; attempt++ {
			if err = p.storeSpend(ctx, info.id, info.orgID, ev); err == nil {
				return
			}
			p.d.Logger.Warn("llm-proxy: storing LLM spend failed; retrying", "attempt", attempt,
				"request_id", spend.RequestID, "err", err)
			time.Sleep(backoff)
			backoff = min(backoff*2, 8*time.Second)
		}
		p.metrics.spendFailures.Inc()
		p.d.Logger.Error("llm-proxy: LLM spend lost after retries", "request_id", spend.RequestID,
			"org_id", info.orgID, "session_id", sessionID, "model", u.Model,
			"cost_usd_micros", cost, "err", err)
	})
}

// storeSpend adds the cost to the key and the llm.spend event to the outbox
// in one transaction.
func (p *Proxy) storeSpend(ctx context.Context, keyID, orgID string, ev *schemas.Event) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cost := ev.Payload.(*schemas.LLMSpend).CostUSDMicros
	return pgx.BeginFunc(ctx, p.d.Pool, func(tx pgx.Tx) error {
		if err := llmproxydb.New(tx).AddKeySpend(ctx, llmproxydb.AddKeySpendParams{ID: keyID, Micros: cost}); err != nil {
			return fmt.Errorf("add spend to key: %w", err)
		}
		if err := outbox.AddEvent(ctx, tx, p.d.Codec, topics.LLMSpend, orgID, ev); err != nil {
			return fmt.Errorf("add llm.spend event: %w", err)
		}
		return nil
	})
}

func ptr[T any](v T) *T { return &v }
