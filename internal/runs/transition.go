package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// Run statuses (automation_runs.status). The pipeline moves a run
// queued → enriching → ready → running → one terminal status; any live status
// may also end failed or timed_out.
const (
	StatusQueued     = schemas.RunQueued
	StatusEnriching  = schemas.RunEnriching
	StatusReady      = schemas.RunReady
	StatusRunning    = schemas.RunRunning
	StatusSucceeded  = schemas.RunSucceeded
	StatusFailed     = schemas.RunFailed
	StatusNeedsHuman = schemas.RunNeedsHuman
	StatusTimedOut   = schemas.RunTimedOut
	StatusCanceled   = schemas.RunCanceled
)

// Live are the statuses of a run that has not finished.
var Live = []string{StatusQueued, StatusEnriching, StatusReady, StatusRunning}

// Terminal reports whether status is final for the pipeline (a person may
// still resolve needs_human, failed and timed_out runs).
func Terminal(status string) bool { return !slices.Contains(Live, status) }

// Failure stages (automation_runs.failure_stage).
const (
	StageEnrichment   = "enrichment"
	StageExecution    = "execution"
	StageFinalization = "finalization"
)

// Run is an automation run as the pipeline stages see it.
type Run struct {
	ID, OrgID, AutomationID, TriggerEventID string
	TriggerID                               *string
	Status                                  string
	StatusReason, FailureStage              *string
	Attempt                                 int
	SessionID, ConfigurationID              *string
	CompletionID                            *string
	CompletionJSON, EnrichmentJSON          json.RawMessage
	PromptSentAt, DeadlineAt                *time.Time
	LastActivityAt, CompletedAt             *time.Time
	QueuedAt                                time.Time
}

const runCols = `id::text, org_id::text, automation_id::text, trigger_event_id::text, trigger_id::text, status,
	status_reason, failure_stage, attempt, session_id::text, configuration_id::text, completion_id,
	completion_json, enrichment_json, prompt_sent_at, deadline_at, last_activity_at, completed_at, queued_at`

func scanRun(row pgx.Row) (Run, error) {
	var r Run
	err := row.Scan(&r.ID, &r.OrgID, &r.AutomationID, &r.TriggerEventID, &r.TriggerID, &r.Status,
		&r.StatusReason, &r.FailureStage, &r.Attempt, &r.SessionID, &r.ConfigurationID, &r.CompletionID,
		&r.CompletionJSON, &r.EnrichmentJSON, &r.PromptSentAt, &r.DeadlineAt, &r.LastActivityAt, &r.CompletedAt, &r.QueuedAt)
	return r, err
}

// ErrNotFound is returned for a run id that does not exist (in the org).
var ErrNotFound = errors.New("runs: no such run")

// ErrStale is returned by Move when the run is no longer in one of the
// statuses the transition starts from: another delivery (or a person) moved
// it first, so the caller's work is already done or moot.
var ErrStale = errors.New("runs: run is not in the expected status")

// Lock reads a run and locks its row until tx ends. orgID, when not empty,
// scopes the lookup (an id of another org is ErrNotFound).
func Lock(ctx context.Context, tx pgx.Tx, orgID, runID string) (Run, error) {
	r, err := scanRun(tx.QueryRow(ctx, `SELECT `+runCols+` FROM automation_runs
		WHERE id = $1 AND ($2 = '' OR org_id::text = $2) FOR UPDATE`, runID, orgID))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, ErrNotFound
	}
	if err != nil {
		return r, fmt.Errorf("lock run %s: %w", runID, err)
	}
	return r, nil
}

// Get reads a run without locking it.
func Get(ctx context.Context, q Querier, orgID, runID string) (Run, error) {
	r, err := scanRun(q.QueryRow(ctx, `SELECT `+runCols+` FROM automation_runs
		WHERE id = $1 AND ($2 = '' OR org_id::text = $2)`, runID, orgID))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, ErrNotFound
	}
	return r, err
}

// Querier is what Get needs (a pool, a connection or a transaction).
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Move describes one status transition.
type Move struct {
	// From are the statuses the run may be in; anything else is ErrStale.
	From []string
	To   string
	// Reason is status_reason (e.g. enrichment_failed, inactivity_timeout).
	Reason string
	// Stage is failure_stage, for failed and timed_out.
	Stage                   string
	ErrorCode, ErrorMessage string
	// Outcome, Summary and CompletionID describe an agent's completion (they
	// travel on the runs.lifecycle event too).
	Outcome, Summary, CompletionID string
	// Data is stored on the event-log row.
	Data map[string]any
	// Waiting marks a pause mid-execution for a person (an action waiting
	// for approval: running → needs_human) and its resumption: the run has
	// not ended, so its trigger event, execution start and completion time
	// are left as they are.
	Waiting bool
}

// Apply applies m to the run r, which the caller locked with Lock in tx: the
// status compare-and-set (ErrStale when r.Status is not in m.From), the
// timestamps of the new status, the event-log row and the runs.lifecycle
// event (through the outbox), all in tx. It returns the run as updated.
func Apply(ctx context.Context, tx pgx.Tx, codec *schemas.Codec, r Run, m Move) (Run, error) {
	if !slices.Contains(m.From, r.Status) {
		return r, fmt.Errorf("%w: run %s is %s, not %v", ErrStale, r.ID, r.Status, m.From)
	}
	if m.ErrorMessage != "" && len(m.ErrorMessage) > 2000 {
		m.ErrorMessage = m.ErrorMessage[:2000]
	}
	updated, err := scanRun(tx.QueryRow(ctx, `UPDATE automation_runs SET
			status = $2,
			status_reason = coalesce($3, status_reason),
			failure_stage = coalesce($4, failure_stage),
			error_code = coalesce($5, error_code),
			error_message = coalesce($6, error_message),
			enrichment_started_at = CASE WHEN $2 = 'enriching' THEN now() ELSE enrichment_started_at END,
			enrichment_completed_at = CASE WHEN $2 = 'ready' THEN now() ELSE enrichment_completed_at END,
			execution_started_at = CASE WHEN $2 = 'running' AND NOT $7 THEN now() ELSE execution_started_at END,
			last_activity_at = CASE WHEN $2 IN ('running') THEN now() ELSE last_activity_at END,
			completed_at = CASE WHEN $2 IN ('queued', 'enriching', 'ready', 'running') OR $7 THEN NULL
			                    ELSE coalesce(completed_at, now()) END,
			updated_at = now()
		WHERE id = $1 RETURNING `+runCols,
		r.ID, m.To, nullable(m.Reason), nullable(m.Stage), nullable(m.ErrorCode), nullable(m.ErrorMessage), m.Waiting))
	if err != nil {
		return r, fmt.Errorf("update run %s to %s: %w", r.ID, m.To, err)
	}
	data := map[string]any{}
	for k, v := range m.Data {
		data[k] = v
	}
	for k, v := range map[string]string{"reason": m.Reason, "stage": m.Stage, "error_code": m.ErrorCode,
		"error_message": m.ErrorMessage, "outcome": m.Outcome, "completion_id": m.CompletionID} {
		if v != "" {
			data[k] = v
		}
	}
	if err := LogEvent(ctx, tx, r.ID, "status_transition", r.Status, m.To, data); err != nil {
		return r, err
	}
	if Terminal(m.To) && !m.Waiting {
		// The trigger event that started the run ends with it.
		ev := "completed"
		if m.To != StatusSucceeded && m.To != StatusNeedsHuman {
			ev = "failed"
		}
		if _, err := tx.Exec(ctx, `UPDATE trigger_events SET status = $2 WHERE id = $1 AND status <> $2`,
			r.TriggerEventID, ev); err != nil {
			return r, fmt.Errorf("update trigger event of run %s: %w", r.ID, err)
		}
	}
	from := r.Status
	life := schemas.New(r.OrgID, &schemas.RunLifecycle{
		RunID: r.ID, AutomationID: r.AutomationID, TriggerEventID: r.TriggerEventID, TriggerID: r.TriggerID,
		FromStatus: &from, ToStatus: m.To, Attempt: int32(updated.Attempt),
		StatusReason: nullable(m.Reason), FailureStage: nullable(m.Stage), SessionID: updated.SessionID,
		CompletionID: nullable(m.CompletionID), Outcome: nullable(m.Outcome), Summary: nullable(m.Summary),
		ErrorCode: nullable(m.ErrorCode), ErrorMessage: nullable(m.ErrorMessage), DeadlineAt: updated.DeadlineAt,
	})
	life.CorrelationID = r.ID
	if err := outbox.AddEvent(ctx, tx, codec, topics.RunsLifecycle, r.ID, life); err != nil {
		return r, err
	}
	return updated, nil
}

// LogEvent appends a row to the run's event log (automation_run_events).
// Types: status_transition, enrichment_saved, target_resolved, session_created,
// prompt_sent, completion, assigned, unassigned, resolved, artifact_written.
func LogEvent(ctx context.Context, tx pgx.Tx, runID, typ, from, to string, data map[string]any) error {
	if data == nil {
		data = map[string]any{}
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("run event data: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO automation_run_events (run_id, type, from_status, to_status, data)
		VALUES ($1, $2, $3, $4, $5)`, runID, typ, nullable(from), nullable(to), raw); err != nil {
		return fmt.Errorf("insert run event: %w", err)
	}
	return nil
}
