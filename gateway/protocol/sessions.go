package protocol

import (
	"encoding/json"
	"time"
)

// SessionInfo describes the session in init.
type SessionInfo struct {
	ID             string     `json:"id"`
	OrgID          string     `json:"org_id"`
	Title          string     `json:"title"`
	Status         string     `json:"status"`
	SessionType    string     `json:"session_type"`
	ClientType     string     `json:"client_type"`
	ModelID        string     `json:"model_id"`
	CreatedBy      *string    `json:"created_by,omitempty"`
	SandboxID      *string    `json:"sandbox_id,omitempty"`
	AutomationID   *string    `json:"automation_id,omitempty"`
	RunID          *string    `json:"run_id,omitempty"`
	LatestTask     *string    `json:"latest_task,omitempty"`
	PRURLs         []string   `json:"pr_urls"`
	StartedAt      time.Time  `json:"started_at"`
	LastActivityAt time.Time  `json:"last_activity_at"`
	EndedAt        *time.Time `json:"ended_at,omitempty"`
}

// CreateSessionRequest is the body of POST /proliferate/sessions. The
// creator is always the authenticated caller; OrgID is read only from
// service credentials (a person's session goes to their active organization).
// AutomationID, RunID and TriggerEventID are accepted from services only.
type CreateSessionRequest struct {
	OrgID           string         `json:"org_id,omitempty"`
	ConfigurationID *string        `json:"configuration_id,omitempty"`
	SessionType     string         `json:"session_type,omitempty"` // setup | coding | automation (default coding)
	ClientType      string         `json:"client_type,omitempty"`  // web | api | slack | cli | automation (default api)
	SandboxMode     string         `json:"sandbox_mode,omitempty"` // deferred | immediate (default deferred)
	ModelID         string         `json:"model_id,omitempty"`
	Title           string         `json:"title,omitempty"`
	InitialPrompt   *string        `json:"initial_prompt,omitempty"`
	AutomationID    *string        `json:"automation_id,omitempty"`
	RunID           *string        `json:"run_id,omitempty"`
	TriggerEventID  *string        `json:"trigger_event_id,omitempty"`
	ClientMetadata  map[string]any `json:"client_metadata,omitempty"`
	// IdempotencyKey may also be sent as the Idempotency-Key header (the
	// header wins when both are present).
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// Session is the gateway's view of a session (GET /proliferate/{id} and
// the answer of create and pause).
type Session struct {
	ID                string     `json:"id"`
	OrgID             string     `json:"org_id"`
	CreatedBy         *string    `json:"created_by"`
	ConfigurationID   *string    `json:"configuration_id"`
	SessionType       string     `json:"session_type"`
	ClientType        string     `json:"client_type"`
	SandboxMode       string     `json:"sandbox_mode"`
	Status            string     `json:"status"`
	DisplayStatus     string     `json:"display_status"`
	Title             string     `json:"title"`
	ModelID           string     `json:"model_id"`
	AutomationID      *string    `json:"automation_id"`
	RunID             *string    `json:"run_id"`
	SandboxProvider   string     `json:"sandbox_provider"`
	SandboxID         *string    `json:"sandbox_id"`
	SnapshotID        *string    `json:"snapshot_id"`
	Outcome           *string    `json:"outcome"`
	Summary           *string    `json:"summary"`
	PauseReason       *string    `json:"pause_reason"`
	StopReason        *string    `json:"stop_reason"`
	PRURLs            []string   `json:"pr_urls"`
	ToolCalls         int        `json:"tool_calls"`
	MessagesExchanged int        `json:"messages_exchanged"`
	ActiveSeconds     int        `json:"active_seconds"`
	LatestTask        *string    `json:"latest_task"`
	StartedAt         time.Time  `json:"started_at"`
	LastActivityAt    time.Time  `json:"last_activity_at"`
	PausedAt          *time.Time `json:"paused_at"`
	EndedAt           *time.Time `json:"ended_at"`
	CreatedAt         time.Time  `json:"created_at"`
	// Created is false when an idempotency key returned an existing session.
	Created bool `json:"created"`
}

// RuntimeStatus is a point-in-time view of a session's hub on the gateway
// instance that answers.
type RuntimeStatus struct {
	SessionID    string `json:"session_id"`
	Status       string `json:"status"`        // DB session status
	Agent        string `json:"agent"`         // idle | busy | unknown
	RuntimeReady bool   `json:"runtime_ready"` // sandbox + OpenCode + SSE up
	Clients      int    `json:"clients"`
	Owner        bool   `json:"owner"` // this instance holds the owner lease
	SandboxID    string `json:"sandbox_id,omitempty"`
	// EnvRequests are the tool call ids of the agent's pending
	// request_env_variables calls (the agent waits for a person).
	EnvRequests []string `json:"env_requests,omitempty"`
}

// SessionStatus is GET /proliferate/{id}/status: the stored status plus
// what this gateway knows about the runtime.
type SessionStatus struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
	DisplayStatus string `json:"display_status"`
	// SandboxAlive is true while a runtime lease is held for the session
	// (the owning hub heartbeats it).
	SandboxAlive bool `json:"sandbox_alive"`
	// Runtime is this instance's hub's view, when it has one.
	Runtime *RuntimeStatus `json:"runtime,omitempty"`
}

// MessageRequest is the body of POST /proliferate/{id}/message.
type MessageRequest struct {
	Content string `json:"content"`
}

// MessageResponse says whether the prompt was sent now (false: an earlier
// request with the same Idempotency-Key already sent it).
type MessageResponse struct {
	Sent bool `json:"sent"`
}

// PauseRequest is the optional body of POST /proliferate/{id}/pause.
type PauseRequest struct {
	// Reason: credit_limit, payment_failed or overage_cap (services only;
	// a person's pause is manual).
	Reason string `json:"reason,omitempty"`
}

// SnapshotResponse is the answer of POST /proliferate/{id}/snapshot.
type SnapshotResponse struct {
	SnapshotID string `json:"snapshot_id"`
}

// ToolCallRequest is the body of POST /proliferate/{id}/tools/{tool}.
type ToolCallRequest struct {
	ToolCallID string          `json:"tool_call_id"`
	Args       json.RawMessage `json:"args"`
}

// ToolResult is the answer of a tool callback.
type ToolResult struct {
	Success bool           `json:"success"`
	Result  string         `json:"result"`
	Data    map[string]any `json:"data,omitempty"`
}

// BuildDispatch is the answer of POST /configuration-builds/{id}/run.
type BuildDispatch struct {
	// Claimed is false when the build was already claimed (by an earlier
	// request or a gateway's periodic pass) or has ended.
	Claimed bool `json:"claimed"`
}
