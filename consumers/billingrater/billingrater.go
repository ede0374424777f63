// Package billingrater is the billing-rater consumer group: it prices each LLM request on llm.spend into one billable usage on
// billing.usage, which the billing ledger applies to the organization's
// credits exactly once.
//
// Design:
//
//   - One usage per request, keyed by the request: idempotency key
//     llm:{request_id}, so a redelivered spend record (a crash before the
//     offset commit, a rebalance, a duplicate from the proxy or the
//     LiteLLM collector) yields the same key and the ledger applies it
//     once. The usage event itself is deterministic too: its event id is
//     derived from the source event id and it keeps the source's
//     occurred_at, trace and correlation ids.
//   - Pricing: credits = cost × billing.LLMMarkup in cents
//     (billing.LLMCreditsMicros), exact in micros.
//   - The usage is produced synchronously (ProduceSync) before the handler
//     returns, so the runner commits the llm.spend offset only once the
//     usage is durable in Kafka: nothing is lost, duplicates are absorbed
//     downstream.
//   - Zero cost produces nothing (an anomaly worth a log line when tokens
//     were used: an unpriced model). A record without an organization or
//     request id, or with a negative cost, is malformed: it goes to the
//     dead-letter topic at once.
package billingrater

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// Deps configure the handler.
type Deps struct {
	// Producer produces the usage records (an idempotent client).
	Producer *kgo.Client
	Codec    *schemas.Codec
	// Log [slog.Default()].
	Log *slog.Logger
}

// eventNamespace derives usage event ids from source event ids.
var eventNamespace = uuid.MustParse("3f1f6a52-6c0e-4d7e-9a59-0c1b7e8d5a21")

// Key is the idempotency key of the usage of LLM request requestID.
func Key(requestID string) string { return "llm:" + requestID }

// Usage prices one spend event into its usage event. ok=false when there
// is nothing to bill (zero cost). Malformed input is an error.
func Usage(src *schemas.Event) (ev *schemas.Event, ok bool, err error) {
	if src == nil {
		return nil, false, errors.New("no event")
	}
	spend, isSpend := src.Payload.(*schemas.LLMSpend)
	if !isSpend {
		return nil, false, fmt.Errorf("event type %q is not %s", src.EventType, schemas.TypeLLMSpend)
	}
	switch {
	case src.OrgID == "":
		return nil, false, fmt.Errorf("llm spend %q has no org id", spend.RequestID)
	case spend.RequestID == "":
		return nil, false, errors.New("llm spend has no request id")
	case spend.CostUSDMicros < 0:
		return nil, false, fmt.Errorf("llm spend %q has a negative cost %d", spend.RequestID, spend.CostUSDMicros)
	case spend.CostUSDMicros == 0:
		return nil, false, nil
	}
	reqID, model, srcID := spend.RequestID, spend.Model, src.EventID
	u := &schemas.BillingUsage{
		IdempotencyKey: Key(spend.RequestID),
		Kind:           schemas.UsageLLM,
		Unit:           schemas.UnitUSD,
		QuantityMicros: spend.CostUSDMicros,
		CreditsMicros:  billing.LLMCreditsMicros(spend.CostUSDMicros),
		SessionID:      spend.SessionID,
		PeriodFrom:     spend.StartedAt,
		PeriodTo:       spend.EndedAt,
		RequestID:      &reqID,
		Model:          &model,
		SourceEventID:  &srcID,
	}
	ev = schemas.New(src.OrgID, u)
	ev.EventID = uuid.NewSHA1(eventNamespace, []byte("billing.usage:"+src.EventID)).String()
	if !src.OccurredAt.IsZero() {
		ev.OccurredAt = src.OccurredAt
	}
	ev.TraceID = src.TraceID
	ev.CorrelationID = src.CorrelationID
	return ev, true, nil
}

// Handler returns the billing-rater handler. The runner must decode
// records with a codec (Message.Event).
func Handler(d Deps) consumers.Handler {
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "billing_rater")
	return func(ctx context.Context, m *consumers.Message) error {
		ev, ok, err := Usage(m.Event)
		if err != nil {
			return consumers.Permanent(fmt.Errorf("billing rater: %w", err))
		}
		if !ok {
			if spend := m.Event.Payload.(*schemas.LLMSpend); spend.InputTokens+spend.OutputTokens+spend.CacheReadTokens+
				spend.CacheWriteTokens+spend.TotalTokens > 0 {
				log.Warn("llm spend with tokens but zero cost (unpriced model?)", "anomaly", "zero_cost_with_tokens",
					"org_id", m.Event.OrgID, "request_id", spend.RequestID, "model", spend.Model,
					"input_tokens", spend.InputTokens, "output_tokens", spend.OutputTokens)
			}
			return nil
		}
		rec, err := kafka.EventRecord(d.Codec, topics.BillingUsage, ev.OrgID, ev)
		if err != nil {
			return consumers.Permanent(fmt.Errorf("billing rater: %w", err))
		}
		if err := d.Producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return fmt.Errorf("billing rater: produce usage %s: %w", ev.Payload.(*schemas.BillingUsage).IdempotencyKey, err)
		}
		return nil
	}
}
