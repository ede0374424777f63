package billing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Gate applies Check to an organization's billing as it is in Postgres.
// It is the hook behind every gated
// operation:
//
//   - session creation (Admit, inside sessions.Store.Create's transaction,
//     after the per-organization advisory lock: the live session count it
//     reads is exact, so the plan's concurrency limit is enforced
//     atomically);
//   - runtime resume and CLI connect (Allow, from the gateway's hub).
//
// It fails closed: an organization that cannot be read is refused with
// billing_unavailable (action retry). A Gate that is not Enabled
// (BILLING_ENABLED=false) allows everything.
type Gate struct {
	Enabled bool
	// Pool is what Allow reads (Admit reads the caller's transaction).
	Pool Querier
	// Now is the clock [time.Now].
	Now func() time.Time
}

// Admit gates a session creation of orgID inside tx. A refusal is a
// *Denial (errors.As).
func (g Gate) Admit(ctx context.Context, tx pgx.Tx, orgID string, op Operation) error {
	return g.check(ctx, tx, orgID, op)
}

// Allow gates op for orgID outside any transaction (resume, CLI connect).
func (g Gate) Allow(ctx context.Context, orgID string, op Operation) error {
	if !g.Enabled {
		return nil
	}
	if g.Pool == nil {
		return fmt.Errorf("%w: %w", Unavailable(nil), errors.New("billing: gate has no database"))
	}
	return g.check(ctx, g.Pool, orgID, op)
}

func (g Gate) check(ctx context.Context, q Querier, orgID string, op Operation) error {
	if !g.Enabled {
		return nil
	}
	b, err := ReadGate(ctx, q, orgID)
	if err != nil {
		// Fail closed; the cause stays in the chain for the logs.
		return fmt.Errorf("%w: %w", Unavailable(err), err)
	}
	b = forGate(b)
	now := time.Now()
	if g.Now != nil {
		now = g.Now()
	}
	if d := Check(b, op, now); d != nil {
		return d
	}
	return nil
}

// forGate applies the limits of the plan the organization actually pays
// for: a trial (or unconfigured) organization has the dev plan's limits
// whatever plan it selected for later.
func forGate(b OrgBilling) OrgBilling {
	if b.State == StateTrial || b.State == StateUnconfigured {
		b.Plan = PlanDev.ID
	}
	return b
}

// AsDenial returns the denial in err's chain, if any.
func AsDenial(err error) (*Denial, bool) {
	var d *Denial
	if errors.As(err, &d) {
		return d, true
	}
	return nil, false
}
