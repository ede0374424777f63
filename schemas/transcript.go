package schemas

// SessionTranscript is one entry of a session's conversation (topic
// sessions.transcript): a user prompt, the final text of an agent message
// part, a finished tool call, a status change or an error.
type SessionTranscript struct {
	SessionID string              `avro:"session_id"`
	Kind      string              `avro:"kind"`
	MessageID *string             `avro:"message_id"`
	PartID    *string             `avro:"part_id"`
	Role      *string             `avro:"role"`
	UserID    *string             `avro:"user_id"`
	Text      *string             `avro:"text"`
	Tool      *TranscriptToolCall `avro:"tool"`
	Status    *string             `avro:"status"`
	Code      *string             `avro:"code"`
	Truncated bool                `avro:"truncated"`
}

// TranscriptToolCall is a finished tool call of a transcript.
type TranscriptToolCall struct {
	ToolCallID string  `avro:"tool_call_id"`
	Name       string  `avro:"name"`
	Status     string  `avro:"status"`
	Title      *string `avro:"title"`
	InputJSON  string  `avro:"input_json"`
	Output     string  `avro:"output"`
	Error      *string `avro:"error"`
	DurationMs int64   `avro:"duration_ms"`
	Truncated  bool    `avro:"truncated"`
}

// EventType implements Payload.
func (*SessionTranscript) EventType() string { return TypeSessionTranscript }

// Transcript entry kinds (SessionTranscriptKind enum symbols).
const (
	TranscriptUserMessage  = "user_message"
	TranscriptAgentMessage = "agent_message"
	TranscriptToolCallKind = "tool_call"
	TranscriptStatus       = "status"
	TranscriptError        = "error"
)
