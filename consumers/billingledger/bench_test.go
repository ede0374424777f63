package billingledger_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
)

// benchBatch is the usages per organization and transaction of the
// batched path: the consumer's MaxBatch of one partition, whose records
// belong to few organizations.
const benchBatch = 1000

// benchPartitions is the parallelism of batched-parallel.
const benchPartitions = 4

// BenchmarkLedgerApply measures the ledger's apply rate on real Postgres,
// in the same run:
//
//   - batched: Ledger.Apply with benchBatch usages of one organization, as
//     the billing-ledger consumer does per fetched batch and organization;
//   - per-event: the original system's approach, one transaction with the
//     organization row FOR UPDATE per event (Apply with one usage).
//
// Both report events/s; `make bench` compares them (goal: batched ≥ 50,000
// events/s and ≥ 10× per-event).
func BenchmarkLedgerApply(b *testing.B) {
	pool := testenv.Postgres(b)
	ctx := context.Background()
	codec, err := schemas.NewCodec()
	if err != nil {
		b.Fatal(err)
	}
	ledger := &billing.Ledger{Pool: pool, Codec: codec}
	newOrg := func() (string, string) {
		id := uuid.NewString()
		if _, err := pool.Exec(ctx, `INSERT INTO organizations (id, name, slug, billing_state, billing_plan, shadow_balance)
			VALUES ($1, 'Ledger bench', $2, 'active', 'pro', 1000000000)`, id, "bench-"+id); err != nil {
			b.Fatal(err)
		}
		return id, uuid.NewString()
	}
	n := 0
	usages := func(session string, count int) []billing.Usage {
		out := make([]billing.Usage, count)
		for i := range out {
			n++
			from := time.Unix(int64(n)*30, 0).UTC()
			out[i] = billing.Usage{Key: fmt.Sprintf("compute:%s:%d", session, n), Kind: schemas.UsageCompute,
				QuantityMicros: 500_000, CreditsMicros: 500_000, SessionID: session, PeriodFrom: from, PeriodTo: from.Add(30 * time.Second)}
		}
		return out
	}
	run := func(b *testing.B, perTx int) {
		org, session := newOrg()
		events := 0
		for b.Loop() {
			b.StopTimer()
			us := usages(session, perTx)
			b.StartTimer()
			res, err := ledger.Apply(ctx, org, us)
			if err != nil {
				b.Fatal(err)
			}
			if res.Applied != perTx {
				b.Fatalf("applied %d of %d", res.Applied, perTx)
			}
			events += perTx
		}
		b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	}
	b.Run("batched", func(b *testing.B) { run(b, benchBatch) })
	b.Run("per-event", func(b *testing.B) { run(b, 1) })
	// The consumer applies its partitions in parallel (one worker each, the
	// topic keyed by organization): batches of different organizations on
	// benchPartitions workers at once.
	b.Run("batched-parallel", func(b *testing.B) {
		type stream struct{ org, session string }
		streams := make(chan stream, benchPartitions)
		for range benchPartitions {
			org, session := newOrg()
			streams <- stream{org, session}
		}
		var events atomic.Int64
		var mu sync.Mutex
		b.SetParallelism(max(1, benchPartitions/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			s := <-streams
			for pb.Next() {
				mu.Lock()
				us := usages(s.session, benchBatch)
				mu.Unlock()
				if _, err := ledger.Apply(ctx, s.org, us); err != nil {
					b.Error(err)
					return
				}
				events.Add(benchBatch)
			}
		})
		b.ReportMetric(float64(events.Load())/b.Elapsed().Seconds(), "events/s")
	})
}
