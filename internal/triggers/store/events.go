package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/outbox"
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

const eventCols = `e.id::text, e.trigger_id::text, t.automation_id::text, t.trigger_type, e.status, e.skip_reason, e.error_message,
	e.provider, e.provider_event_type, e.normalized_event_type, e.external_event_id, e.dedup_key, e.title, e.url,
	e.webhook_event_id, e.occurred_at, e.processed_at, e.created_at, r.id::text, r.status, r.triggered_by::text`

const eventFrom = ` FROM trigger_events e JOIN triggers t ON t.id = e.trigger_id
	LEFT JOIN automation_runs r ON r.trigger_event_id = e.id`

func eventDest(ev *Event) []any {
	return []any{&ev.ID, &ev.TriggerID, &ev.AutomationID, &ev.TriggerType, &ev.Status, &ev.SkipReason, &ev.ErrorMessage,
		&ev.Provider, &ev.ProviderEventType, &ev.NormalizedEventType, &ev.ExternalEventID, &ev.DedupKey, &ev.Title, &ev.URL,
		&ev.WebhookEventID, &ev.OccurredAt, &ev.ProcessedAt, &ev.CreatedAt, &ev.RunID, &ev.RunStatus, &ev.TriggeredBy}
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// listEvents returns up to n events after (at, id), newest first.
func listEvents(ctx context.Context, q querier, orgID string, f EventFilter, at time.Time, id string, n int) ([]Event, error) {
	a := args{orgID}
	sql := `SELECT ` + eventCols + eventFrom + ` WHERE e.org_id = $1`
	if f.TriggerID != "" {
		sql += ` AND e.trigger_id = ` + a.add(f.TriggerID) + `::uuid`
	}
	if f.AutomationID != "" {
		sql += ` AND t.automation_id = ` + a.add(f.AutomationID) + `::uuid`
	}
	if f.Status != "" {
		sql += ` AND e.status = ` + a.add(f.Status)
	}
	if f.Provider != "" {
		sql += ` AND e.provider = ` + a.add(f.Provider)
	}
	if f.Since != nil {
		sql += ` AND e.created_at >= ` + a.add(*f.Since)
	}
	if f.Until != nil {
		sql += ` AND e.created_at < ` + a.add(*f.Until)
	}
	sql += ` AND (e.created_at, e.id) < (` + a.add(at) + `, ` + a.add(id) + `::uuid)
		ORDER BY e.created_at DESC, e.id DESC LIMIT ` + a.add(n)
	rows, err := q.Query(ctx, sql, a...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var ev Event
		err := r.Scan(eventDest(&ev)...)
		return ev, err
	})
	if out == nil {
		out = []Event{}
	}
	return out, err
}

// ListEvents lists the organization's trigger events, newest first.
func (s *Store) ListEvents(ctx context.Context, orgID string, f EventFilter, p Page) ([]Event, error) {
	return listEvents(ctx, s.Pool, orgID, f, p.At, p.ID, p.Limit+1)
}

func getEvent(ctx context.Context, q querier, orgID, id string) (Event, error) {
	var ev Event
	dest := append(eventDest(&ev), &ev.ParsedContext)
	err := q.QueryRow(ctx, `SELECT `+eventCols+`, e.parsed_context`+eventFrom+` WHERE e.id = $1 AND e.org_id = $2`, id, orgID).Scan(dest...)
	if isNoRows(err) {
		return ev, notFound("trigger event")
	}
	if ev.ParsedContext == nil && err == nil {
		ev.ParsedContext = map[string]any{}
	}
	return ev, err
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
		var status string
		err := tx.QueryRow(ctx, `SELECT status FROM trigger_events WHERE id = $1 AND org_id = $2 FOR UPDATE`, id, orgID).Scan(&status)
		if isNoRows(err) {
			return notFound("trigger event")
		}
		if err != nil {
			return err
		}
		if status != "queued" {
			return &ConflictError{Code: "invalid_transition", Message: "the event is " + status + "; only queued events can be skipped"}
		}
		var runID, runStatus, automationID string
		var attempt int32
		err = tx.QueryRow(ctx, `SELECT id::text, status, automation_id::text, attempt FROM automation_runs
			WHERE trigger_event_id = $1 AND org_id = $2 FOR UPDATE`, id, orgID).Scan(&runID, &runStatus, &automationID, &attempt)
		hasRun := err == nil
		if err != nil && !isNoRows(err) {
			return err
		}
		if hasRun && runStatus != runQueued {
			return &ConflictError{Code: "invalid_transition", Message: "the event's run is already " + runStatus + "; only runs that have not started can be skipped"}
		}
		if _, err := tx.Exec(ctx, `UPDATE trigger_events SET status = 'skipped', skip_reason = 'manual', processed_at = now()
			WHERE id = $1 AND org_id = $2`, id, orgID); err != nil {
			return fmt.Errorf("skip event: %w", err)
		}
		if hasRun {
			if err := s.cancelRun(ctx, tx, orgID, runID, automationID, id, attempt, au); err != nil {
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
	var triggerID string
	err := tx.QueryRow(ctx, `UPDATE automation_runs SET status = 'canceled', status_reason = 'manual_skip', completed_at = now(),
			updated_at = now()
		WHERE id = $1 AND org_id = $2 RETURNING trigger_id::text`, runID, orgID).Scan(&triggerID)
	if err != nil {
		return fmt.Errorf("cancel run: %w", err)
	}
	data, _ := json.Marshal(map[string]any{"trigger_event_id": eventID, "reason": "manual_skip", "actor_id": au.UserID})
	if _, err := tx.Exec(ctx, `INSERT INTO automation_run_events (run_id, type, from_status, to_status, data)
		VALUES ($1, 'status_transition', 'queued', 'canceled', $2)`, runID, data); err != nil {
		return fmt.Errorf("insert run event: %w", err)
	}
	from, reason, msg := schemas.RunQueued, "manual_skip", "the trigger event was skipped by hand before the run started"
	life := schemas.New(orgID, &schemas.RunLifecycle{
		RunID: runID, AutomationID: automationID, TriggerEventID: eventID, TriggerID: nullable(triggerID),
		FromStatus: &from, ToStatus: schemas.RunCanceled, Attempt: attempt,
		StatusReason: &reason, ErrorMessage: &msg,
	})
	life.CorrelationID = runID
	return outbox.AddEvent(ctx, tx, s.Codec, topics.RunsLifecycle, runID, life)
}

// announceSkip publishes the event's new outcome on triggers.events.
func (s *Store) announceSkip(ctx context.Context, tx pgx.Tx, orgID string, ev Event) error {
	var integrationID, pollGroupID *string
	var ctxJSON []byte
	if err := tx.QueryRow(ctx, `SELECT t.integration_id::text, t.poll_group_id::text, e.parsed_context::text
		FROM trigger_events e JOIN triggers t ON t.id = e.trigger_id WHERE e.id = $1`, ev.ID).Scan(&integrationID, &pollGroupID, &ctxJSON); err != nil {
		return err
	}
	occurred := ev.CreatedAt
	if ev.OccurredAt != nil {
		occurred = *ev.OccurredAt
	}
	skip := "manual"
	p := &schemas.TriggerEvent{
		TriggerEventID: ev.ID, TriggerID: ev.TriggerID, AutomationID: ev.AutomationID, IntegrationID: integrationID,
		TriggerType: ev.TriggerType, Provider: ev.Provider, NormalizedEventType: ev.NormalizedEventType,
		ProviderEventType: ev.ProviderEventType, ProviderOccurredAt: occurred.UTC().Truncate(time.Millisecond),
		DedupKey: ev.DedupKey, Title: ev.Title, URL: ev.URL, ExternalID: ev.ExternalEventID, Context: string(ctxJSON),
		Status: schemas.TriggerEventSkipped, SkipReason: &skip, RunID: ev.RunID, WebhookEventID: ev.WebhookEventID,
		PollGroupID: pollGroupID,
	}
	e := schemas.New(orgID, p)
	e.CorrelationID = ev.ID
	return outbox.AddEvent(ctx, tx, s.Codec, topics.TriggersEvents, ev.TriggerID, e)
}
