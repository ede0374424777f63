// Package query is what the REST API reads and changes of automation runs:
// an automation's runs (status filter, cursor pages), a run's detail with its
// event log, the organization's attention list, claiming ("assign") and
// manual resolution, and the service-side completion.
//
// Every function takes the caller's organization and filters on it, so an id
// of another organization is ErrNotFound exactly like a missing one. Writes
// lock the run row (runs.Lock) and change it in one transaction with its
// event-log row; a resolution is a status transition and goes through
// runs.Apply (compare-and-set, event log, runs.lifecycle event through the
// outbox, trigger event) with resolved_by / resolved_at / resolution_note
// set in the same transaction.
//
// Decisions:
//   - Any member may claim a run; claiming a run someone else holds is a
//     ClaimedError (the API's 409 run_claimed, naming the claimant); claiming
//     one's own claim again changes nothing and logs nothing.
//   - Only the claimant or an admin (or owner) may unclaim; unclaiming an
//     unclaimed run changes nothing.
//   - Any member may resolve a needs_human, failed or timed_out run, unless
//     another member holds its claim (then only an admin may): a claim is a
//     promise to deal with it. A run resolves once (ErrAlreadyResolved).
//   - The attention list is the failed / needs_human / timed_out runs that
//     ended within the window and are not resolved, most recently ended
//     first.
package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/evidence"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/runsdb"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
	"github.com/proliferate/proliferate/schemas"
)

// Store runs the queries.
type Store struct {
	Pool  *pgxpool.Pool
	Codec *schemas.Codec
}

// Errors.
var (
	// ErrNotFound: no such run in the organization.
	ErrNotFound = errors.New("run not found")
	// ErrAutomationNotFound: no such automation in the organization.
	ErrAutomationNotFound = errors.New("automation not found")
	// ErrNotClaimant: only the claimant or an admin may unclaim.
	ErrNotClaimant = errors.New("only the member who claimed the run or an admin can unclaim it")
	// ErrInvalidTransition: the run is not in a status a person may resolve.
	ErrInvalidTransition = errors.New("only needs_human, failed or timed_out runs can be resolved")
	// ErrAlreadyResolved: the run was resolved before.
	ErrAlreadyResolved = errors.New("the run was already resolved")
)

// ClaimedError is a run claimed by another member.
type ClaimedError struct{ By string }

func (e *ClaimedError) Error() string { return "the run is claimed by " + e.By }

// Resolvable are the statuses a person may resolve a run from.
var Resolvable = []string{runs.StatusNeedsHuman, runs.StatusFailed, runs.StatusTimedOut}

// Outcomes a person may resolve a run to.
var Outcomes = []string{runs.StatusSucceeded, runs.StatusFailed}

// Statuses are every run status (for filters).
var Statuses = []string{runs.StatusQueued, runs.StatusEnriching, runs.StatusReady, runs.StatusRunning,
	runs.StatusSucceeded, runs.StatusFailed, runs.StatusNeedsHuman, runs.StatusTimedOut, runs.StatusCanceled, "skipped"}

// Summary is a run in a list.
type Summary struct {
	ID             string  `json:"id"`
	AutomationID   string  `json:"automation_id"`
	AutomationName string  `json:"automation_name"`
	TriggerEventID string  `json:"trigger_event_id"`
	TriggerID      *string `json:"trigger_id"`
	// Title and Provider are the trigger event's.
	Title        string  `json:"title"`
	Provider     string  `json:"provider"`
	Status       string  `json:"status"`
	StatusReason *string `json:"status_reason"`
	// FailureStage is the stage a failed or timed-out run stopped in.
	FailureStage    *string    `json:"failure_stage"`
	ErrorCode       *string    `json:"error_code"`
	ErrorMessage    *string    `json:"error_message"`
	SessionID       *string    `json:"session_id"`
	ConfigurationID *string    `json:"configuration_id"`
	AssignedTo      *string    `json:"assigned_to"`
	AssignedAt      *time.Time `json:"assigned_at"`
	QueuedAt        time.Time  `json:"queued_at"`
	DeadlineAt      *time.Time `json:"deadline_at"`
	CompletedAt     *time.Time `json:"completed_at"`
	ResolvedAt      *time.Time `json:"resolved_at"`
	CreatedAt       time.Time  `json:"created_at"`
	UpdatedAt       time.Time  `json:"updated_at"`
}

// summaries are the Summary of each row (the list queries read the
// summary's columns, in its order).
func summaries[R runsdb.RunSummaryRow | runsdb.ListAutomationRunsRow | runsdb.AttentionRunsRow | runsdb.ClaimedRunsRow](rows []R, err error) ([]Summary, error) {
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	out := make([]Summary, 0, len(rows))
	for _, r := range rows {
		out = append(out, Summary(runsdb.RunSummaryRow(r)))
	}
	return out, nil
}

// Page is a list position: rows strictly after (At, ID) in (created_at DESC,
// id DESC) order, at most Limit+1 of them (the API trims the extra one).
type Page struct {
	Limit int
	At    time.Time
	ID    string
}

// ListForAutomation lists an automation's runs, newest first, only those in
// statuses when it is not empty.
func (s *Store) ListForAutomation(ctx context.Context, orgID, automationID string, statuses []string, p Page) ([]Summary, error) {
	_, err := triggersdb.New(s.Pool).AutomationExists(ctx, triggersdb.AutomationExistsParams{ID: automationID, OrgID: orgID})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrAutomationNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("find automation: %w", err)
	}
	if statuses == nil {
		statuses = []string{}
	}
	return summaries(runsdb.New(s.Pool).ListAutomationRuns(ctx, runsdb.ListAutomationRunsParams{OrgID: orgID,
		AutomationID: automationID, Statuses: statuses, At: p.At, AfterID: p.ID, Max: int32(p.Limit + 1)}))
}

// Attention lists the organization's unresolved failed, needs_human and
// timed_out runs that ended within maxAgeDays, most recently ended first.
func (s *Store) Attention(ctx context.Context, orgID string, maxAgeDays, limit int) ([]Summary, error) {
	return summaries(runsdb.New(s.Pool).AttentionRuns(ctx, runsdb.AttentionRunsParams{OrgID: orgID,
		MaxAgeDays: int32(maxAgeDays), Max: int32(limit)}))
}

// Claimed lists the runs userID claimed in the organization, newest first.
func (s *Store) Claimed(ctx context.Context, orgID, userID string, p Page) ([]Summary, error) {
	return summaries(runsdb.New(s.Pool).ClaimedRuns(ctx, runsdb.ClaimedRunsParams{OrgID: orgID, UserID: &userID,
		At: p.At, AfterID: p.ID, Max: int32(p.Limit + 1)}))
}

// Detail is everything about one run.
type Detail struct {
	Summary
	Attempt               int        `json:"attempt"`
	TriggeredBy           *string    `json:"triggered_by"`
	EnrichmentStartedAt   *time.Time `json:"enrichment_started_at"`
	EnrichmentCompletedAt *time.Time `json:"enrichment_completed_at"`
	ExecutionStartedAt    *time.Time `json:"execution_started_at"`
	PromptSentAt          *time.Time `json:"prompt_sent_at"`
	LastActivityAt        *time.Time `json:"last_activity_at"`
	CompletionID          *string    `json:"completion_id"`
	// EnrichmentJSON and CompletionJSON are null until written.
	EnrichmentJSON        json.RawMessage `json:"enrichment_json"`
	CompletionJSON        json.RawMessage `json:"completion_json"`
	EnrichmentArtifactRef *string         `json:"enrichment_artifact_ref"`
	CompletionArtifactRef *string         `json:"completion_artifact_ref"`
	// Resolution is set once a person resolved the run.
	Resolution   *Resolution  `json:"resolution"`
	TriggerEvent TriggerEvent `json:"trigger_event"`
	// Events is the run's event log, oldest first.
	Events []Event `json:"events"`
	// Evidence is the verification evidence the run's agent uploaded
	// (verify), oldest first; download each through its session
	// (GET /sessions/:session_id/evidence/:id/content).
	Evidence []evidence.Item `json:"evidence"`
}

// Resolution is a person's manual resolution of a run.
type Resolution struct {
	ResolvedBy *string   `json:"resolved_by"`
	ResolvedAt time.Time `json:"resolved_at"`
	Note       *string   `json:"note"`
}

// TriggerEvent is the event that started the run.
type TriggerEvent struct {
	ID                string     `json:"id"`
	Title             string     `json:"title"`
	Provider          string     `json:"provider"`
	URL               *string    `json:"url"`
	EventType         string     `json:"event_type"`
	ProviderEventType string     `json:"provider_event_type"`
	ExternalEventID   *string    `json:"external_event_id"`
	OccurredAt        *time.Time `json:"occurred_at"`
}

// Event is one row of a run's event log.
type Event struct {
	ID         int64          `json:"id"`
	Type       string         `json:"type"`
	FromStatus *string        `json:"from_status"`
	ToStatus   *string        `json:"to_status"`
	Data       map[string]any `json:"data"`
	CreatedAt  time.Time      `json:"created_at"`
}

// maxEvents bounds the event log a detail returns (a run has a handful).
const maxEvents = 1000

// Get returns a run's detail.
func (s *Store) Get(ctx context.Context, orgID, runID string) (Detail, error) {
	var d Detail
	q := runsdb.New(s.Pool)
	row, err := q.RunDetail(ctx, runsdb.RunDetailParams{ID: runID, OrgID: orgID})
	if errors.Is(err, pgx.ErrNoRows) {
		return d, ErrNotFound
	}
	if err != nil {
		return d, fmt.Errorf("get run: %w", err)
	}
	d = Detail{
		Summary: Summary{ID: row.ID, AutomationID: row.AutomationID, AutomationName: row.AutomationName,
			TriggerEventID: row.TriggerEventID, TriggerID: row.TriggerID, Title: row.Title, Provider: row.Provider,
			Status: row.Status, StatusReason: row.StatusReason, FailureStage: row.FailureStage, ErrorCode: row.ErrorCode,
			ErrorMessage: row.ErrorMessage, SessionID: row.SessionID, ConfigurationID: row.ConfigurationID,
			AssignedTo: row.AssignedTo, AssignedAt: row.AssignedAt, QueuedAt: row.QueuedAt, DeadlineAt: row.DeadlineAt,
			CompletedAt: row.CompletedAt, ResolvedAt: row.ResolvedAt, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt},
		Attempt: int(row.Attempt), TriggeredBy: row.TriggeredBy, EnrichmentStartedAt: row.EnrichmentStartedAt,
		EnrichmentCompletedAt: row.EnrichmentCompletedAt, ExecutionStartedAt: row.ExecutionStartedAt,
		PromptSentAt: row.PromptSentAt, LastActivityAt: row.LastActivityAt, CompletionID: row.CompletionID,
		EnrichmentJSON: row.EnrichmentJson, CompletionJSON: row.CompletionJson,
		EnrichmentArtifactRef: row.EnrichmentArtifactRef, CompletionArtifactRef: row.CompletionArtifactRef,
		TriggerEvent: TriggerEvent{ID: row.EventID, Title: row.Title, Provider: row.Provider, URL: row.EventUrl,
			EventType: row.NormalizedEventType, ProviderEventType: row.ProviderEventType,
			ExternalEventID: row.ExternalEventID, OccurredAt: row.OccurredAt},
	}
	if d.ResolvedAt != nil {
		d.Resolution = &Resolution{ResolvedBy: row.ResolvedBy, ResolvedAt: *d.ResolvedAt, Note: row.ResolutionNote}
	}
	events, err := q.RunEventLog(ctx, runsdb.RunEventLogParams{RunID: runID, Max: maxEvents})
	if err != nil {
		return d, fmt.Errorf("run events: %w", err)
	}
	d.Events = make([]Event, 0, len(events))
	for _, e := range events {
		ev := Event{ID: e.ID, Type: e.Type, FromStatus: e.FromStatus, ToStatus: e.ToStatus, CreatedAt: e.CreatedAt}
		if err := json.Unmarshal(e.Data, &ev.Data); err != nil {
			return d, fmt.Errorf("run events: %w", err)
		}
		d.Events = append(d.Events, ev)
	}
	if d.Evidence, err = (&evidence.Store{Pool: s.Pool}).ListRun(ctx, orgID, runID); err != nil {
		return d, fmt.Errorf("run evidence: %w", err)
	}
	return d, nil
}

// getSummary reads one run's summary (inside the write's transaction).
func getSummary(ctx context.Context, q pgx.Tx, orgID, runID string) (Summary, error) {
	row, err := runsdb.New(q).RunSummary(ctx, runsdb.RunSummaryParams{ID: runID, OrgID: orgID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Summary{}, ErrNotFound
	}
	return Summary(row), err
}

// lock locks the run of the organization and returns it with its claimant
// and resolution time.
func lock(ctx context.Context, tx pgx.Tx, orgID, runID string) (runs.Run, *string, *time.Time, error) {
	r, err := runs.Lock(ctx, tx, orgID, runID)
	if errors.Is(err, runs.ErrNotFound) {
		return r, nil, nil, ErrNotFound
	}
	if err != nil {
		return r, nil, nil, err
	}
	claim, err := runsdb.New(tx).RunClaim(ctx, runID)
	if err != nil {
		return r, nil, nil, fmt.Errorf("read claim: %w", err)
	}
	return r, claim.AssignedTo, claim.ResolvedAt, nil
}

// Assign claims a run for userID (idempotent for the claimant).
func (s *Store) Assign(ctx context.Context, orgID, runID, userID string) (Summary, error) {
	var out Summary
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		_, claimant, _, err := lock(ctx, tx, orgID, runID)
		if err != nil {
			return err
		}
		switch {
		case claimant != nil && *claimant != userID:
			return &ClaimedError{By: *claimant}
		case claimant == nil:
			if err := runsdb.New(tx).AssignRun(ctx, runsdb.AssignRunParams{ID: runID, UserID: &userID}); err != nil {
				return fmt.Errorf("assign run: %w", err)
			}
			if err := runs.LogEvent(ctx, tx, runID, "assigned", "", "", map[string]any{"user_id": userID}); err != nil {
				return err
			}
		}
		out, err = getSummary(ctx, tx, orgID, runID)
		return err
	})
	return out, err
}

// Unassign removes the claim on a run; only the claimant or an admin
// (asAdmin) may. An unclaimed run is left as it is.
func (s *Store) Unassign(ctx context.Context, orgID, runID, userID string, asAdmin bool) (Summary, error) {
	var out Summary
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		_, claimant, _, err := lock(ctx, tx, orgID, runID)
		if err != nil {
			return err
		}
		if claimant != nil {
			if *claimant != userID && !asAdmin {
				return ErrNotClaimant
			}
			if err := runsdb.New(tx).UnassignRun(ctx, runID); err != nil {
				return fmt.Errorf("unassign run: %w", err)
			}
			if err := runs.LogEvent(ctx, tx, runID, "unassigned", "", "", map[string]any{
				"user_id": userID, "claimant": *claimant}); err != nil {
				return err
			}
		}
		out, err = getSummary(ctx, tx, orgID, runID)
		return err
	})
	return out, err
}

// Resolution limits.
const MaxNoteLen = 4000

// Resolve moves a needs_human, failed or timed_out run to outcome
// (succeeded or failed) for userID, with an optional note, in one
// transaction: runs.Apply (reason manual_resolution) plus resolved_by,
// resolved_at and resolution_note. asAdmin lets an admin resolve a run
// another member claimed.
func (s *Store) Resolve(ctx context.Context, orgID, runID, userID string, asAdmin bool, outcome, note string) (Summary, error) {
	if !slices.Contains(Outcomes, outcome) {
		return Summary{}, fmt.Errorf("outcome %q: %w", outcome, ErrInvalidTransition)
	}
	var out Summary
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		r, claimant, resolvedAt, err := lock(ctx, tx, orgID, runID)
		if err != nil {
			return err
		}
		if resolvedAt != nil {
			return ErrAlreadyResolved
		}
		if !slices.Contains(Resolvable, r.Status) {
			return fmt.Errorf("run is %s: %w", r.Status, ErrInvalidTransition)
		}
		if claimant != nil && *claimant != userID && !asAdmin {
			return &ClaimedError{By: *claimant}
		}
		data := map[string]any{"resolved_by": userID}
		if note != "" {
			data["note"] = note
		}
		if _, err := runs.Apply(ctx, tx, s.Codec, r, runs.Move{From: Resolvable, To: outcome, Reason: "manual_resolution",
			Outcome: outcome, Data: data}); err != nil {
			return err
		}
		if err := runsdb.New(tx).RecordRunResolution(ctx, runsdb.RecordRunResolutionParams{ID: runID,
			UserID: &userID, Note: nullable(note)}); err != nil {
			return fmt.Errorf("record resolution: %w", err)
		}
		out, err = getSummary(ctx, tx, orgID, runID)
		return err
	})
	return out, err
}

// CompleteResult is the answer to a completion.
type CompleteResult struct {
	RunID        string `json:"run_id"`
	Status       string `json:"status"`
	CompletionID string `json:"completion_id"`
	// Replayed is true when this completion id had already completed the
	// run: nothing changed.
	Replayed bool `json:"replayed"`
}

// Complete applies an agent's completion for a platform service (any
// organization; the gateway checks the session): runs.Complete in one
// transaction. Its errors are runs.ErrInvalid, runs.ErrNotFound,
// runs.ErrAlreadyCompleted and runs.ErrNotRunning.
func (s *Store) Complete(ctx context.Context, c runs.Completion) (CompleteResult, error) {
	var out CompleteResult
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		res, err := runs.Complete(ctx, tx, s.Codec, "", "", c)
		if err != nil {
			return err
		}
		out = CompleteResult{RunID: res.Run.ID, Status: res.Run.Status, Replayed: res.Replayed}
		if res.Run.CompletionID != nil {
			out.CompletionID = *res.Run.CompletionID
		}
		return nil
	})
	return out, err
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
