package invocations

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/actions/invocations/invocationsdb"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/schemas"
)

// Run reasons written by the hooks (automation_runs.status_reason).
const (
	// ReasonApprovalRequired: the run waits for a person to approve or deny
	// one of its session's invocations.
	ReasonApprovalRequired = "approval_required"
	// ReasonApprovalResolved: every approval the run waited for was given
	// or refused; the agent goes on.
	ReasonApprovalResolved = "approval_resolved"
)

// NewRunHooks returns the RunHooks that pause and resume automation runs
// while an action of theirs waits for a person's approval:
//
//   - AwaitingApproval: a running run moves to needs_human with reason
//     approval_required (its event data names the invocation). A run
//     already needs_human stays so; a run that has ended is left alone.
//   - ApprovalResolved (approved or denied): a run that is needs_human
//     because of approvals (reason approval_required) moves back to running
//     when no other invocation of the run is pending and none expired.
//   - ApprovalResolved (expired): the run stays needs_human — nobody
//     answered within UnattendedTTL, so a person has to look at it
//     (resolve it, or re-run); the run's event log records the expiry.
//
// The moves go through runs.Apply (compare-and-set, event log,
// runs.lifecycle event) in the invocation's transaction.
func NewRunHooks(codec *schemas.Codec) RunHooks { return &runHooks{codec: codec} }

type runHooks struct {
	codec *schemas.Codec
}

func (h *runHooks) AwaitingApproval(ctx context.Context, tx pgx.Tx, inv Invocation) error {
	if inv.RunID == nil {
		return nil
	}
	r, err := runs.Lock(ctx, tx, inv.OrgID, *inv.RunID)
	if errors.Is(err, runs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	data := map[string]any{"invocation_id": inv.ID, "integration": inv.Integration, "action": inv.Action}
	if r.Status != runs.StatusRunning {
		if r.Status == runs.StatusNeedsHuman {
			return runs.LogEvent(ctx, tx, r.ID, "approval_requested", "", "", data)
		}
		return nil
	}
	if _, err := runs.Apply(ctx, tx, h.codec, r, runs.Move{From: []string{runs.StatusRunning},
		To: runs.StatusNeedsHuman, Reason: ReasonApprovalRequired, Data: data, Waiting: true}); err != nil {
		return fmt.Errorf("run %s awaits approval: %w", r.ID, err)
	}
	return nil
}

func (h *runHooks) ApprovalResolved(ctx context.Context, tx pgx.Tx, inv Invocation) error {
	if inv.RunID == nil {
		return nil
	}
	r, err := runs.Lock(ctx, tx, inv.OrgID, *inv.RunID)
	if errors.Is(err, runs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	data := map[string]any{"invocation_id": inv.ID, "integration": inv.Integration, "action": inv.Action,
		"decision": inv.Status}
	if inv.Status == StatusExpired {
		return runs.LogEvent(ctx, tx, r.ID, "approval_expired", "", "", data)
	}
	if r.Status != runs.StatusNeedsHuman || r.StatusReason == nil || *r.StatusReason != ReasonApprovalRequired {
		return nil
	}
	waiting, err := invocationsdb.New(tx).CountOpenRunApprovals(ctx, invocationsdb.CountOpenRunApprovalsParams{RunID: r.ID, ID: inv.ID})
	if err != nil {
		return fmt.Errorf("count open approvals of run %s: %w", r.ID, err)
	}
	if waiting > 0 {
		return runs.LogEvent(ctx, tx, r.ID, "approval_resolved", "", "", data)
	}
	if _, err := runs.Apply(ctx, tx, h.codec, r, runs.Move{From: []string{runs.StatusNeedsHuman},
		To: runs.StatusRunning, Reason: ReasonApprovalResolved, Data: data, Waiting: true}); err != nil {
		return fmt.Errorf("resume run %s: %w", r.ID, err)
	}
	return nil
}
