package billingrater_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/billingrater"
	"github.com/proliferate/proliferate/consumers/consumerstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

type world struct {
	*consumerstest.World
	t *testing.T
}

func newWorld(t *testing.T) *world {
	t.Helper()
	return &world{World: consumerstest.New(t, consumerstest.Options{Partitions: 3}, billingrater.Group), t: t}
}

// start runs the billing-rater group until the test ends.
func (w *world) start() {
	w.t.Helper()
	w.Start(billingrater.Group, billingrater.Handler(billingrater.Deps{Producer: w.Client, Codec: w.Codec}), consumers.Config{
		Retry:          consumers.RetryOptions{MaxAttempts: 3, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond},
		CommitInterval: 100 * time.Millisecond,
		ClientOpts:     []kgo.Opt{kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(100 * time.Millisecond)},
	})
}

func (w *world) spendRecord(ev *schemas.Event) *kgo.Record {
	w.t.Helper()
	return w.Record(topics.LLMSpend, ev.OrgID, ev)
}

// collector reads a topic from the start.
type collector struct {
	mu   sync.Mutex
	recs []*kgo.Record
}

func (w *world) collect(topic string) *collector {
	c := &collector{}
	cl := w.NewClient(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	w.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			f := cl.PollFetches(ctx)
			c.mu.Lock()
			f.EachRecord(func(r *kgo.Record) { c.recs = append(c.recs, r) })
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *collector) all() []*kgo.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*kgo.Record(nil), c.recs...)
}

func (c *collector) wait(t *testing.T, n int, what string) []*kgo.Record {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, what, func() bool { return len(c.all()) >= n })
	return c.all()
}

func spend(org, requestID string, costMicros, tokens int64) *schemas.Event {
	session := uuid.NewString()
	started := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ev := schemas.New(org, &schemas.LLMSpend{RequestID: requestID, SessionID: &session, Model: "claude-sonnet-4-20250514",
		InputTokens: tokens, OutputTokens: tokens / 2, TotalTokens: tokens + tokens/2, CostUSDMicros: costMicros,
		StartedAt: started, EndedAt: started.Add(1500 * time.Millisecond), Source: "proxy"})
	ev.CorrelationID = "corr-" + requestID
	return ev
}

func TestSpendBecomesOneUsageKeyedByRequest(t *testing.T) {
	w := newWorld(t)
	usages := w.collect(topics.BillingUsage)
	w.start()
	org := uuid.NewString()

	first := spend(org, "req-1", 12_345, 1000)
	rec := w.spendRecord(first)
	w.Produce(rec)
	// A redelivery of the same record (a crash before the offset commit,
	// or a duplicate from the proxy).
	w.Produce(w.spendRecord(first))
	// Zero cost, with tokens: nothing to bill.
	w.Produce(w.spendRecord(spend(org, "req-zero", 0, 500)))
	// A later request of the same org (same partition) marks the end.
	w.Produce(w.spendRecord(spend(org, "req-2", 1, 10)))

	got := usages.wait(t, 3, "three usages")
	if len(got) != 3 {
		t.Fatalf("%d usages, want 3", len(got))
	}
	var keys []string
	var evs []*schemas.Event
	for _, r := range got {
		if string(r.Key) != org {
			t.Fatalf("usage keyed %q, want the org %s", r.Key, org)
		}
		if et, _ := consumers.Header(r, schemas.HeaderEventType); et != schemas.TypeBillingUsage {
			t.Fatalf("event type header %q", et)
		}
		ev, err := w.Codec.Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
		keys = append(keys, ev.Payload.(*schemas.BillingUsage).IdempotencyKey)
	}
	if keys[0] != "llm:req-1" || keys[1] != "llm:req-1" || keys[2] != "llm:req-2" {
		t.Fatalf("keys = %v", keys)
	}
	u := evs[0].Payload.(*schemas.BillingUsage)
	src := first.Payload.(*schemas.LLMSpend)
	switch {
	case u.Kind != schemas.UsageLLM || u.Unit != schemas.UnitUSD:
		t.Fatalf("kind %s unit %s", u.Kind, u.Unit)
	case u.QuantityMicros != 12_345:
		t.Fatalf("quantity %d", u.QuantityMicros)
	case u.CreditsMicros != 12_345*300: // $0.012345 × 3 = 3.7035 credits
		t.Fatalf("credits %d", u.CreditsMicros)
	case u.SessionID == nil || *u.SessionID != *src.SessionID:
		t.Fatalf("session %v", u.SessionID)
	case u.RequestID == nil || *u.RequestID != "req-1" || u.Model == nil || *u.Model != src.Model:
		t.Fatalf("request %v model %v", u.RequestID, u.Model)
	case u.SourceEventID == nil || *u.SourceEventID != first.EventID:
		t.Fatalf("source event %v, want %s", u.SourceEventID, first.EventID)
	case !u.PeriodFrom.Equal(src.StartedAt) || !u.PeriodTo.Equal(src.EndedAt):
		t.Fatalf("period %s – %s", u.PeriodFrom, u.PeriodTo)
	case evs[0].OrgID != org || evs[0].CorrelationID != "corr-req-1":
		t.Fatalf("org %s correlation %s", evs[0].OrgID, evs[0].CorrelationID)
	}
	// The redelivery yields the very same event (same id), so the ledger
	// applies it once.
	if evs[1].EventID != evs[0].EventID || string(got[1].Value) != string(got[0].Value) {
		t.Fatal("a redelivered spend produced a different usage event")
	}
	if c := evs[2].Payload.(*schemas.BillingUsage).CreditsMicros; c != 300 {
		t.Fatalf("1 micro-dollar = %d micro-credits, want 300", c)
	}
}

func TestMalformedSpendIsDeadLettered(t *testing.T) {
	w := newWorld(t)
	usages := w.collect(topics.BillingUsage)
	dlq := w.collect(billingrater.Group.DeadLetter())
	w.start()
	org := uuid.NewString()

	w.Produce(w.spendRecord(spend(org, "", 100, 10)))                                                     // no request id
	w.Produce(w.spendRecord(spend("", "req-no-org", 100, 10)))                                            // no org
	w.Produce(w.spendRecord(spend(org, "req-negative", -5, 10)))                                          // negative cost
	w.Produce(&kgo.Record{Topic: topics.LLMSpend, Key: []byte(org), Value: []byte("not an avro record")}) // undecodable
	w.Produce(w.spendRecord(spend(org, "req-ok", 100, 10)))

	dead := dlq.wait(t, 4, "four dead letters")
	for _, r := range dead {
		if p, _ := consumers.Header(r, consumers.HeaderDLQPermanent); p != "true" {
			t.Fatalf("dead letter not permanent: %q", p)
		}
	}
	got := usages.wait(t, 1, "the valid usage")
	ev, err := w.Codec.Decode(got[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if k := ev.Payload.(*schemas.BillingUsage).IdempotencyKey; len(got) != 1 || k != "llm:req-ok" {
		t.Fatalf("usages: %d, first %s", len(got), k)
	}
	if n := len(dlq.all()); n != 4 {
		t.Fatalf("%d dead letters, want 4", n)
	}
}
