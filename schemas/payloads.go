package schemas

import "time"

// The payload structs mirror the newest version of each schema, one Go field
// per Avro field (matched by the avro tag). Mapping: nullable union ["null", T]
// ↔ *T, array ↔ slice, map ↔ map[string]T, bytes ↔ []byte, enum ↔ string,
// int ↔ int32, long ↔ int64, timestamp-millis ↔ time.Time, record ↔ struct.
// Field docs live in the .avsc files, which analytics teams read too.

// builtinPayloads lists one (nil) value of every payload type; NewCodec binds
// each to the schema files of its event type.
func builtinPayloads() []Payload {
	return []Payload{
		(*WebhookReceived)(nil),
		(*TriggerEvent)(nil),
		(*RunLifecycle)(nil),
		(*SessionEvent)(nil),
		(*ToolCall)(nil),
		(*SessionTranscript)(nil),
		(*ActionInvocation)(nil),
		(*AuditEvent)(nil),
		(*LLMSpend)(nil),
		(*BillingUsage)(nil),
		(*BillingState)(nil),
	}
}

// WebhookReceived is a raw inbound webhook after signature verification
// (topic webhooks.raw).
type WebhookReceived struct {
	Provider          string            `avro:"provider"`
	Route             string            `avro:"route"`
	Method            string            `avro:"method"`
	RequestPath       string            `avro:"request_path"`
	IntegrationID     *string           `avro:"integration_id"`
	ConnectionID      *string           `avro:"connection_id"`
	TriggerID         *string           `avro:"trigger_id"`
	WebhookPath       *string           `avro:"webhook_path"`
	DeliveryID        *string           `avro:"delivery_id"`
	ProviderEventType *string           `avro:"provider_event_type"`
	ContentType       string            `avro:"content_type"`
	Headers           map[string]string `avro:"headers"`
	Body              []byte            `avro:"body"`
	// BodyRef (schema v2) is set, and Body empty, when the body was too
	// large to travel inline and was stored in the blob store.
	BodyRef           *WebhookBodyRef `avro:"body_ref"`
	SignatureVerified bool            `avro:"signature_verified"`
	ReceivedAt        time.Time       `avro:"received_at"`
	RemoteAddr        *string         `avro:"remote_addr"`
}

// WebhookBodyRef is a claim check for a webhook body kept in the blob store.
type WebhookBodyRef struct {
	// Ref is the blob store reference (blobstore.Store.Get takes it).
	Ref string `avro:"ref"`
	// SHA256 is the lower-case hex SHA-256 of the body.
	SHA256 string `avro:"sha256"`
	Size   int64  `avro:"size"`
}

// EventType implements Payload.
func (*WebhookReceived) EventType() string { return TypeWebhookReceived }

// Webhook routes (WebhookReceived.Route).
const (
	WebhookRouteNango   = "nango"
	WebhookRouteDirect  = "direct"
	WebhookRouteTrigger = "trigger"
)

// TriggerEvent is a normalized provider event evaluated against one trigger
// (topic triggers.events).
type TriggerEvent struct {
	TriggerEventID      string    `avro:"trigger_event_id"`
	TriggerID           string    `avro:"trigger_id"`
	AutomationID        string    `avro:"automation_id"`
	IntegrationID       *string   `avro:"integration_id"`
	TriggerType         string    `avro:"trigger_type"`
	Provider            string    `avro:"provider"`
	NormalizedEventType string    `avro:"normalized_event_type"`
	ProviderEventType   string    `avro:"provider_event_type"`
	ProviderOccurredAt  time.Time `avro:"provider_occurred_at"`
	DedupKey            string    `avro:"dedup_key"`
	Title               string    `avro:"title"`
	URL                 *string   `avro:"url"`
	ExternalID          *string   `avro:"external_id"`
	// Context is a JSON object, as text.
	Context        string  `avro:"context"`
	Status         string  `avro:"status"`
	SkipReason     *string `avro:"skip_reason"`
	Error          *string `avro:"error"`
	RunID          *string `avro:"run_id"`
	WebhookEventID *string `avro:"webhook_event_id"`
	PollGroupID    *string `avro:"poll_group_id"`
}

// EventType implements Payload.
func (*TriggerEvent) EventType() string { return TypeTriggerEvent }

// TriggerEvent.Status symbols.
const (
	TriggerEventMatched = "matched"
	TriggerEventSkipped = "skipped"
	TriggerEventFailed  = "failed"
)

// RunLifecycle is one status transition of an automation run (topic
// runs.lifecycle).
type RunLifecycle struct {
	RunID          string     `avro:"run_id"`
	AutomationID   string     `avro:"automation_id"`
	TriggerEventID string     `avro:"trigger_event_id"`
	TriggerID      *string    `avro:"trigger_id"`
	FromStatus     *string    `avro:"from_status"`
	ToStatus       string     `avro:"to_status"`
	Attempt        int32      `avro:"attempt"`
	StatusReason   *string    `avro:"status_reason"`
	FailureStage   *string    `avro:"failure_stage"`
	SessionID      *string    `avro:"session_id"`
	CompletionID   *string    `avro:"completion_id"`
	Outcome        *string    `avro:"outcome"`
	Summary        *string    `avro:"summary"`
	ErrorCode      *string    `avro:"error_code"`
	ErrorMessage   *string    `avro:"error_message"`
	DeadlineAt     *time.Time `avro:"deadline_at"`
}

// EventType implements Payload.
func (*RunLifecycle) EventType() string { return TypeRunLifecycle }

// Run statuses (RunStatus enum symbols).
const (
	RunQueued     = "queued"
	RunEnriching  = "enriching"
	RunReady      = "ready"
	RunRunning    = "running"
	RunSucceeded  = "succeeded"
	RunFailed     = "failed"
	RunNeedsHuman = "needs_human"
	RunTimedOut   = "timed_out"
	// RunCanceled (schema v2): a person skipped the run before it started.
	RunCanceled = "canceled"
)

// SessionEvent is a session lifecycle change, user message or telemetry
// flush (topic sessions.events).
type SessionEvent struct {
	SessionID       string            `avro:"session_id"`
	Kind            string            `avro:"kind"`
	Status          *string           `avro:"status"`
	SessionType     *string           `avro:"session_type"`
	ClientType      *string           `avro:"client_type"`
	Origin          *string           `avro:"origin"`
	PauseReason     *string           `avro:"pause_reason"`
	StopReason      *string           `avro:"stop_reason"`
	Outcome         *string           `avro:"outcome"`
	AutomationID    *string           `avro:"automation_id"`
	RunID           *string           `avro:"run_id"`
	RepoID          *string           `avro:"repo_id"`
	ConfigurationID *string           `avro:"configuration_id"`
	SandboxProvider *string           `avro:"sandbox_provider"`
	SandboxID       *string           `avro:"sandbox_id"`
	SnapshotID      *string           `avro:"snapshot_id"`
	UserID          *string           `avro:"user_id"`
	Title           *string           `avro:"title"`
	Telemetry       *SessionTelemetry `avro:"telemetry"`
	// Limit (schema v2) is set when Kind is SessionKindLimitExceeded.
	Limit *SandboxLimit `avro:"limit"`
}

// SandboxLimit is a resource limit a session's sandbox hit.
type SandboxLimit struct {
	Kind       string `avro:"kind"`
	Detail     string `avro:"detail"`
	AgentAlive bool   `avro:"agent_alive"`
}

// SessionTelemetry holds telemetry deltas since the previous flush.
type SessionTelemetry struct {
	ToolCalls         int64    `avro:"tool_calls"`
	MessagesExchanged int64    `avro:"messages_exchanged"`
	ActiveSeconds     int64    `avro:"active_seconds"`
	PRURLs            []string `avro:"pr_urls"`
	LatestTask        *string  `avro:"latest_task"`
}

// EventType implements Payload.
func (*SessionEvent) EventType() string { return TypeSessionEvent }

// Session event kinds (SessionEventKind enum symbols).
const (
	SessionKindCreated     = "created"
	SessionKindRunning     = "running"
	SessionKindPaused      = "paused"
	SessionKindStopped     = "stopped"
	SessionKindFailed      = "failed"
	SessionKindDeleted     = "deleted"
	SessionKindMigrated    = "migrated"
	SessionKindTelemetry   = "telemetry"
	SessionKindUserMessage = "user_message"
	// SessionKindLimitExceeded (schema v2): the sandbox hit a resource
	// limit (SessionEvent.Limit).
	SessionKindLimitExceeded = "limit_exceeded"
)

// Session statuses (SessionStatus enum symbols).
const (
	SessionStatusStarting = "starting"
	SessionStatusRunning  = "running"
	SessionStatusPaused   = "paused"
	SessionStatusStopped  = "stopped"
	SessionStatusFailed   = "failed"
)

// ToolCall is telemetry for one state of one agent tool call (topic
// tools.calls).
type ToolCall struct {
	SessionID  string     `avro:"session_id"`
	ToolCallID string     `avro:"tool_call_id"`
	ToolName   string     `avro:"tool_name"`
	Status     string     `avro:"status"`
	ExecutedBy string     `avro:"executed_by"`
	Title      *string    `avro:"title"`
	StartedAt  *time.Time `avro:"started_at"`
	DurationMs *int64     `avro:"duration_ms"`
	Error      *string    `avro:"error"`
	Cached     bool       `avro:"cached"`
	RunID      *string    `avro:"run_id"`
}

// EventType implements Payload.
func (*ToolCall) EventType() string { return TypeToolCall }

// Tool call statuses (ToolCallStatus enum symbols).
const (
	ToolCallStarted   = "started"
	ToolCallCompleted = "completed"
	ToolCallFailed    = "failed"
	ToolCallCancelled = "cancelled"
)

// ActionInvocation is the state of an action invocation after a change
// (topic actions.invocations).
type ActionInvocation struct {
	InvocationID   string     `avro:"invocation_id"`
	SessionID      string     `avro:"session_id"`
	Integration    string     `avro:"integration"`
	IntegrationID  *string    `avro:"integration_id"`
	Action         string     `avro:"action"`
	RiskLevel      string     `avro:"risk_level"`
	Mode           string     `avro:"mode"`
	ModeSource     *string    `avro:"mode_source"`
	Status         string     `avro:"status"`
	PreviousStatus *string    `avro:"previous_status"`
	ParamsJSON     *string    `avro:"params_json"`
	ResultJSON     *string    `avro:"result_json"`
	Error          *string    `avro:"error"`
	DeniedReason   *string    `avro:"denied_reason"`
	ApprovedBy     *string    `avro:"approved_by"`
	ApprovedAt     *time.Time `avro:"approved_at"`
	ExpiresAt      *time.Time `avro:"expires_at"`
	CompletedAt    *time.Time `avro:"completed_at"`
	DurationMs     *int64     `avro:"duration_ms"`
	AutomationID   *string    `avro:"automation_id"`
	RunID          *string    `avro:"run_id"`
	// v2: the review of an MCP connector tool.
	Drifted            bool    `avro:"drifted"`
	DefinitionHash     *string `avro:"definition_hash"`
	ReviewedHash       *string `avro:"reviewed_hash"`
	DefinitionDiffJSON *string `avro:"definition_diff_json"`
}

// EventType implements Payload.
func (*ActionInvocation) EventType() string { return TypeActionInvocation }

// Action risk levels (RiskLevel enum symbols).
const (
	RiskRead   = "read"
	RiskWrite  = "write"
	RiskDanger = "danger"
)

// Action modes (ActionMode enum symbols).
const (
	ModeAllow           = "allow"
	ModeDeny            = "deny"
	ModeRequireApproval = "require_approval"
)

// Action invocation statuses (ActionStatus enum symbols).
const (
	ActionPending   = "pending"
	ActionApproved  = "approved"
	ActionExecuting = "executing"
	ActionCompleted = "completed"
	ActionDenied    = "denied"
	ActionFailed    = "failed"
	ActionExpired   = "expired"
)

// LLMSpend is the usage and cost of one LLM request (topic llm.spend).
// Money is int64 micro-dollars: exact, and readable by any Avro library
// (goavro's decimal logical type is not spec-compliant by default).
type LLMSpend struct {
	RequestID        string    `avro:"request_id"`
	SessionID        *string   `avro:"session_id"`
	Model            string    `avro:"model"`
	ModelGroup       *string   `avro:"model_group"`
	Provider         *string   `avro:"provider"`
	InputTokens      int64     `avro:"input_tokens"`
	OutputTokens     int64     `avro:"output_tokens"`
	CacheReadTokens  int64     `avro:"cache_read_tokens"`
	CacheWriteTokens int64     `avro:"cache_write_tokens"`
	TotalTokens      int64     `avro:"total_tokens"`
	CostUSDMicros    int64     `avro:"cost_usd_micros"`
	StartedAt        time.Time `avro:"started_at"`
	EndedAt          time.Time `avro:"ended_at"`
	Source           string    `avro:"source"`
}

// EventType implements Payload.
func (*LLMSpend) EventType() string { return TypeLLMSpend }

// BillingUsage is one idempotent billable usage record (topic
// billing.usage). Quantities and credits are millionths, like the
// NUMERIC(12,6) ledger columns.
type BillingUsage struct {
	IdempotencyKey string    `avro:"idempotency_key"`
	Kind           string    `avro:"kind"`
	QuantityMicros int64     `avro:"quantity_micros"`
	Unit           string    `avro:"unit"`
	CreditsMicros  int64     `avro:"credits_micros"`
	SessionID      *string   `avro:"session_id"`
	PeriodFrom     time.Time `avro:"period_from"`
	PeriodTo       time.Time `avro:"period_to"`
	Final          bool      `avro:"final"`
	RequestID      *string   `avro:"request_id"`
	Model          *string   `avro:"model"`
	SourceEventID  *string   `avro:"source_event_id"`
}

// EventType implements Payload.
func (*BillingUsage) EventType() string { return TypeBillingUsage }

// Billing usage kinds (BillingUsageKind enum symbols) and their units.
const (
	UsageCompute = "compute"
	UsageLLM     = "llm"

	UnitMinute = "minute"
	UnitUSD    = "usd"
)

// BillingState is an organization's billing state transition (topic
// billing.state).
type BillingState struct {
	FromState            string     `avro:"from_state"`
	ToState              string     `avro:"to_state"`
	Reason               string     `avro:"reason"`
	BalanceCreditsMicros int64      `avro:"balance_credits_micros"`
	GraceExpiresAt       *time.Time `avro:"grace_expires_at"`
	Plan                 *string    `avro:"plan"`
	Enforcement          *string    `avro:"enforcement"`
	PerformedBy          *string    `avro:"performed_by"`
}

// EventType implements Payload.
func (*BillingState) EventType() string { return TypeBillingState }

// Organization billing states (OrgBillingState enum symbols).
const (
	StateUnconfigured = "unconfigured"
	StateTrial        = "trial"
	StateActive       = "active"
	StateGrace        = "grace"
	StateExhausted    = "exhausted"
	StateSuspended    = "suspended"
)

// EnumUnknown is the fallback symbol of every enum (its Avro default): a
// reader gets it for a symbol added by a newer writer. Producers never
// write it.
const EnumUnknown = "unknown"
