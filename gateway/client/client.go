// Package client is the Go client of the session gateway (gateway package
// routes): create sessions, post messages, cancel, read info and status,
// and stream a session over WebSocket with automatic reconnection
// (exponential backoff: 1 s base, ×2, at most 30 s, 10 attempts in a row by
// default; a successful connection resets the count).
//
// gateway/client/runsessions implements the run pipeline's sessions
// (runs.Sessions) over it.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/proliferate/proliferate/gateway/protocol"
)

// OrgHeader scopes a service credential's session lookups to an
// organization (gateway.OrgHeader).
const OrgHeader = "X-Proliferate-Org-Id"

// Client talks to one gateway with one bearer credential.
type Client struct {
	// BaseURL is the gateway's base URL (http[s]://host:port).
	BaseURL string
	// Token is the bearer credential (user token, API key or service token).
	Token string
	// TokenSource, when set, supplies the credential for every request and
	// connection instead of Token (service tokens expire: mint a fresh one,
	// e.g. ServiceTokens).
	TokenSource func(ctx context.Context) (string, error)
	// HTTP is the HTTP client [a client with a 60 s timeout].
	HTTP *http.Client
	// Reconnect is the WebSocket reconnection policy [DefaultBackoff].
	Reconnect Backoff
	// Header is added to every request (for example OrgHeader).
	Header http.Header
}

// New returns a client for baseURL with token.
func New(baseURL, token string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Token: token,
		HTTP: &http.Client{Timeout: 60 * time.Second}, Reconnect: DefaultBackoff}
}

// ForOrg returns a copy of c whose requests are scoped to organization
// orgID (OrgHeader; a service credential's session lookups need it). ""
// returns an unscoped copy.
func (c *Client) ForOrg(orgID string) *Client {
	cc := *c
	cc.Header = c.Header.Clone()
	if cc.Header == nil {
		cc.Header = http.Header{}
	}
	if orgID != "" {
		cc.Header.Set(OrgHeader, orgID)
	}
	return &cc
}

// do sends a JSON request and decodes a 2xx answer into out (may be nil);
// any other answer is an *Error.
func (c *Client) do(ctx context.Context, method, path string, body any, hdr http.Header, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return 0, err
	}
	for k, vs := range c.Header {
		req.Header[k] = append([]string(nil), vs...)
	}
	for k, vs := range hdr {
		req.Header[k] = append([]string(nil), vs...)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	tok, err := c.token(ctx)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("gateway %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("gateway %s %s: read body: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, decodeError(resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("gateway %s %s: decode answer: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

func (c *Client) token(ctx context.Context) (string, error) {
	if c.TokenSource == nil {
		return c.Token, nil
	}
	tok, err := c.TokenSource(ctx)
	if err != nil {
		return "", fmt.Errorf("gateway client: credential: %w", err)
	}
	return tok, nil
}

// ServiceTokens returns a TokenSource that mints service tokens with mint
// (for example identity.IssueServiceToken bound to the secret and service
// name) and reuses each until half its ttl has passed.
func ServiceTokens(ttl time.Duration, mint func(ttl time.Duration) (string, error)) func(context.Context) (string, error) {
	var (
		mu  sync.Mutex
		tok string
		exp time.Time
	)
	return func(context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if tok == "" || time.Now().After(exp) {
			t, err := mint(ttl)
			if err != nil {
				return "", err
			}
			tok, exp = t, time.Now().Add(ttl/2)
		}
		return tok, nil
	}
}

func decodeError(status int, raw []byte) *Error {
	var body struct {
		Error Error `json:"error"`
	}
	e := &Error{Status: status, Code: "http_" + fmt.Sprint(status), Message: http.StatusText(status)}
	if json.Unmarshal(raw, &body) == nil && body.Error.Code != "" {
		body.Error.Status = status
		e = &body.Error
	}
	return e
}

func sessionPath(id string, rest string) string {
	return "/proliferate/" + url.PathEscape(id) + rest
}

// CreateSession creates a session (POST /proliferate/sessions). A request
// with an IdempotencyKey returns the same session every time
// (Session.Created tells the first time apart).
func (c *Client) CreateSession(ctx context.Context, req protocol.CreateSessionRequest) (protocol.Session, error) {
	var hdr http.Header
	if req.IdempotencyKey != "" {
		hdr = http.Header{"Idempotency-Key": {req.IdempotencyKey}}
	}
	var s protocol.Session
	_, err := c.do(ctx, http.MethodPost, "/proliferate/sessions", req, hdr, &s)
	return s, err
}

// PostMessage sends a prompt to the session. With an idempotencyKey the
// prompt is sent at most once however often this is called (sent=false:
// an earlier call already sent it).
func (c *Client) PostMessage(ctx context.Context, sessionID, content, idempotencyKey string) (sent bool, err error) {
	var hdr http.Header
	if idempotencyKey != "" {
		hdr = http.Header{"Idempotency-Key": {idempotencyKey}}
	}
	var out protocol.MessageResponse
	_, err = c.do(ctx, http.MethodPost, sessionPath(sessionID, "/message"), protocol.MessageRequest{Content: content}, hdr, &out)
	return out.Sent, err
}

// Cancel aborts the session's running agent turn.
func (c *Client) Cancel(ctx context.Context, sessionID string) error {
	_, err := c.do(ctx, http.MethodPost, sessionPath(sessionID, "/cancel"), struct{}{}, nil, nil)
	return err
}

// Info returns the session (GET /proliferate/:id).
func (c *Client) Info(ctx context.Context, sessionID string) (protocol.Session, error) {
	var s protocol.Session
	_, err := c.do(ctx, http.MethodGet, sessionPath(sessionID, ""), nil, nil, &s)
	return s, err
}

// Status returns the session's status and runtime liveness.
func (c *Client) Status(ctx context.Context, sessionID string) (protocol.SessionStatus, error) {
	var s protocol.SessionStatus
	_, err := c.do(ctx, http.MethodGet, sessionPath(sessionID, "/status"), nil, nil, &s)
	return s, err
}

// ToolCall performs a tool callback as a sandbox would (token must be the
// session's sandbox token). Tests and tooling use it.
func (c *Client) ToolCall(ctx context.Context, sessionID, tool string, req protocol.ToolCallRequest) (protocol.ToolResult, error) {
	var out protocol.ToolResult
	_, err := c.do(ctx, http.MethodPost, sessionPath(sessionID, "/tools/"+url.PathEscape(tool)), req, nil, &out)
	return out, err
}
