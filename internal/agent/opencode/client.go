package opencode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// BasicAuthUser is the user name OpenCode expects with OPENCODE_SERVER_PASSWORD.
const BasicAuthUser = "opencode"

// DefaultRequestTimeout bounds one API call (not the event stream).
const DefaultRequestTimeout = 30 * time.Second

// Client talks to one `opencode serve` over HTTP. It is safe for concurrent
// use. A Client may be scoped to a workspace directory (OpenCode serves
// several via ?directory=).
type Client struct {
	base      *url.URL
	password  string
	directory string
	http      *http.Client
	timeout   time.Duration
}

// ClientOptions configures a Client.
type ClientOptions struct {
	// Password enables HTTP Basic auth (user "opencode").
	Password string
	// Directory scopes every call to this workspace (?directory=).
	Directory string
	// RequestTimeout bounds each API call; 0 means DefaultRequestTimeout.
	RequestTimeout time.Duration
	// HTTPClient defaults to a client without an overall timeout (the event
	// stream is long-lived; per-call timeouts come from RequestTimeout).
	HTTPClient *http.Client
}

// NewClient returns a client for an OpenCode server at baseURL.
func NewClient(baseURL string, opts ClientOptions) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("opencode: invalid base URL %q", baseURL)
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	timeout := opts.RequestTimeout
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	return &Client{base: u, password: opts.Password, directory: opts.Directory, http: hc, timeout: timeout}, nil
}

// WithDirectory returns a copy of the client scoped to another workspace.
func (c *Client) WithDirectory(dir string) *Client {
	cp := *c
	cp.directory = dir
	return &cp
}

// BaseURL returns the server's base URL.
func (c *Client) BaseURL() string { return c.base.String() }

// APIError is a non-2xx answer from OpenCode.
type APIError struct {
	Method, Path string
	Status       int
	Body         string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("opencode: %s %s: HTTP %d: %s", e.Method, e.Path, e.Status, e.Body)
}

func (c *Client) url(path string, query url.Values) string {
	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + path
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	if c.directory != "" {
		q.Set("directory", c.directory)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func (c *Client) newRequest(ctx context.Context, method, path string, query url.Values, body any) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("opencode: encode %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url(path, query), rd)
	if err != nil {
		return nil, fmt.Errorf("opencode: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.password != "" {
		req.SetBasicAuth(BasicAuthUser, c.password)
	}
	return req, nil
}

// do performs one API call with the per-request timeout and decodes a JSON
// answer into out (when non-nil).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := c.newRequest(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("opencode: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("opencode: %s %s: read body: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := strings.TrimSpace(string(data))
		if len(msg) > 512 {
			msg = msg[:512] + "…"
		}
		return &APIError{Method: method, Path: path, Status: resp.StatusCode, Body: msg}
	}
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("opencode: %s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// Health is GET /global/health.
type Health struct {
	Healthy bool   `json:"healthy"`
	Version string `json:"version"`
}

// Health reports whether the server answers.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	err := c.do(ctx, http.MethodGet, "/global/health", nil, nil, &h)
	return h, err
}

// Session is an OpenCode session.
type Session struct {
	ID        string      `json:"id"`
	Slug      string      `json:"slug"`
	ProjectID string      `json:"projectID"`
	Directory string      `json:"directory"`
	Title     string      `json:"title"`
	Version   string      `json:"version"`
	Time      SessionTime `json:"time"`
}

// SessionTime holds Unix-millisecond timestamps.
type SessionTime struct {
	Created int64 `json:"created"`
	Updated int64 `json:"updated"`
}

// CreateSession creates a session. Giving a title avoids OpenCode's extra
// title-generation model request.
func (c *Client) CreateSession(ctx context.Context, title string) (Session, error) {
	body := map[string]any{}
	if title != "" {
		body["title"] = title
	}
	var s Session
	if err := c.do(ctx, http.MethodPost, "/session", nil, body, &s); err != nil {
		return Session{}, err
	}
	if s.ID == "" {
		return Session{}, errors.New("opencode: POST /session: answer has no session id")
	}
	return s, nil
}

// GetSession fetches one session.
func (c *Client) GetSession(ctx context.Context, sessionID string) (Session, error) {
	var s Session
	err := c.do(ctx, http.MethodGet, "/session/"+url.PathEscape(sessionID), nil, nil, &s)
	return s, err
}

// PartInput is one part of a prompt.
type PartInput struct {
	Type string `json:"type"` // "text" (also "file")
	Text string `json:"text,omitempty"`
	// For file parts.
	Mime     string `json:"mime,omitempty"`
	Filename string `json:"filename,omitempty"`
	URL      string `json:"url,omitempty"`
}

// TextPart is a text prompt part.
func TextPart(text string) PartInput { return PartInput{Type: "text", Text: text} }

// ModelRef names a model of a provider.
type ModelRef struct {
	ProviderID string `json:"providerID"`
	ModelID    string `json:"modelID"`
}

// PromptOptions are optional prompt settings.
type PromptOptions struct {
	Model  *ModelRef
	Agent  string // e.g. "build"
	System string // extra system prompt for this message
}

// PromptAsync sends a prompt and returns at once (OpenCode answers 204);
// the reply arrives on the event stream.
func (c *Client) PromptAsync(ctx context.Context, sessionID string, parts []PartInput, opts PromptOptions) error {
	if len(parts) == 0 {
		return errors.New("opencode: prompt has no parts")
	}
	body := map[string]any{"parts": parts}
	if opts.Model != nil {
		body["model"] = opts.Model
	}
	if opts.Agent != "" {
		body["agent"] = opts.Agent
	}
	if opts.System != "" {
		body["system"] = opts.System
	}
	return c.do(ctx, http.MethodPost, "/session/"+url.PathEscape(sessionID)+"/prompt_async", nil, body, nil)
}

// Abort stops the session's running turn. OpenCode then emits session.error
// (MessageAbortedError) and goes idle.
func (c *Client) Abort(ctx context.Context, sessionID string) error {
	return c.do(ctx, http.MethodPost, "/session/"+url.PathEscape(sessionID)+"/abort", nil, nil, nil)
}

// SessionStatus is a session's run state: "idle", "busy" or "retry".
type SessionStatus struct {
	Type    string `json:"type"`
	Attempt int    `json:"attempt,omitempty"`
	Message string `json:"message,omitempty"`
	Next    int64  `json:"next,omitempty"`
}

// Status returns the status of the sessions that are not idle (OpenCode
// omits idle ones), keyed by session id.
func (c *Client) Status(ctx context.Context) (map[string]SessionStatus, error) {
	out := map[string]SessionStatus{}
	err := c.do(ctx, http.MethodGet, "/session/status", nil, nil, &out)
	return out, err
}

// Tokens are a step's or message's token counts.
type Tokens struct {
	Total     int `json:"total,omitempty"`
	Input     int `json:"input"`
	Output    int `json:"output"`
	Reasoning int `json:"reasoning"`
	Cache     struct {
		Read  int `json:"read"`
		Write int `json:"write"`
	} `json:"cache"`
}

// ErrorInfo is OpenCode's error object: a name (MessageAbortedError,
// APIError, ProviderAuthError, UnknownError…) and data.
type ErrorInfo struct {
	Name string          `json:"name"`
	Data json.RawMessage `json:"data,omitempty"`
}

// Message returns data.message when present.
func (e *ErrorInfo) Message() string {
	if e == nil {
		return ""
	}
	var d struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(e.Data, &d)
	return d.Message
}

// MessageInfo is a user or assistant message (without parts).
type MessageInfo struct {
	ID         string     `json:"id"`
	SessionID  string     `json:"sessionID"`
	Role       string     `json:"role"`
	ParentID   string     `json:"parentID,omitempty"`
	ModelID    string     `json:"modelID,omitempty"`
	ProviderID string     `json:"providerID,omitempty"`
	Mode       string     `json:"mode,omitempty"`
	Agent      string     `json:"agent,omitempty"`
	Cost       float64    `json:"cost,omitempty"`
	Tokens     *Tokens    `json:"tokens,omitempty"`
	Finish     string     `json:"finish,omitempty"`
	Error      *ErrorInfo `json:"error,omitempty"`
	Time       struct {
		Created   int64 `json:"created"`
		Completed int64 `json:"completed,omitempty"`
	} `json:"time"`
}

// ToolState is a tool part's lifecycle: pending → running → completed | error.
type ToolState struct {
	Status   string          `json:"status"`
	Input    json.RawMessage `json:"input,omitempty"`
	Raw      string          `json:"raw,omitempty"`
	Output   string          `json:"output,omitempty"`
	Title    string          `json:"title,omitempty"`
	Error    string          `json:"error,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	Time     struct {
		Start int64 `json:"start,omitempty"`
		End   int64 `json:"end,omitempty"`
	} `json:"time"`
}

// Part types OpenCode emits.
const (
	PartText       = "text"
	PartReasoning  = "reasoning"
	PartTool       = "tool"
	PartStepStart  = "step-start"
	PartStepFinish = "step-finish"
	PartPatch      = "patch"
	PartFile       = "file"
)

// Tool states.
const (
	ToolPending   = "pending"
	ToolRunning   = "running"
	ToolCompleted = "completed"
	ToolError     = "error"
)

// Part is one part of a message: text, reasoning, tool, step-start,
// step-finish (with tokens and cost), patch, file…
type Part struct {
	ID        string     `json:"id"`
	SessionID string     `json:"sessionID"`
	MessageID string     `json:"messageID"`
	Type      string     `json:"type"`
	Text      string     `json:"text,omitempty"`
	Tool      string     `json:"tool,omitempty"`
	CallID    string     `json:"callID,omitempty"`
	State     *ToolState `json:"state,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	Tokens    *Tokens    `json:"tokens,omitempty"`
	Cost      float64    `json:"cost,omitempty"`
	Files     []string   `json:"files,omitempty"`
	Time      *struct {
		Start int64 `json:"start,omitempty"`
		End   int64 `json:"end,omitempty"`
	} `json:"time,omitempty"`
}

// MessageWithParts is one history entry.
type MessageWithParts struct {
	Info  MessageInfo `json:"info"`
	Parts []Part      `json:"parts"`
}

// Text joins the message's text parts.
func (m MessageWithParts) Text() string {
	var sb strings.Builder
	for _, p := range m.Parts {
		if p.Type == PartText {
			sb.WriteString(p.Text)
		}
	}
	return sb.String()
}

// Messages returns the session's history, oldest first.
func (c *Client) Messages(ctx context.Context, sessionID string) ([]MessageWithParts, error) {
	var out []MessageWithParts
	err := c.do(ctx, http.MethodGet, "/session/"+url.PathEscape(sessionID)+"/message", nil, nil, &out)
	return out, err
}
