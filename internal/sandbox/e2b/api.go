package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate/proliferate/internal/sandbox"
)

// ErrAuth means E2B refused the API key (401/403) or an envd access token:
// a configuration error (E2B_API_KEY), never retried.
var ErrAuth = errors.New("e2b: credentials refused (check E2B_API_KEY)")

// ErrConflict is E2B's 409 (e.g. pausing a sandbox that is already
// paused or being paused).
var ErrConflict = errors.New("e2b: conflict")

// APIError is a non-2xx answer of the E2B API or of envd: the status and
// E2B's error body ({"code": …, "message": …}). It unwraps to
// sandbox.ErrNotFound (404, and envd's 502 "sandbox not found"), ErrAuth
// (401, 403) or ErrConflict (409).
type APIError struct {
	Op      string // "POST /sandboxes"
	Status  int
	Code    string // error_code when E2B sends one, or envd's Connect code
	Message string
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("e2b: %s: %d %s", e.Op, e.Status, msg)
}

func (e *APIError) Unwrap() error {
	switch e.Status {
	case http.StatusNotFound, http.StatusBadGateway:
		return sandbox.ErrNotFound
	case http.StatusUnauthorized, http.StatusForbidden:
		return ErrAuth
	case http.StatusConflict:
		return ErrConflict
	}
	return nil
}

// ClientOptions configures a Client.
type ClientOptions struct {
	// APIKey is sent as X-API-Key. Never logged.
	APIKey string
	// Domain is E2B's domain (E2B_DOMAIN); sandbox ports are reached at
	// https://{port}-{sandboxID}.{Domain}. Default DefaultDomain.
	Domain string
	// APIURL is the control plane; default https://api.{Domain}.
	APIURL string
	// PortURL returns the base URL of a sandbox's port; default
	// https://{port}-{sandboxID}.{Domain}. A fake provides its own.
	PortURL func(sandboxID string, port int) string
	// HTTPClient defaults to a client with a 60 s timeout for the API and
	// none for envd's streams.
	HTTPClient *http.Client
	// Retries is how many times a request that got 429, 502-504 (500 and
	// transport errors for idempotent requests) is retried; default 4.
	// RetryBase is the first backoff (doubling, capped at 5 s, or E2B's
	// Retry-After); default 250 ms.
	Retries   int
	RetryBase time.Duration
}

// DefaultDomain is E2B's public domain.
const DefaultDomain = "e2b.app"

// EnvdPort is envd's port in every sandbox.
const EnvdPort = 49983

// Client talks to E2B's control plane and to envd in its sandboxes.
type Client struct {
	opts ClientOptions
	api  *url.URL
	http *http.Client
}

// NewClient returns a client.
func NewClient(opts ClientOptions) (*Client, error) {
	if opts.APIKey == "" {
		return nil, errors.New("e2b: API key is required (E2B_API_KEY)")
	}
	if opts.Domain == "" {
		opts.Domain = DefaultDomain
	}
	if opts.APIURL == "" {
		opts.APIURL = "https://api." + opts.Domain
	}
	api, err := url.Parse(strings.TrimRight(opts.APIURL, "/"))
	if err != nil || api.Host == "" {
		return nil, fmt.Errorf("e2b: invalid API URL %q", opts.APIURL)
	}
	if opts.PortURL == nil {
		domain := opts.Domain
		opts.PortURL = func(id string, port int) string { return fmt.Sprintf("https://%d-%s.%s", port, id, domain) }
	}
	if opts.Retries == 0 {
		opts.Retries = 4
	}
	if opts.RetryBase <= 0 {
		opts.RetryBase = 250 * time.Millisecond
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{opts: opts, api: api, http: hc}, nil
}

// PortURL is the base URL of port on sandbox id.
func (c *Client) PortURL(id string, port int) string { return c.opts.PortURL(id, port) }

// HTTPClient is the client's HTTP client (for a sandbox's ports).
func (c *Client) HTTPClient() *http.Client { return c.http }

// NewSandbox is POST /sandboxes's body.
type NewSandbox struct {
	TemplateID string            `json:"templateID"`
	Timeout    int               `json:"timeout,omitempty"` // seconds
	AutoPause  bool              `json:"autoPause,omitempty"`
	Secure     bool              `json:"secure,omitempty"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	EnvVars    map[string]string `json:"envVars,omitempty"`
	Network    *NetworkConfig    `json:"network,omitempty"`
}

// NetworkConfig is E2B's SandboxNetworkConfig (egress rules): allowOut
// entries (CIDRs, IPs, domains, *.domain wildcards) take precedence over
// denyOut (CIDRs, IPs).
type NetworkConfig struct {
	AllowOut []string `json:"allowOut,omitempty"`
	DenyOut  []string `json:"denyOut,omitempty"`
}

// SandboxInfo is E2B's Sandbox (create, connect).
type SandboxInfo struct {
	TemplateID      string `json:"templateID"`
	SandboxID       string `json:"sandboxID"`
	Alias           string `json:"alias,omitempty"`
	ClientID        string `json:"clientID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken,omitempty"`
	Domain          string `json:"domain,omitempty"`
}

// SandboxDetail is GET /sandboxes/{id} and an entry of GET /v2/sandboxes.
type SandboxDetail struct {
	TemplateID      string            `json:"templateID"`
	SandboxID       string            `json:"sandboxID"`
	ClientID        string            `json:"clientID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int               `json:"memoryMB"`
	DiskSizeMB      int               `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	State           string            `json:"state"` // running | paused
}

// Sandbox states.
const (
	StateRunning = "running"
	StatePaused  = "paused"
)

// SnapshotInfo is POST /sandboxes/{id}/snapshots's answer.
type SnapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

// apiError is E2B's Error schema.
type apiError struct {
	Code      int    `json:"code"`
	ErrorCode string `json:"error_code"`
	Message   string `json:"message"`
}

// answer is what callers of do need besides the body.
type answer struct {
	status int
	header http.Header
}

// do sends one control-plane request with retries and decodes a 2xx body
// into out. idempotent allows retrying 500s and transport errors.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any, idempotent bool) (answer, error) {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return answer{}, fmt.Errorf("e2b: encode %s: %w", path, err)
		}
	}
	u := *c.api
	u.Path += path
	if query != nil {
		u.RawQuery = query.Encode()
	}
	op := method + " " + path
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(payload))
		if err != nil {
			return answer{}, fmt.Errorf("e2b: %s: %w", op, err)
		}
		req.Header.Set("X-API-Key", c.opts.APIKey)
		req.Header.Set("Accept", "application/json")
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		resp, err := c.http.Do(req.WithContext(rctx))
		if err != nil {
			cancel()
			if ctx.Err() != nil || !idempotent || attempt >= c.opts.Retries {
				return answer{}, fmt.Errorf("e2b: %s: %w", op, err)
			}
			if err := c.backoff(ctx, attempt, ""); err != nil {
				return answer{}, fmt.Errorf("e2b: %s: %w", op, err)
			}
			continue
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
		resp.Body.Close()
		cancel()
		if err != nil {
			return answer{resp.StatusCode, resp.Header}, fmt.Errorf("e2b: %s: read answer: %w", op, err)
		}
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			if out != nil && len(data) > 0 {
				if err := json.Unmarshal(data, out); err != nil {
					return answer{resp.StatusCode, resp.Header}, fmt.Errorf("e2b: %s: decode answer: %w", op, err)
				}
			}
			return answer{resp.StatusCode, resp.Header}, nil
		}
		apiErr := &APIError{Op: op, Status: resp.StatusCode}
		var e apiError
		if json.Unmarshal(data, &e) == nil {
			apiErr.Message, apiErr.Code = e.Message, e.ErrorCode
		}
		if retryable(resp.StatusCode, idempotent) && attempt < c.opts.Retries {
			if err := c.backoff(ctx, attempt, resp.Header.Get("Retry-After")); err != nil {
				return answer{resp.StatusCode, resp.Header}, errors.Join(apiErr, err)
			}
			continue
		}
		return answer{resp.StatusCode, resp.Header}, apiErr
	}
}

func retryable(status int, idempotent bool) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	case http.StatusInternalServerError:
		return idempotent
	}
	return false
}

// backoff waits before retry attempt+1: RetryBase·2^attempt capped at 5 s,
// or the server's Retry-After (seconds, capped at 30 s).
func (c *Client) backoff(ctx context.Context, attempt int, retryAfter string) error {
	d := min(c.opts.RetryBase<<attempt, 5*time.Second)
	if s, err := strconv.Atoi(retryAfter); err == nil && s >= 0 {
		d = min(time.Duration(s)*time.Second, 30*time.Second)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Create is POST /sandboxes (201).
func (c *Client) Create(ctx context.Context, req NewSandbox) (SandboxInfo, error) {
	var out SandboxInfo
	_, err := c.do(ctx, http.MethodPost, "/sandboxes", nil, req, &out, false)
	return out, err
}

// Connect is POST /sandboxes/{id}/connect: it resumes a paused sandbox
// (201) or returns a running one (200), with its lifetime extended to
// timeout from now. resumed reports 201.
func (c *Client) Connect(ctx context.Context, id string, timeout time.Duration) (info SandboxInfo, resumed bool, err error) {
	r, err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/connect", nil,
		map[string]int{"timeout": int(timeout / time.Second)}, &info, false)
	return info, r.status == http.StatusCreated, err
}

// Get is GET /sandboxes/{id}.
func (c *Client) Get(ctx context.Context, id string) (SandboxDetail, error) {
	var out SandboxDetail
	_, err := c.do(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id), nil, nil, &out, true)
	return out, err
}

// List is GET /v2/sandboxes filtered by metadata (every pair must match)
// and states (none: E2B's default, every state).
func (c *Client) List(ctx context.Context, metadata map[string]string, states ...string) ([]SandboxDetail, error) {
	q := url.Values{}
	if len(metadata) > 0 {
		m := url.Values{}
		for _, k := range slices.Sorted(maps.Keys(metadata)) {
			m.Set(k, metadata[k])
		}
		q.Set("metadata", m.Encode())
	}
	if len(states) > 0 {
		q.Set("state", strings.Join(states, ","))
	}
	var all []SandboxDetail
	for {
		var page []SandboxDetail
		// Pagination: X-Next-Token; E2B lists at most 100 per page.
		next, err := c.list(ctx, q, &page)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		q.Set("nextToken", next)
	}
}

func (c *Client) list(ctx context.Context, q url.Values, out *[]SandboxDetail) (string, error) {
	r, err := c.do(ctx, http.MethodGet, "/v2/sandboxes", q, nil, out, true)
	return r.header.Get("X-Next-Token"), err
}

// Kill is DELETE /sandboxes/{id} (204).
func (c *Client) Kill(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, nil, nil, true)
	return err
}

// Pause is POST /sandboxes/{id}/pause (204); the sandbox id then names
// the paused sandbox, which Connect resumes.
func (c *Client) Pause(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/pause", nil, nil, nil, false)
	return err
}

// SetTimeout is POST /sandboxes/{id}/timeout (204): the sandbox ends
// timeout from now.
func (c *Client) SetTimeout(ctx context.Context, id string, timeout time.Duration) error {
	_, err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/timeout", nil,
		map[string]int{"timeout": int(timeout / time.Second)}, nil, true)
	return err
}

// CreateSnapshot is POST /sandboxes/{id}/snapshots (201): a persistent
// snapshot of the running sandbox, usable as a templateID.
func (c *Client) CreateSnapshot(ctx context.Context, id string) (SnapshotInfo, error) {
	var out SnapshotInfo
	_, err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/snapshots", nil, struct{}{}, &out, false)
	return out, err
}

// DeleteTemplate is DELETE /templates/{id} (204): deletes a snapshot
// template.
func (c *Client) DeleteTemplate(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/templates/"+url.PathEscape(id), nil, nil, nil, true)
	return err
}
