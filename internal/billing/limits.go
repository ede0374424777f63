package billing

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
)

// PlanLimits gives each organization the snapshot limits of its plan:
// the plan's live snapshot count and
// retention days (dev 5 / 30, pro 200 / 90). Trial and unconfigured
// organizations get the dev plan's limits. It implements
// snapshots.Limits.
type PlanLimits struct {
	Pool Querier
}

// SnapshotLimits implements snapshots.Limits.
func (l PlanLimits) SnapshotLimits(ctx context.Context, orgID string) (maxCount, retentionDays int, err error) {
	r, err := orgsdb.New(l.Pool).BillingPlanState(ctx, orgID)
	state, plan := r.BillingState, r.Plan
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, ErrOrgNotFound
	}
	if err != nil {
		return 0, 0, fmt.Errorf("billing: plan limits of %s: %w", orgID, err)
	}
	p := PlanDev
	if state != StateTrial && state != StateUnconfigured {
		p = EffectivePlan(plan)
	}
	return p.MaxSnapshots, p.RetentionDays, nil
}
