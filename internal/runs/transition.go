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
	"github.com/proliferate/proliferate/internal/runs/runsdb"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
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

// fromRow is the Run of a run row (LockRun, GetRun and MoveRun read the
// same columns).
func fromRow(row runsdb.LockRunRow) Run {
	return Run{
		ID: row.ID, OrgID: row.OrgID, AutomationID: row.AutomationID, TriggerEventID: row.TriggerEventID,
		TriggerID: row.TriggerID, Status: row.Status, StatusReason: row.StatusReason, FailureStage: row.FailureStage,
		Attempt: int(row.Attempt), SessionID: row.SessionID, ConfigurationID: row.ConfigurationID,
		CompletionID: row.CompletionID, CompletionJSON: row.CompletionJson, EnrichmentJSON: row.EnrichmentJson,
		PromptSentAt: row.PromptSentAt, DeadlineAt: row.DeadlineAt, LastActivityAt: row.LastActivityAt,
		CompletedAt: row.CompletedAt, QueuedAt: row.QueuedAt,
	}
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
	row, err := runsdb.New(tx).LockRun(ctx, runsdb.LockRunParams{ID: runID, OrgID: orgID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, ErrNotFound
	}
	if err != nil {
		return Run{}, fmt.Errorf("lock run %s: %w", runID, err)
	}
	return fromRow(row), nil
}

// Get reads a run without locking it.
func Get(ctx context.Context, q Querier, orgID, runID string) (Run, error) {
	row, err := runsdb.New(q).GetRun(ctx, runsdb.GetRunParams{ID: runID, OrgID: orgID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, ErrNotFound
	}
	return fromRow(runsdb.LockRunRow(row)), err
}

// Querier is what Get needs (a pool, a connection or a transaction).
type Querier = runsdb.DBTX

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
	row, err := runsdb.New(tx).MoveRun(ctx, runsdb.MoveRunParams{ID: r.ID, Status: m.To, Reason: nullable(m.Reason),
		Stage: nullable(m.Stage), ErrorCode: nullable(m.ErrorCode), ErrorMessage: nullable(m.ErrorMessage), Waiting: m.Waiting})
	if err != nil {
		return r, fmt.Errorf("update run %s to %s: %w", r.ID, m.To, err)
	}
	updated := fromRow(runsdb.LockRunRow(row))
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
		if err := triggersdb.New(tx).EndRunTriggerEvent(ctx, triggersdb.EndRunTriggerEventParams{
			ID: r.TriggerEventID, Status: ev}); err != nil {
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
	if err := runsdb.New(tx).InsertRunEvent(ctx, runsdb.InsertRunEventParams{RunID: runID, Type: typ,
		FromStatus: nullable(from), ToStatus: nullable(to), Data: raw}); err != nil {
		return fmt.Errorf("insert run event: %w", err)
	}
	return nil
}
