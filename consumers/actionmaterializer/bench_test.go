package actionmaterializer_test

import (
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/consumers/actionmaterializer"
	"github.com/proliferate/proliferate/consumers/consumerstest"
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
	consumerstest.BenchBatches(b, 1000, apply, func(i, j int) *schemas.Event {
		details := fmt.Sprintf(`{"key":"SECRET_%d_%d"}`, i, j)
		return schemas.New(org, &schemas.AuditEvent{Action: "secret.update", ActorType: schemas.AuditActorUser,
			ActorID: &actor, TargetType: "secret", TargetID: uuid.NewString(), DetailsJSON: &details})
	})
}
