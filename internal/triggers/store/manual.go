package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
)

// ManualRun is the run "Run Now" queued.
type ManualRun struct {
	RunID          string `json:"run_id"`
	TriggerEventID string `json:"trigger_event_id"`
	TriggerID      string `json:"trigger_id"`
	Status         string `json:"status"`
}

// RunNow queues a run of an enabled automation attributed to userID, through
// the automation's single manual trigger (created on first use) and
// runs.Enqueue, like every other run. A disabled automation is a
// ConflictError automation_disabled.
func (s *Store) RunNow(ctx context.Context, orgID, automationID, note string, au Audit) (ManualRun, error) {
	var out ManualRun
	err := s.tx(ctx, func(tx pgx.Tx) error {
		enabled, err := lockAutomation(ctx, tx, orgID, automationID)
		if err != nil {
			return err
		}
		if !enabled {
			return &ConflictError{Code: "automation_disabled", Message: "the automation is disabled; enable it to run it"}
		}
		q := triggersdb.New(tx)
		if err := q.EnsureManualTrigger(ctx, triggersdb.EnsureManualTriggerParams{OrgID: orgID, AutomationID: automationID,
			CreatedBy: nullable(au.UserID)}); err != nil {
			return fmt.Errorf("create manual trigger: %w", err)
		}
		if out.TriggerID, err = q.ManualTriggerID(ctx, triggersdb.ManualTriggerIDParams{AutomationID: automationID, OrgID: orgID}); err != nil {
			return fmt.Errorf("find manual trigger: %w", err)
		}
		evCtx := map[string]any{"triggered_by": au.UserID}
		if note != "" {
			evCtx["note"] = note
		}
		res, err := runs.Enqueue(ctx, tx, s.Codec, runs.Source{
			OrgID: orgID, TriggerID: out.TriggerID, AutomationID: automationID, TriggerType: TypeManual, TriggeredBy: au.UserID,
		}, runs.Event{
			Provider: ProviderManual, EventType: "manual_run", ProviderEventType: "manual_trigger", OccurredAt: s.now(),
			DedupKey: "manual:" + uuid.NewString(), Title: "Manual run", Context: evCtx,
		})
		if err != nil {
			return err
		}
		if res.Duplicate || res.RunID == "" {
			return fmt.Errorf("manual run was not queued (duplicate dedup key)")
		}
		out.RunID, out.TriggerEventID, out.Status = res.RunID, res.TriggerEventID, runQueued
		return nil
	})
	return out, err
}
