package protocol

import "encoding/json"

// Every frame of a session stream is one JSON object with a "type" field.
// Server → client structs carry it in their Type field: set it to the
// matching Msg* constant.

// Server → client frame types.
const (
	MsgInit             = "init"
	MsgStatus           = "status"
	MsgMessage          = "message"
	MsgToken            = "token"
	MsgTextPartComplete = "text_part_complete"
	MsgToolStart        = "tool_start"
	MsgToolMetadata     = "tool_metadata"
	MsgToolEnd          = "tool_end"
	MsgMessageComplete  = "message_complete"
	MsgMessageCancelled = "message_cancelled"
	MsgError            = "error"
	MsgSnapshotResult   = "snapshot_result"
	MsgEnvRequest       = "env_request"
	MsgPong             = "pong"
	MsgGitStatus        = "git_status"
	MsgGitResult        = "git_result"
	// MsgEnvResolved ends an env_request.
	MsgEnvResolved = "env_resolved"
	// MsgEnvSubmitResult answers the submitting client (ok, or the error).
	MsgEnvSubmitResult = "submit_env_result"
	// MsgAutoStartOutput reports the services started by auto-start.
	MsgAutoStartOutput = "auto_start_output"
	// MsgPreviewURL announces a port listening in the session's sandbox.
	MsgPreviewURL = "preview_url"
)

// Client → server frame types.
const (
	ClientPing         = "ping"
	ClientPrompt       = "prompt"
	ClientCancel       = "cancel"
	ClientGetStatus    = "get_status"
	ClientGetMessages  = "get_messages"
	ClientSaveSnapshot = "save_snapshot"
	// Git operations; mutations need the right to change the session.
	ClientGetGitStatus    = "get_git_status"
	ClientGitCreateBranch = "git_create_branch"
	ClientGitCommit       = "git_commit"
	ClientGitPush         = "git_push"
	ClientGitCreatePR     = "git_create_pr"
	// ClientSubmitEnv answers an env_request (EnvSubmission fields).
	ClientSubmitEnv = "submit_env"
	// ClientRunAutoStart (re)starts the configuration's service commands.
	ClientRunAutoStart = "run_auto_start"
)

// WebSocket close codes of the session stream (4000–4999 are application
// codes).
const (
	// CloseNotOwner: another gateway instance owns the session; reconnect
	// (the load balancer should route to the owner).
	CloseNotOwner = 4009
	// CloseSlowClient: the client's outbound buffer exceeded its budget.
	CloseSlowClient = 4008
	// CloseOwnershipLost: this instance lost the owner lease (split-brain
	// guard) or shut down; reconnect.
	CloseOwnershipLost = 4010
	// CloseSessionEnded: the session was paused, stopped or failed.
	CloseSessionEnded = 4000
)

// Close reasons matching the codes above.
const (
	ReasonNotOwner       = "session is owned by another gateway instance"
	ReasonSlowClient     = "client too slow"
	ReasonOwnershipLost  = "session ownership transferred"
	ReasonShutdown       = "gateway shutting down"
	ReasonSessionEnded   = "session ended"
	ReasonSessionDeleted = "session deleted"
)

// Agent run states reported in StatusMessage.Agent.
const (
	AgentIdle    = "idle"
	AgentBusy    = "busy"
	AgentUnknown = "unknown"
)

// ClientMessage is any client → server frame. Only the fields of its Type
// are read; identity never comes from the payload (it comes from auth). A
// submit_env frame carries EnvSubmission's fields instead.
type ClientMessage struct {
	Type    string `json:"type"`
	Content string `json:"content,omitempty"` // prompt

	// Git messages: the repository (relative to the workspace) and the
	// operation's fields.
	WorkspacePath string   `json:"workspace_path,omitempty"`
	Branch        string   `json:"branch,omitempty"`  // git_create_branch
	Message       string   `json:"message,omitempty"` // git_commit
	Mode          string   `json:"mode,omitempty"`    // git_commit: selected | tracked | all
	Files         []string `json:"files,omitempty"`   // git_commit (selected)
	Title         string   `json:"title,omitempty"`   // git_create_pr
	Body          string   `json:"body,omitempty"`    // git_create_pr
	Base          string   `json:"base,omitempty"`    // git_create_pr
	Draft         bool     `json:"draft,omitempty"`   // git_create_pr
}

// ChatMessage is one history entry (user or assistant) with its parts.
type ChatMessage struct {
	ID        string     `json:"id"`
	Role      string     `json:"role"` // user | assistant
	Content   string     `json:"content"`
	Parts     []ChatPart `json:"parts,omitempty"`
	CreatedAt int64      `json:"created_at,omitempty"` // Unix ms
	Completed bool       `json:"completed"`
}

// ChatPart is a text or tool part of a ChatMessage.
type ChatPart struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"` // text | tool | reasoning
	Text       string          `json:"text,omitempty"`
	Tool       string          `json:"tool,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Status     string          `json:"status,omitempty"` // tool: pending|running|completed|error
	Input      json.RawMessage `json:"input,omitempty"`
	Output     string          `json:"output,omitempty"`
	Error      string          `json:"error,omitempty"`
	Title      string          `json:"title,omitempty"`
}

// InitMessage is sent on attach and on get_messages.
type InitMessage struct {
	Type     string        `json:"type"`
	Session  SessionInfo   `json:"session"`
	Messages []ChatMessage `json:"messages"`
	Status   StatusMessage `json:"status"`
}

// StatusMessage reports session and runtime state. Status is the session
// status (starting|running|paused|stopped|failed) or the transient runtime
// state "resuming" while the sandbox is being prepared.
type StatusMessage struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Agent   string `json:"agent"` // idle | busy | unknown
	Message string `json:"message,omitempty"`
}

// MessageMessage announces a new message (a user prompt or an assistant
// message stub).
type MessageMessage struct {
	Type    string      `json:"type"`
	Message ChatMessage `json:"message"`
}

// TokenMessage carries streamed text, batched.
type TokenMessage struct {
	Type      string `json:"type"`
	MessageID string `json:"message_id"`
	PartID    string `json:"part_id"`
	Token     string `json:"token"`
}

// TextPartCompleteMessage gives a finished text part's full text.
type TextPartCompleteMessage struct {
	Type      string `json:"type"`
	MessageID string `json:"message_id"`
	PartID    string `json:"part_id"`
	Text      string `json:"text"`
}

// ToolStartMessage: a tool call began.
type ToolStartMessage struct {
	Type       string          `json:"type"`
	MessageID  string          `json:"message_id"`
	PartID     string          `json:"part_id"`
	ToolCallID string          `json:"tool_call_id"`
	Tool       string          `json:"tool"`
	Args       json.RawMessage `json:"args,omitempty"`
}

// ToolMetadataMessage: a running tool reported a title or metadata.
type ToolMetadataMessage struct {
	Type       string          `json:"type"`
	MessageID  string          `json:"message_id"`
	ToolCallID string          `json:"tool_call_id"`
	Tool       string          `json:"tool"`
	Title      string          `json:"title,omitempty"`
	Metadata   json.RawMessage `json:"metadata,omitempty"`
}

// ToolEndMessage: a tool call finished (status completed or error).
type ToolEndMessage struct {
	Type       string `json:"type"`
	MessageID  string `json:"message_id"`
	ToolCallID string `json:"tool_call_id"`
	Tool       string `json:"tool"`
	Status     string `json:"status"`
	Result     string `json:"result,omitempty"`
	Error      string `json:"error,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
}

// MessageCompleteMessage: the assistant turn finished.
type MessageCompleteMessage struct {
	Type      string `json:"type"`
	MessageID string `json:"message_id,omitempty"`
}

// MessageCancelledMessage: the assistant turn was aborted (cancel).
type MessageCancelledMessage struct {
	Type      string `json:"type"`
	MessageID string `json:"message_id,omitempty"`
}

// ErrorMessage reports an agent or request error. Code is a stable
// machine-readable word (agent_error, forbidden, invalid_message,
// runtime_unavailable, prompt_failed, …).
type ErrorMessage struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Action is what the user should do about a billing refusal
	// (buy_credits, upgrade_plan, …).
	Action string `json:"action,omitempty"`
}

// SnapshotResultMessage answers save_snapshot.
type SnapshotResultMessage struct {
	Type       string `json:"type"`
	Success    bool   `json:"success"`
	SnapshotID string `json:"snapshot_id,omitempty"`
	Error      string `json:"error,omitempty"`
}

// PongMessage answers ping.
type PongMessage struct {
	Type string `json:"type"`
}

// PreviewURLMessage is the preview_url frame.
type PreviewURLMessage struct {
	Type string `json:"type"`
	Port int    `json:"port"`
	// URL is the preview (/proliferate/{session}/preview/{port}/), for a
	// client with a bearer credential.
	URL string `json:"url"`
	// OpenURL is, for a person, the preview with a short-lived token for
	// them alone, to open in a browser (it becomes a preview cookie).
	OpenURL string `json:"open_url,omitempty"`
}

// AutoStartService is one service in an auto_start_output frame.
type AutoStartService struct {
	Name     string `json:"name"`
	Command  string `json:"command"`
	Cwd      string `json:"cwd,omitempty"`
	Status   string `json:"status"` // running | exited | failed | stopped
	ExitCode *int   `json:"exit_code,omitempty"`
	// Output is the end of the service's log (bounded per service).
	Output string `json:"output"`
}

// AutoStartOutputMessage is the auto_start_output frame.
type AutoStartOutputMessage struct {
	Type string `json:"type"`
	// Trigger is boot (a new or restored sandbox) or run_auto_start.
	Trigger  string             `json:"trigger"`
	Services []AutoStartService `json:"services"`
	// Done marks the last frame of this run.
	Done  bool   `json:"done"`
	Error string `json:"error,omitempty"`
}
