package client

import (
	"encoding/json"
	"fmt"
	"time"
)

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

// Session is the gateway's view of a session (GET /proliferate/:id and the
// answer of create).
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

// Status is GET /proliferate/:id/status: the stored status plus what this
// gateway knows about the runtime.
type Status struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
	DisplayStatus string `json:"display_status"`
	// SandboxAlive is true while a runtime lease is held for the session
	// (the owning hub heartbeats it).
	SandboxAlive bool `json:"sandbox_alive"`
	// Runtime is the runtime lease holder's view, when known.
	Runtime json.RawMessage `json:"runtime,omitempty"`
}

// MessageRequest is the body of POST /proliferate/:id/message.
type MessageRequest struct {
	Content string `json:"content"`
}

// MessageResponse says whether the prompt was sent now (false: an earlier
// request with the same Idempotency-Key already sent it).
type MessageResponse struct {
	Sent bool `json:"sent"`
}

// ToolCallRequest is the body of POST /proliferate/:id/tools/:tool.
type ToolCallRequest struct {
	ToolCallID string          `json:"tool_call_id"`
	Args       json.RawMessage `json:"args"`
}

// ToolResult is the answer of a tool callback (agent contract §4).
type ToolResult struct {
	Success bool           `json:"success"`
	Result  string         `json:"result"`
	Data    map[string]any `json:"data,omitempty"`
}

// Error is a non-2xx answer of the gateway, decoded from the API's error
// shape {"error": {"code", "message", "details", "request_id"}}.
type Error struct {
	Status    int             `json:"-"`
	Code      string          `json:"code"`
	Message   string          `json:"message"`
	Details   json.RawMessage `json:"details,omitempty"`
	RequestID string          `json:"request_id"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("gateway: %d %s: %s", e.Status, e.Code, e.Message)
}

// Permanent reports whether retrying the same request cannot succeed
// (4xx other than 408 and 429).
func (e *Error) Permanent() bool {
	return e.Status >= 400 && e.Status < 500 && e.Status != 408 && e.Status != 429
}

// SnapshotResponse is the answer of POST /proliferate/:id/snapshot.
type SnapshotResponse struct {
	SnapshotID string `json:"snapshot_id"`
}
