package actionmaterializer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/actionmaterializer"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
)

// BenchmarkActionMaterializerBatch measures the group's handler on batches of 1000
// decoded audit events (what the runner hands it per partition fetch): one
// round trip per batch. Reported as events/s.
func BenchmarkActionMaterializerBatch(b *testing.B) {
	pool := testenv.Postgres(b)
	apply := actionmaterializer.BatchHandler(actionmaterializer.Deps{Pool: pool})
	org, actor := uuid.NewString(), uuid.NewString()
	const batch = 1000
	events := 0
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		msgs := make([]*consumers.Message, batch)
		for j := range msgs {
			details := fmt.Sprintf(`{"key":"SECRET_%d_%d"}`, i, j)
			msgs[j] = &consumers.Message{Event: schemas.New(org, &schemas.AuditEvent{Action: "secret.update", ActorType: schemas.AuditActorUser,
				ActorID: &actor, TargetType: "secret", TargetID: uuid.NewString(), DetailsJSON: &details})}
		}
		b.StartTimer()
		if err := apply(context.Background(), msgs); err != nil {
			b.Fatal(err)
		}
		events += batch
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}
