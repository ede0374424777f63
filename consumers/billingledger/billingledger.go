// Package billingledger is the billing-ledger consumer group: it applies the billable usage on billing.usage to the
// organizations' shadow credit balances, exactly once per idempotency key,
// and drives the billing state machine (state changes leave through the
// outbox to billing.state).
//
// Design:
//
//   - Batch mode (consumers.BatchHandler): the runner hands over up to
//     MaxBatch records of one partition. billing.usage is keyed by
//     organization, so a batch holds few organizations; the handler groups
//     the usages by organization and calls billing.Ledger.Apply once per
//     organization: one transaction holding the organization's row lock
//     inserts every key into billing_event_keys (ON CONFLICT DO NOTHING),
//     stores the new ones in billing_events, deducts only the newly
//     inserted credits, advances session_billing and evaluates the state
//     machine. The original system took the row lock once per event; one
//     lock per organization and batch is what makes the ledger keep up.
//   - Exactly once: the runner commits offsets only after the handler
//     returned, so a crash replays records whose keys are already in
//     billing_event_keys; Apply counts them as duplicates and changes
//     nothing. Duplicates inside one batch are absorbed the same way.
//   - Failures are isolated: a record that is not a valid usage, or whose
//     organization no longer exists, can never apply; it is reported
//     through consumers.FailedRecords as a permanent error (dead-lettered
//     without retries) while the rest of the batch applies. An organization
//     whose transaction fails for another reason (the database) has its
//     records retried one at a time by the runner; the organizations that
//     committed are not redone. Usage of different organizations commutes,
//     and the records of one organization stay in order among themselves.
package billingledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/internal/billing"
)

// Deps configure the handler.
type Deps struct {
	Ledger *billing.Ledger
	// Log [slog.Default()].
	Log *slog.Logger
}

// BatchHandler applies batches of billing.usage records (the runner must
// decode them: consumers.Config.Codec).
func BatchHandler(d Deps) consumers.BatchHandler {
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	return func(ctx context.Context, msgs []*consumers.Message) error {
		failed := consumers.FailedRecords{}
		type orgBatch struct {
			usages []billing.Usage
			msgs   []*consumers.Message
		}
		byOrg := map[string]*orgBatch{}
		var order []string
		for _, m := range msgs {
			if m.Event == nil {
				failed[m] = consumers.Permanent(errors.New("billing ledger: record not decoded (the runner needs a codec)"))
				continue
			}
			org, u, err := billing.UsageFromEvent(m.Event)
			if err != nil {
				failed[m] = consumers.Permanent(err)
				continue
			}
			b := byOrg[org]
			if b == nil {
				b = &orgBatch{}
				byOrg[org] = b
				order = append(order, org)
			}
			b.usages = append(b.usages, u)
			b.msgs = append(b.msgs, m)
		}
		for _, org := range order {
			b := byOrg[org]
			res, err := d.Ledger.Apply(ctx, org, b.usages)
			if err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("billing ledger: apply %d usages of %s: %w", len(b.usages), org, err)
				}
				if errors.Is(err, billing.ErrOrgNotFound) || errors.Is(err, billing.ErrInvalidUsage) {
					err = consumers.Permanent(err)
				}
				for _, m := range b.msgs {
					failed[m] = fmt.Errorf("billing ledger: apply usage of %s: %w", org, err)
				}
				continue
			}
			if res.Duplicates > 0 {
				log.Debug("billing usage already applied", "org_id", org, "duplicates", res.Duplicates, "applied", res.Applied)
			}
		}
		if len(failed) > 0 {
			return failed
		}
		return nil
	}
}
