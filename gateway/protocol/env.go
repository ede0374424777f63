package protocol

import "encoding/json"

// Env request end states (EnvResolvedMessage.Status).
const (
	EnvSubmitted = "submitted"
	EnvTimedOut  = "timed_out"
	EnvCancelled = "cancelled"
)

// EnvRequestMessage surfaces the agent's request_env_variables call.
type EnvRequestMessage struct {
	Type       string          `json:"type"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Request    json.RawMessage `json:"request"`
}

// EnvValue is one submitted value. Persist stores it as a secret: of
// RepoID (one of the session's repos), else org-wide.
type EnvValue struct {
	Key     string `json:"key"`
	Value   string `json:"value"`
	Persist bool   `json:"persist,omitempty"`
	RepoID  string `json:"repo_id,omitempty"`
}

// EnvSubmission answers a pending request (the submit_env frame, with its
// type, and the body of the REST route). ToolCallID may be empty when
// exactly one request is pending. EnvFile, when set, is a path relative
// to the workspace where the values are also written as a dotenv file
// (git-excluded).
type EnvSubmission struct {
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Secrets    []EnvValue `json:"secrets"`
	EnvFile    string     `json:"env_file,omitempty"`
}

// EnvSaveResult says whether one submitted value was stored as a secret.
type EnvSaveResult struct {
	Key string `json:"key"`
	// Persisted: stored now (encrypted).
	Persisted bool `json:"persisted"`
	// AlreadyExisted: a secret of this key already exists in that scope; it
	// was left as it is (rotate it through the secrets API).
	AlreadyExisted bool `json:"already_existed"`
}

// EnvSubmitResult is the answer of a submission (no values).
type EnvSubmitResult struct {
	ToolCallID string          `json:"tool_call_id"`
	Submitted  bool            `json:"submitted"`
	Keys       []string        `json:"keys"`
	Results    []EnvSaveResult `json:"results"`
	EnvFile    string          `json:"env_file,omitempty"`
}

// EnvResolvedMessage ends an env_request (no values).
type EnvResolvedMessage struct {
	Type       string          `json:"type"`
	ToolCallID string          `json:"tool_call_id"`
	Status     string          `json:"status"`
	Keys       []string        `json:"keys,omitempty"`
	Results    []EnvSaveResult `json:"results,omitempty"`
	EnvFile    string          `json:"env_file,omitempty"`
}

// EnvProblem is one invalid field of a submission (never a value).
type EnvProblem struct {
	Field   string `json:"field"`
	Problem string `json:"problem"`
}

// EnvSubmitResultMessage answers a client's submit_env: OK with the
// result, or the error (code and the invalid fields).
type EnvSubmitResultMessage struct {
	Type   string           `json:"type"`
	OK     bool             `json:"ok"`
	Result *EnvSubmitResult `json:"result,omitempty"`
	Code   string           `json:"code,omitempty"`
	Error  string           `json:"error,omitempty"`
	Fields []EnvProblem     `json:"fields,omitempty"`
}
