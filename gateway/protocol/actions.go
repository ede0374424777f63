package protocol

import (
	"encoding/json"
	"time"
)

// Action invocation frames: the gateway tells a session's clients about
// every committed state change of its action invocations so people can
// approve or deny live.
const (
	// MsgActionApprovalRequest: an invocation is pending a person's approval.
	MsgActionApprovalRequest = "action_approval_request"
	// MsgActionCompleted: an invocation ran (status completed or failed).
	MsgActionCompleted = "action_completed"
	// MsgActionApprovalResult: a pending invocation was denied or expired.
	MsgActionApprovalResult = "action_approval_result"
)

// ActionInvocation is an action invocation as the session's clients see
// it: the JSON of the actions API's invocation (a test in the gateway
// checks the two stay field for field the same).
type ActionInvocation struct {
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
	// session; nil for the agent.
	InvokedBy *string `json:"invoked_by,omitempty"`
	// DefinitionHash is the hash of the connector tool's definition the
	// invocation was made against; ReviewedHash the one an admin reviewed;
	// DefinitionDiff, on a drifted invocation, what changed between the
	// two. Connector tools only.
	DefinitionHash *string               `json:"definition_hash,omitempty"`
	ReviewedHash   *string               `json:"reviewed_hash,omitempty"`
	DefinitionDiff *ActionDefinitionDiff `json:"definition_diff,omitempty"`
}

// ActionDefinitionDiff is what changed in a connector tool's definition
// since an admin reviewed it.
type ActionDefinitionDiff struct {
	// ReviewedKnown is false when the reviewed definition was never
	// recorded (only its hash is known): Changes then list the current
	// definition as added.
	ReviewedKnown bool                     `json:"reviewed_known"`
	Changes       []ActionDefinitionChange `json:"changes"`
	// Removed is true when the server no longer lists the tool.
	Removed bool `json:"removed,omitempty"`
	// Omitted counts the changes left out.
	Omitted int `json:"omitted,omitempty"`
}

// ActionDefinitionChange is one member added, removed or changed.
type ActionDefinitionChange struct {
	Path   string          `json:"path"`
	Change string          `json:"change"` // added | removed | changed
	Old    json.RawMessage `json:"old,omitempty"`
	New    json.RawMessage `json:"new,omitempty"`
	// Cut is true when Old or New was too long and is shown shortened.
	Cut bool `json:"cut,omitempty"`
}

// ActionApprovalRequestMessage announces a pending invocation.
type ActionApprovalRequestMessage struct {
	Type       string           `json:"type"`
	Invocation ActionInvocation `json:"invocation"`
}

// ActionCompletedMessage reports an executed invocation; Status is
// completed or failed.
type ActionCompletedMessage struct {
	Type       string           `json:"type"`
	Invocation ActionInvocation `json:"invocation"`
	Status     string           `json:"status"`
}

// ActionApprovalResultMessage reports a pending invocation resolved
// without running: Status is denied or expired.
type ActionApprovalResultMessage struct {
	Type       string           `json:"type"`
	Invocation ActionInvocation `json:"invocation"`
	Status     string           `json:"status"`
}
