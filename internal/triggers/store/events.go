package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/internal/runs/runsdb"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// Event statuses (trigger_events.status).
var EventStatuses = []string{"queued", "processing", "completed", "failed", "skipped"}

// Event is one event a trigger received, with the run it queued (if any).
type Event struct {
	ID           string `json:"id"`
	TriggerID    string `json:"trigger_id"`
	AutomationID string `json:"automation_id"`
	TriggerType  string `json:"trigger_type"`
	// Status is queued, processing, completed, failed or skipped.
	Status              string     `json:"status"`
	SkipReason          *string    `json:"skip_reason"`
	ErrorMessage        *string    `json:"error_message"`
	Provider            string     `json:"provider"`
	ProviderEventType   string     `json:"provider_event_type"`
	NormalizedEventType string     `json:"normalized_event_type"`
	ExternalEventID     *string    `json:"external_event_id"`
	DedupKey            string     `json:"dedup_key"`
	Title               string     `json:"title"`
	URL                 *string    `json:"url"`
	WebhookEventID      *string    `json:"webhook_event_id"`
	OccurredAt          *time.Time `json:"occurred_at"`
	ProcessedAt         time.Time  `json:"processed_at"`
	CreatedAt           time.Time  `json:"created_at"`
	RunID               *string    `json:"run_id"`
	RunStatus           *string    `json:"run_status"`
	// TriggeredBy is the person who started a manual run.
	TriggeredBy *string `json:"triggered_by"`
	// ParsedContext is the normalized event's context (GET
	// /trigger-events/:id only).
	ParsedContext map[string]any `json:"parsed_context,omitempty"`
}

// EventFilter narrows an event list; empty fields do not filter. Since is
// inclusive, Until exclusive (on created_at).
type EventFilter struct {
	TriggerID, AutomationID, Status, Provider string
	Since, Until                              *time.Time
}

// eventRow converts a listed row.
func eventRow(r triggersdb.ListTriggerEventsRow) Event {
	return Event{ID: r.ID, TriggerID: r.TriggerID, AutomationID: r.AutomationID, TriggerType: r.TriggerType, Status: r.Status,
		SkipReason: r.SkipReason, ErrorMessage: r.ErrorMessage, Provider: r.Provider, ProviderEventType: r.ProviderEventType,
		NormalizedEventType: r.NormalizedEventType, ExternalEventID: r.ExternalEventID, DedupKey: r.DedupKey, Title: r.Title, URL: r.Url,
		WebhookEventID: r.WebhookEventID, OccurredAt: r.OccurredAt, ProcessedAt: r.ProcessedAt, CreatedAt: r.CreatedAt,
		RunID: r.RunID, RunStatus: r.RunStatus, TriggeredBy: r.TriggeredBy}
}

// listEvents returns up to n events after (at, id), newest first.
func listEvents(ctx context.Context, q triggersdb.DBTX, orgID string, f EventFilter, at time.Time, id string, n int) ([]Event, error) {
	rows, err := triggersdb.New(q).ListTriggerEvents(ctx, triggersdb.ListTriggerEventsParams{OrgID: orgID,
		TriggerID: nullable(f.TriggerID), AutomationID: nullable(f.AutomationID), Status: nullable(f.Status), Provider: nullable(f.Provider),
		Since: f.Since, Until: f.Until, BeforeAt: at, BeforeID: id, Max: int32(n)})
	if err != nil {
		return nil, err
	}
	out := make([]Event, len(rows))
	for i, r := range rows {
		out[i] = eventRow(r)
	}
	return out, nil
}

// ListEvents lists the organization's trigger events, newest first.
func (s *Store) ListEvents(ctx context.Context, orgID string, f EventFilter, p Page) ([]Event, error) {
	return listEvents(ctx, s.Pool, orgID, f, p.At, p.ID, p.Limit+1)
}

func getEvent(ctx context.Context, q triggersdb.DBTX, orgID, id string) (Event, error) {
	r, err := triggersdb.New(q).GetTriggerEvent(ctx, triggersdb.GetTriggerEventParams{ID: id, OrgID: orgID})
	if isNoRows(err) {
		return Event{}, notFound("trigger event")
	}
	if err != nil {
		return Event{}, err
	}
	ev := eventRow(triggersdb.ListTriggerEventsRow{ID: r.ID, TriggerID: r.TriggerID, AutomationID: r.AutomationID, TriggerType: r.TriggerType,
		Status: r.Status, SkipReason: r.SkipReason, ErrorMessage: r.ErrorMessage, Provider: r.Provider, ProviderEventType: r.ProviderEventType,
		NormalizedEventType: r.NormalizedEventType, ExternalEventID: r.ExternalEventID, DedupKey: r.DedupKey, Title: r.Title, Url: r.Url,
		WebhookEventID: r.WebhookEventID, OccurredAt: r.OccurredAt, ProcessedAt: r.ProcessedAt, CreatedAt: r.CreatedAt,
		RunID: r.RunID, RunStatus: r.RunStatus, TriggeredBy: r.TriggeredBy})
	if err := json.Unmarshal(r.ParsedContext, &ev.ParsedContext); err != nil {
		return Event{}, fmt.Errorf("trigger event %s: parsed_context: %w", r.ID, err)
	}
	if ev.ParsedContext == nil {
		ev.ParsedContext = map[string]any{}
	}
	return ev, nil
}

// GetEvent returns one event with its parsed context.
func (s *Store) GetEvent(ctx context.Context, orgID, id string) (Event, error) {
	return getEvent(ctx, s.Pool, orgID, id)
}

// Run statuses this package writes.
const runQueued = "queued"

// SkipEvent skips a queued event by hand: the event becomes skipped (reason
// manual) and its run, which must still be queued, canceled; the run log row,
// the runs.lifecycle event and the triggers.events event are written in the
// same transaction. Any other state is a ConflictError invalid_transition.
func (s *Store) SkipEvent(ctx context.Context, orgID, id string, au Audit) (Event, error) {
	var out Event
	err := s.tx(ctx, func(tx pgx.Tx) error {
		q, rq := triggersdb.New(tx), runsdb.New(tx)
		status, err := q.LockTriggerEventStatus(ctx, triggersdb.LockTriggerEventStatusParams{ID: id, OrgID: orgID})
		if isNoRows(err) {
			return notFound("trigger event")
		}
		if err != nil {
			return err
		}
		if status != "queued" {
			return &ConflictError{Code: "invalid_transition", Message: "the event is " + status + "; only queued events can be skipped"}
		}
		run, err := rq.LockRunOfTriggerEvent(ctx, runsdb.LockRunOfTriggerEventParams{TriggerEventID: id, OrgID: orgID})
		hasRun := err == nil
		if err != nil && !isNoRows(err) {
			return err
		}
		if hasRun && run.Status != runQueued {
			return &ConflictError{Code: "invalid_transition", Message: "the event's run is already " + run.Status + "; only runs that have not started can be skipped"}
		}
		if err := q.SkipTriggerEventByHand(ctx, triggersdb.SkipTriggerEventByHandParams{ID: id, OrgID: orgID}); err != nil {
			return fmt.Errorf("skip event: %w", err)
		}
		if hasRun {
			if err := s.cancelRun(ctx, tx, orgID, run.ID, run.AutomationID, id, run.Attempt, au); err != nil {
				return err
			}
		}
		out, err = getEvent(ctx, tx, orgID, id)
		if err != nil {
			return err
		}
		if err := s.announceSkip(ctx, tx, orgID, out); err != nil {
			return err
		}
		return audit(ctx, tx, orgID, au, "trigger_event.skip", "trigger_event", id, map[string]any{"run_id": out.RunID})
	})
	return out, err
}

func (s *Store) cancelRun(ctx context.Context, tx pgx.Tx, orgID, runID, automationID, eventID string, attempt int32, au Audit) error {
	rq := runsdb.New(tx)
	triggerID, err := rq.CancelRunOfSkippedEvent(ctx, runsdb.CancelRunOfSkippedEventParams{ID: runID, OrgID: orgID})
	if err != nil {
		return fmt.Errorf("cancel run: %w", err)
	}
	data, _ := json.Marshal(map[string]any{"trigger_event_id": eventID, "reason": "manual_skip", "actor_id": au.UserID})
	if err := rq.InsertSkippedRunEvent(ctx, runsdb.InsertSkippedRunEventParams{RunID: runID, Data: data}); err != nil {
		return fmt.Errorf("insert run event: %w", err)
	}
	from, reason, msg := schemas.RunQueued, "manual_skip", "the trigger event was skipped by hand before the run started"
	life := schemas.New(orgID, &schemas.RunLifecycle{
		RunID: runID, AutomationID: automationID, TriggerEventID: eventID, TriggerID: triggerID,
		FromStatus: &from, ToStatus: schemas.RunCanceled, Attempt: attempt,
		StatusReason: &reason, ErrorMessage: &msg,
	})
	life.CorrelationID = runID
	return outbox.AddEvent(ctx, tx, s.Codec, topics.RunsLifecycle, runID, life)
}

// announceSkip publishes the event's new outcome on triggers.events.
func (s *Store) announceSkip(ctx context.Context, tx pgx.Tx, orgID string, ev Event) error {
	src, err := triggersdb.New(tx).SkippedEventSource(ctx, ev.ID)
	if err != nil {
		return err
	}
	occurred := ev.CreatedAt
	if ev.OccurredAt != nil {
		occurred = *ev.OccurredAt
	}
	skip := "manual"
	p := &schemas.TriggerEvent{
		TriggerEventID: ev.ID, TriggerID: ev.TriggerID, AutomationID: ev.AutomationID, IntegrationID: src.IntegrationID,
		TriggerType: ev.TriggerType, Provider: ev.Provider, NormalizedEventType: ev.NormalizedEventType,
		ProviderEventType: ev.ProviderEventType, ProviderOccurredAt: occurred.UTC().Truncate(time.Millisecond),
		DedupKey: ev.DedupKey, Title: ev.Title, URL: ev.URL, ExternalID: ev.ExternalEventID, Context: src.ParsedContext,
		Status: schemas.TriggerEventSkipped, SkipReason: &skip, RunID: ev.RunID, WebhookEventID: ev.WebhookEventID,
		PollGroupID: src.PollGroupID,
	}
	e := schemas.New(orgID, p)
	e.CorrelationID = ev.ID
	return outbox.AddEvent(ctx, tx, s.Codec, topics.TriggersEvents, ev.TriggerID, e)
}
