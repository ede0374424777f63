// Package sessions is the durable store of coding-agent sessions: their
// metadata row (never in the token streaming path), lifecycle transitions,
// telemetry counters and the idempotent log of gateway-executed tool calls.
//
// Design:
//   - Every state change is one Postgres transaction that updates the row with
//     a compare-and-set on status and appends the matching event (topic
//     sessions.events, keyed by session id; tools.calls for tool invocations)
//     through the transactional outbox, so the event exists exactly when the
//     change does.
//   - Creation is idempotent per organization (idempotency_key is unique per
//     org) and admission-controlled: a per-org transaction-scoped advisory lock
//     serializes creators of one organization while the live sessions
//     (starting/running) are counted against MaxConcurrent and the billing
//     gate (Store.Admit: credits, billing state, the plan's concurrency
//     limit) runs in the same transaction.
//   - Telemetry is flushed as atomic increments (tool_calls, messages,
//     active seconds) plus a de-duplicated append of PR URLs, so concurrent
//     flushers never lose counts.
//   - Tool invocations are unique by (session, tool_call_id): BeginTool either
//     claims a fresh row or returns the existing one, so a retried callback
//     replays the stored result instead of executing twice, also across
//     gateway restarts.
package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/schemas"
)

// Stored session statuses.
const (
	StatusStarting = "starting"
	StatusRunning  = "running"
	StatusPaused   = "paused"
	StatusStopped  = "stopped"
	StatusFailed   = "failed"
)

// Session types, client types and sandbox modes.
const (
	TypeSetup      = "setup"
	TypeCoding     = "coding"
	TypeAutomation = "automation"

	ClientWeb        = "web"
	ClientAPI        = "api"
	ClientSlack      = "slack"
	ClientCLI        = "cli"
	ClientAutomation = "automation"

	ModeDeferred  = "deferred"
	ModeImmediate = "immediate"
)

// StopSnapshotFailed is the stop reason of a session whose idle snapshots
// kept failing (circuit breaker).
const StopSnapshotFailed = "snapshot_failed"

// Display statuses, derived by DisplayStatus.
const (
	DisplayActive     = "active"
	DisplayIdle       = "idle"
	DisplayPaused     = "paused"
	DisplayBlocked    = "blocked"
	DisplayRecovering = "recovering"
	DisplayCompleted  = "completed"
	DisplayFailed     = "failed"
)

// Errors.
var (
	// ErrNotFound: no such session (or not in the given organization).
	ErrNotFound = errors.New("session not found")
	// ErrLimit: the organization already has MaxConcurrent live sessions.
	ErrLimit = errors.New("concurrent session limit reached")
	// ErrInvalidTransition: the session's status does not allow the change
	// (for example pausing a stopped session).
	ErrInvalidTransition = errors.New("invalid session status transition")
	// ErrSandboxChanged: a fenced update found the session no longer
	// running on the sandbox it named (another actor moved it on).
	ErrSandboxChanged = errors.New("session sandbox changed")
	// ErrConfigurationNotFound: CreateInput.ConfigurationID is not a
	// configuration of the organization.
	ErrConfigurationNotFound = errors.New("configuration not found")
	// ErrInvalid: the input is malformed (unknown session type, setup without
	// configuration, title too long, ...). Wrapped with the detail.
	ErrInvalid = errors.New("invalid session input")
	// ErrOrgPendingDeletion: the organization is scheduled for deletion;
	// nothing new starts in it until an owner restores it.
	ErrOrgPendingDeletion = errors.New("the organization is scheduled for deletion")
)

// Session is a row of the sessions table.
type Session struct {
	ID, OrgID                  string
	CreatedBy, ConfigurationID *string
	SessionType, Status        string
	ClientType, SandboxMode    string
	SandboxProvider            string
	SandboxID, SandboxURL      *string
	SnapshotID                 *string
	CodingAgentSessionID       *string
	ModelID                    string
	SystemPrompt               *string
	InitialPrompt              *string
	InitialPromptSentAt        *time.Time
	Title                      string
	AutomationID, RunID        *string
	TriggerEventID             *string
	IdempotencyKey             *string
	StartedAt, LastActivityAt  time.Time
	PausedAt, EndedAt          *time.Time
	PauseReason, StopReason    *string
	Outcome, Summary           *string
	PRURLs                     []string
	ToolCalls                  int
	MessagesExchanged          int
	ActiveSeconds              int
	LatestTask                 *string
	CreatedAt, UpdatedAt       time.Time
	// SandboxExpiresAt is when the provider ends the current sandbox.
	SandboxExpiresAt *time.Time
	// AutoDeleteDays bounds how long the session's snapshots are kept.
	AutoDeleteDays int
	// IdleSnapshotFailures counts consecutive failed idle snapshots.
	IdleSnapshotFailures int
}

// Live reports whether the session counts against the concurrency limit
// (starting or running).
func (s Session) Live() bool { return s.Status == StatusStarting || s.Status == StatusRunning }

// Store reads and writes sessions.
type Store struct {
	Pool  *pgxpool.Pool
	Codec *schemas.Codec
	// MaxConcurrent is the per-organization limit of live (starting or
	// running) sessions; 0 means unlimited.
	MaxConcurrent int
	// ToolStaleAfter is how long an executing tool invocation may stay
	// unfinished before BeginTool lets a retry take it over (its executor
	// is presumed dead); 0 means DefaultToolStaleAfter.
	ToolStaleAfter time.Duration
	// Admit is the billing gate of session creation (billing.Gate): called
	// inside Create's transaction after the per-organization advisory
	// lock, so the live sessions it counts are exact and the plan's
	// concurrency limit is enforced atomically. Its refusal (a
	// *billing.Denial) is returned as is and nothing is inserted. nil
	// admits everything.
	Admit Admitter
}

// Admitter admits the creation of a session of orgID for op
// (billing.OpAutomationTrigger for automation sessions,
// billing.OpSessionStart otherwise) inside tx.
type Admitter interface {
	Admit(ctx context.Context, tx pgx.Tx, orgID string, op billing.Operation) error
}

// CreateInput describes a session to create. Empty SessionType, ClientType,
// SandboxMode and ModelID take the table defaults (coding, web, deferred, the
// default model).
type CreateInput struct {
	OrgID           string
	CreatedBy       *string
	ConfigurationID *string
	SessionType     string
	ClientType      string
	SandboxMode     string
	ModelID         string
	Title           string
	SystemPrompt    *string
	InitialPrompt   *string
	AutomationID    *string
	RunID           *string
	TriggerEventID  *string
	IdempotencyKey  *string
	ClientMetadata  map[string]any
}

// ListFilter narrows List; empty fields match everything.
type ListFilter struct {
	Status      string // stored status
	SessionType string
	CreatedBy   string
	// Origin is OriginAutomation (an automation's sessions) or
	// OriginManual (everything else).
	Origin string
	// IDs, when not nil, keeps only these sessions (an empty list keeps none).
	IDs []string
}

// Origins of ListFilter.Origin.
const (
	OriginAutomation = "automation"
	OriginManual     = "manual"
)

// Page is a list position: rows strictly after (At, ID) in (created_at DESC,
// id DESC) order; List returns at most Limit+1 rows (the caller trims the
// extra one to know there is a next page). Zero At means the first page.
type Page struct {
	Limit int
	At    time.Time
	ID    string
}

// Runtime is where a running session's agent lives.
type Runtime struct {
	Provider, SandboxID, SandboxURL, AgentSessionID string
	// ExpiresAt is the sandbox's end of life (zero = none).
	ExpiresAt time.Time
}

// Telemetry holds counter deltas since the previous flush.
type Telemetry struct {
	ToolCalls, Messages, ActiveSeconds int
	PRURLs                             []string
	LatestTask                         *string
}

// Invocation is a row of session_tool_invocations.
type Invocation struct {
	ID, SessionID, ToolCallID, ToolName, Status string
	Input, Output                               json.RawMessage
	Error                                       *string
	// OrgID and RunID of the session, for events.
	OrgID string
	RunID *string
	// StartedAt is when the invocation was first begun.
	StartedAt time.Time
}

// Tool invocation statuses.
const (
	ToolExecuting = "executing"
	ToolCompleted = "completed"
	ToolFailed    = "failed"
)
