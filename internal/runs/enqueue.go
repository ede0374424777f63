// Package runs holds the one path by which anything starts an automation run:
// a webhook or poll event matched by a trigger, a cron tick, or "Run Now".
// Enqueue writes the trigger event, the queued run, the run's first event-log
// row and the run's runs.lifecycle event (through the outbox) in the caller's
// transaction, so an event either queues exactly one run or nothing at all;
// the unique (trigger_id, dedup_key) makes every redelivery a no-op.
package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/internal/runs/runsdb"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// Event is a normalized trigger event (what a provider adapter, a poller, the
// scheduler or a manual run produces).
type Event struct {
	Provider          string
	EventType         string // normalized, e.g. "issue_created"
	ProviderEventType string // native, e.g. "issues:opened"
	OccurredAt        time.Time
	// DedupKey is unique per delivery for this trigger: a redelivery with the
	// same key changes nothing.
	DedupKey   string
	Title      string
	URL        string
	ExternalID string
	Context    map[string]any
}

// Source says where an event came from (for the event row and analytics).
type Source struct {
	OrgID        string
	TriggerID    string
	AutomationID string
	TriggerType  string // webhook | polling | schedule | manual
	// IntegrationID, WebhookEventID and PollGroupID are set when known.
	IntegrationID  string
	WebhookEventID string
	PollGroupID    string
	// TriggeredBy attributes manual runs to a person.
	TriggeredBy string
}

// Outcome of Enqueue and Record.
type Outcome struct {
	TriggerEventID string
	RunID          string // empty unless a run was queued
	// Duplicate is true when the (trigger, dedup key) was seen before: nothing
	// was written.
	Duplicate bool
}

// Skip reasons of trigger events (trigger_events.skip_reason).
const (
	SkipFilterMismatch     = "filter_mismatch"
	SkipTriggerDisabled    = "trigger_disabled"
	SkipAutomationDisabled = "automation_disabled"
	// The automation's LLM filter answered "no", or (failing closed) gave
	// no usable answer.
	SkipLLMFilterRejected = "llm_filter_rejected"
	SkipLLMFilterFailed   = "llm_filter_failed"
	// The organization is scheduled for deletion: nothing starts in it.
	SkipOrgPendingDeletion = "org_pending_deletion"
)

// Enqueue records ev as queued and creates its run, in tx.
func Enqueue(ctx context.Context, tx pgx.Tx, codec *schemas.Codec, src Source, ev Event) (Outcome, error) {
	// An organization scheduled for deletion starts nothing: the event is
	// recorded as skipped (the key-share lock orders this against the
	// schedule).
	if pending, err := orgsdb.New(tx).OrgDeletionPending(ctx, src.OrgID); err != nil {
		return Outcome{}, fmt.Errorf("runs: org deletion check: %w", err)
	} else if pending {
		return RecordSkipped(ctx, tx, codec, src, ev, SkipOrgPendingDeletion)
	}
	out, err := insertEvent(ctx, tx, src, ev, "queued", "", "")
	if err != nil || out.Duplicate {
		return out, err
	}
	// The deadline is set here, from the automation, so that every run has
	// one (the original system never set it).
	q := runsdb.New(tx)
	trig := src.TriggerID
	run, err := q.InsertQueuedRun(ctx, runsdb.InsertQueuedRunParams{OrgID: src.OrgID, AutomationID: src.AutomationID,
		TriggerEventID: out.TriggerEventID, TriggerID: &trig, TriggeredBy: nullable(src.TriggeredBy)})
	if err == nil && run.DeadlineAt == nil {
		err = errors.New("the run has no deadline")
	}
	if err != nil {
		return out, fmt.Errorf("insert run: %w", err)
	}
	out.RunID = run.ID
	deadline := *run.DeadlineAt
	if err := q.InsertQueuedRunEvent(ctx, runsdb.InsertQueuedRunEventParams{RunID: out.RunID,
		TriggerEventID: out.TriggerEventID}); err != nil {
		return out, fmt.Errorf("insert run event: %w", err)
	}
	life := schemas.New(src.OrgID, &schemas.RunLifecycle{
		RunID: out.RunID, AutomationID: src.AutomationID, TriggerEventID: out.TriggerEventID,
		TriggerID: &trig, ToStatus: schemas.RunQueued, DeadlineAt: &deadline,
	})
	life.CorrelationID = out.RunID
	if err := outbox.AddEvent(ctx, tx, codec, topics.RunsLifecycle, out.RunID, life); err != nil {
		return out, err
	}
	return out, announce(ctx, tx, codec, src, ev, out, schemas.TriggerEventMatched, "", "")
}

// RecordSkipped records an event a trigger did not act on, with the reason.
func RecordSkipped(ctx context.Context, tx pgx.Tx, codec *schemas.Codec, src Source, ev Event, reason string) (Outcome, error) {
	out, err := insertEvent(ctx, tx, src, ev, "skipped", reason, "")
	if err != nil || out.Duplicate {
		return out, err
	}
	return out, announce(ctx, tx, codec, src, ev, out, schemas.TriggerEventSkipped, reason, "")
}

// RecordFailed records an event whose payload could not be parsed; parsing
// again cannot succeed, so it is not retried.
func RecordFailed(ctx context.Context, tx pgx.Tx, codec *schemas.Codec, src Source, ev Event, parseErr error) (Outcome, error) {
	msg := parseErr.Error()
	if len(msg) > 1000 {
		msg = msg[:1000]
	}
	out, err := insertEvent(ctx, tx, src, ev, "failed", "", msg)
	if err != nil || out.Duplicate {
		return out, err
	}
	return out, announce(ctx, tx, codec, src, ev, out, schemas.TriggerEventFailed, "", msg)
}

func insertEvent(ctx context.Context, tx pgx.Tx, src Source, ev Event, status, skip, errMsg string) (Outcome, error) {
	if ev.DedupKey == "" {
		return Outcome{}, errors.New("runs: event has no dedup key")
	}
	ctxJSON, err := json.Marshal(orEmpty(ev.Context))
	if err != nil {
		return Outcome{}, fmt.Errorf("runs: event context: %w", err)
	}
	var out Outcome
	out.TriggerEventID, err = triggersdb.New(tx).RecordTriggerEvent(ctx, triggersdb.RecordTriggerEventParams{
		OrgID: src.OrgID, TriggerID: src.TriggerID, Status: status, SkipReason: nullable(skip), ErrorMessage: nullable(errMsg),
		Provider: ev.Provider, ProviderEventType: ev.ProviderEventType, NormalizedEventType: ev.EventType,
		ExternalEventID: nullable(ev.ExternalID), DedupKey: ev.DedupKey, Title: ev.Title, Url: nullable(ev.URL),
		ParsedContext: ctxJSON, WebhookEventID: nullable(src.WebhookEventID), OccurredAt: nullTime(ev.OccurredAt)})
	if errors.Is(err, pgx.ErrNoRows) {
		return Outcome{Duplicate: true}, nil
	}
	if err != nil {
		return out, fmt.Errorf("insert trigger event: %w", err)
	}
	return out, nil
}

// announce publishes the normalized event with its outcome on triggers.events.
func announce(ctx context.Context, tx pgx.Tx, codec *schemas.Codec, src Source, ev Event, out Outcome, status, skip, errMsg string) error {
	ctxJSON, _ := json.Marshal(orEmpty(ev.Context))
	p := &schemas.TriggerEvent{
		TriggerEventID: out.TriggerEventID, TriggerID: src.TriggerID, AutomationID: src.AutomationID,
		IntegrationID: ptr(src.IntegrationID), TriggerType: src.TriggerType, Provider: ev.Provider,
		NormalizedEventType: ev.EventType, ProviderEventType: ev.ProviderEventType, ProviderOccurredAt: occurred(ev.OccurredAt),
		DedupKey: ev.DedupKey, Title: ev.Title, URL: ptr(ev.URL), ExternalID: ptr(ev.ExternalID), Context: string(ctxJSON),
		Status: status, SkipReason: ptr(skip), Error: ptr(errMsg), RunID: ptr(out.RunID),
		WebhookEventID: ptr(src.WebhookEventID), PollGroupID: ptr(src.PollGroupID),
	}
	e := schemas.New(src.OrgID, p)
	e.CorrelationID = out.TriggerEventID
	return outbox.AddEvent(ctx, tx, codec, topics.TriggersEvents, src.TriggerID, e)
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func ptr(s string) *string { return nullable(s) }

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func occurred(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now().UTC().Truncate(time.Millisecond)
	}
	return t.UTC().Truncate(time.Millisecond)
}
