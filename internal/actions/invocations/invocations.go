// Package invocations is the action invocation lifecycle: an agent's request to run an action is validated, given a
// mode by the cascade, and then executed (allow), denied (deny) or held
// for a person's approval (require_approval); approvals and denials
// resolve pending invocations; pending ones expire. Every state change is
// written to action_invocations and, in the same transaction, to
// actions.invocations through the outbox.
//
// This file is the contract shared by the service (service.go), the
// gateway routes (gateway/actions.go), the REST API (api/actions) and the
// catalog that builds a session's sources (internal/actions/catalog).
package invocations

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/sessions"
)

// Statuses of an invocation.
const (
	StatusPending   = "pending"
	StatusApproved  = "approved"
	StatusExecuting = "executing"
	StatusCompleted = "completed"
	StatusDenied    = "denied"
	StatusFailed    = "failed"
	StatusExpired   = "expired"
)

// Limits.
const (
	// MaxPendingPerSession pending invocations at once per session (429).
	MaxPendingPerSession = 10
	// RatePerMinute invocations per session in any 60-second window
	// (RateWindow; a sliding window, not per clock minute), counted in
	// Redis so it holds across gateway instances (429).
	RatePerMinute = 60
	// InteractiveTTL is how long a pending invocation of an interactive
	// session waits for a person; UnattendedTTL for an automation run.
	// They are the defaults of Deps.PendingTTL and Deps.UnattendedPendingTTL.
	InteractiveTTL = 5 * time.Minute
	UnattendedTTL  = 24 * time.Hour
)

// Invocation is a row of action_invocations.
type Invocation struct {
	ID            string          `json:"id"`
	OrgID         string          `json:"org_id"`
	SessionID     string          `json:"session_id"`
	SessionTitle  string          `json:"session_title,omitempty"` // lists only
	IntegrationID *string         `json:"integration_id,omitempty"`
	Integration   string          `json:"integration"` // source id: linear, sentry, slack, connector:<uuid>
	Action        string          `json:"action"`
	RiskLevel     string          `json:"risk_level"`
	Mode          string          `json:"mode"`
	ModeSource    string          `json:"mode_source"`
	Drifted       bool            `json:"drifted,omitempty"`
	Params        json.RawMessage `json:"params"` // redacted
	Status        string          `json:"status"`
	Result        json.RawMessage `json:"result,omitempty"` // redacted, ≤ 10 KB
	Error         *string         `json:"error,omitempty"`
	DeniedReason  *string         `json:"denied_reason,omitempty"` // policy | human | expired | unknown_mode:<v>
	DurationMs    *int64          `json:"duration_ms,omitempty"`
	ApprovedBy    *string         `json:"approved_by,omitempty"`
	ApprovedAt    *time.Time      `json:"approved_at,omitempty"`
	CompletedAt   *time.Time      `json:"completed_at,omitempty"`
	ExpiresAt     *time.Time      `json:"expires_at,omitempty"`
	AutomationID  *string         `json:"automation_id,omitempty"`
	RunID         *string         `json:"run_id,omitempty"`
	CreatedAt     time.Time       `json:"created_at"`

	// InvokedBy is the person who invoked it from a terminal of the
	// session (the gateway's terminal credential); nil for the agent.
	InvokedBy *string `json:"invoked_by,omitempty"`

	// DefinitionHash is the hash of the connector tool's definition the
	// invocation was made against (an approval must be for it);
	// ReviewedHash the one an admin reviewed; DefinitionDiff, on a drifted
	// invocation, what changed between the two. Connector tools only.
	DefinitionHash *string                 `json:"definition_hash,omitempty"`
	ReviewedHash   *string                 `json:"reviewed_hash,omitempty"`
	DefinitionDiff *actions.DefinitionDiff `json:"definition_diff,omitempty"`
}

// Terminal reports whether the invocation can change no more.
func (i Invocation) Terminal() bool {
	switch i.Status {
	case StatusCompleted, StatusDenied, StatusFailed, StatusExpired:
		return true
	}
	return false
}

// InvokeInput is an agent's request.
type InvokeInput struct {
	Integration string          `json:"integration"`
	Action      string          `json:"action"`
	Params      json.RawMessage `json:"params"`
	// InvokedBy is the person invoking from their terminal in the
	// session ("" for the agent); set by the gateway, never read from a
	// request body.
	InvokedBy string `json:"-"`
}

// Outcome of Invoke and Approve: the stored invocation and, when it ran,
// its result. HTTP mapping (gateway): invoke completed → 200, pending →
// 202, denied → 403, failed → 502; approve completed or failed → 200 (the
// approval succeeded; the failure is recorded on the invocation).
type Outcome struct {
	Invocation Invocation
	Result     json.RawMessage
}

// Errors (each maps to one HTTP status in the gateway and the API).
var (
	// ErrNotFound: no such invocation (or another org's / session's): 404.
	ErrNotFound = errors.New("invocations: not found")
	// ErrUnknownIntegration / ErrUnknownAction: the session has no such
	// source or the source no such action: 404.
	ErrUnknownIntegration = errors.New("invocations: integration not available to this session")
	ErrUnknownAction      = errors.New("invocations: unknown action")
	// ErrSourceUnavailable: the integration or connector could not list
	// its actions or give its guide (its server failed or is unreachable):
	// 502.
	ErrSourceUnavailable = errors.New("invocations: the integration could not be reached")
	// ErrPendingLimit: MaxPendingPerSession reached: 429.
	ErrPendingLimit = errors.New("invocations: too many pending invocations")
	// ErrRateLimited: RatePerMinute exceeded: 429 (the error is a
	// *RateLimitError saying when to retry).
	ErrRateLimited = errors.New("invocations: rate limit exceeded")
	// ErrConflict: the invocation was already decided (approved,
	// denied, executed): 409.
	ErrConflict = errors.New("invocations: invocation is not pending")
	// ErrExpired: an approval or denial after the invocation's expiry,
	// whether or not the sweeper has marked it expired yet: 410.
	ErrExpired = errors.New("invocations: invocation expired")
	// ErrForbidden: the approver is not an admin or owner of the org: 403.
	ErrForbidden = errors.New("invocations: only org admins and owners can approve or deny")
)

// Parameter validation failures are *actions.ParamsError (422
// validation_failed, one detail per failing value).

// Approver is the person approving or denying.
type Approver struct {
	UserID string
	OrgID  string
	Role   string // owner | admin | member
}

// ApproveMode: once approves this invocation; always also sets the mode of
// this integration:action to allow at the automation scope (automation
// sessions) or the org scope.
const (
	ApproveOnce   = "once"
	ApproveAlways = "always"
)

// Sources builds the action sources available to a session and the
// credential to execute each with (resolved at call time, never handed to
// the sandbox). Implemented by internal/actions/catalog.
type Sources interface {
	// List returns the session's sources (provider integrations bound to
	// the session or its org, enabled MCP connectors of the org). A source
	// that cannot be reached is left out, not an error.
	List(ctx context.Context, sess sessions.Session) ([]Available, error)
	// Get returns one source by id with its execution context.
	// ErrUnknownIntegration when the session has no such source.
	Get(ctx context.Context, sess sessions.Session, sourceID string) (actions.Source, actions.ExecContext, *string /*integration id*/, error)
	// Drifted checks a connector tool against its review (review.go):
	// whether its definition changed since it was reviewed, against the
	// server's current definition; the zero Drift for providers.
	Drifted(ctx context.Context, sess sessions.Session, sourceID string, def actions.Definition) (Drift, error)
	// CurrentDefinition fetches a connector tool's definition from its
	// server now (never from a cache); ok is false when the server no
	// longer lists it. An approval checks it against the invocation's.
	CurrentDefinition(ctx context.Context, sess sessions.Session, sourceID, actionID string) (def actions.Definition, ok bool, err error)
}

// Available is one source with its actions, as the agent lists them.
type Available struct {
	Integration string               `json:"integration"`
	DisplayName string               `json:"display_name"`
	Actions     []actions.Definition `json:"actions"`
}

// Service is the invocation lifecycle (service.go implements it).
type Service interface {
	// Available lists the session's sources and actions.
	Available(ctx context.Context, sess sessions.Session) ([]Available, error)
	// Guide returns an integration's guide for the session.
	Guide(ctx context.Context, sess sessions.Session, integration string) (string, error)
	// Invoke validates, resolves the mode, persists and executes or holds
	// the invocation. Rate limit and pending cap apply.
	Invoke(ctx context.Context, sess sessions.Session, in InvokeInput) (Outcome, error)
	// Get returns an invocation of the session.
	Get(ctx context.Context, sessionID, invocationID string) (Invocation, error)
	// ListSession returns the session's invocations, newest first.
	ListSession(ctx context.Context, sessionID string, limit int) ([]Invocation, error)
	// ListOrg is the org inbox: status filter (empty = all), keyset page.
	ListOrg(ctx context.Context, orgID, status, cursor string, limit int) (items []Invocation, next string, err error)
	// Approve approves a pending invocation (ErrConflict a second time,
	// ErrExpired after expiry, ErrForbidden for members,
	// *DefinitionChangedError when a connector tool is no longer the
	// definition the invocation was made against) and executes it.
	Approve(ctx context.Context, a Approver, invocationID string, ap Approval) (Outcome, error)
	// Deny denies a pending invocation.
	Deny(ctx context.Context, a Approver, invocationID string) (Invocation, error)
	// ExpirePending expires overdue pending invocations (safe to run on
	// every replica: each row is expired by exactly one statement).
	ExpirePending(ctx context.Context) (int, error)
}

// Notifier hears every state change after it is committed (the gateway
// broadcasts action_approval_request / action_completed /
// action_approval_result to the session's WebSocket clients).
type Notifier interface {
	InvocationChanged(ctx context.Context, inv Invocation)
}

// RunHooks moves an automation run when one of its session's invocations
// waits for a person (running → needs_human) and back when it is resolved
// (needs_human → running), inside the invocation's transaction.
type RunHooks interface {
	AwaitingApproval(ctx context.Context, tx pgx.Tx, inv Invocation) error
	ApprovalResolved(ctx context.Context, tx pgx.Tx, inv Invocation) error
}
