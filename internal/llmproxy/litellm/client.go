// Package litellm is Proliferate's adapter for teams that run LiteLLM as
// their LLM proxy (LLM_PROXY_KIND=litellm, llm-proxy.md):
//
//   - Client speaks LiteLLM's admin API (teams, virtual keys, spend logs)
//     with the master key, bounded retries on 429/5xx, and errors that name
//     the endpoint and status but never a key;
//   - Issuer implements llmkeys.Issuer on top of it: team = organization,
//     user = alias = session, a budget from the organization's balance;
//   - Collector turns LiteLLM's spend logs into llm.spend events, per
//     organization, with a cursor in llm_spend_cursors that moves only after
//     Kafka acknowledged the events (at-least-once; the ledger's
//     llm:{request_id} key makes a re-produced log harmless).
//
// The collector also fixes two gaps of the original sync: spend logs that
// LiteLLM writes late (it batches its spend-log writes and stamps a log with
// the request's start, so a long streamed request lands minutes "in the
// past") are picked up within a late-arrival window instead of being
// skipped forever, and organizations that are exhausted or suspended keep
// being collected, so requests in flight when their keys were revoked are
// still billed.
package litellm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Admin API endpoints (LiteLLM proxy server).
const (
	EndpointTeamInfo    = "/team/info"
	EndpointTeamNew     = "/team/new"
	EndpointKeyGenerate = "/key/generate"
	EndpointKeyDelete   = "/key/delete"
	EndpointSpendLogs   = "/spend/logs/v2"
)

// SpendLogsMaxPageSize is the largest page /spend/logs/v2 serves.
const SpendLogsMaxPageSize = 100

// spendDateLayout is the format of /spend/logs/v2's start_date and
// end_date: UTC, second resolution, both ends inclusive.
const spendDateLayout = "2006-01-02 15:04:05"

// ClientConfig configures a Client.
type ClientConfig struct {
	// AdminURL is LiteLLM's admin base URL (LLM_PROXY_ADMIN_URL, else
	// LLM_PROXY_URL); a trailing "/" or "/v1" is stripped.
	AdminURL string
	// MasterKey authenticates every call (Authorization: Bearer). Never
	// logged or put in an error.
	MasterKey string
	// HTTPClient defaults to a client with Timeout.
	HTTPClient *http.Client
	// Timeout bounds one attempt (default 10 s).
	Timeout time.Duration
	// Retries is how many times a 429/5xx or transport failure is retried
	// (default 3; negative: none).
	Retries int
	// Backoff is the first retry delay, doubled per attempt (default 200 ms).
	Backoff time.Duration
}

// Client calls LiteLLM's admin API. It is safe for concurrent use.
type Client struct {
	base    string
	master  string
	hc      *http.Client
	retries int
	backoff time.Duration
}

// NewClient returns a client for the admin API.
func NewClient(cfg ClientConfig) (*Client, error) {
	base := NormalizeAdminURL(cfg.AdminURL)
	if base == "" {
		return nil, errors.New("litellm: no admin URL (LLM_PROXY_ADMIN_URL or LLM_PROXY_URL)")
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("litellm: admin URL %q is not an http(s) URL", base)
	}
	if cfg.MasterKey == "" {
		return nil, errors.New("litellm: LLM_PROXY_MASTER_KEY is not set")
	}
	c := &Client{base: base, master: cfg.MasterKey, hc: cfg.HTTPClient, retries: cfg.Retries, backoff: cfg.Backoff}
	if c.hc == nil {
		t := cfg.Timeout
		if t <= 0 {
			t = 10 * time.Second
		}
		c.hc = &http.Client{Timeout: t}
	}
	switch {
	case c.retries == 0:
		c.retries = 3
	case c.retries < 0:
		c.retries = 0
	}
	if c.backoff <= 0 {
		c.backoff = 200 * time.Millisecond
	}
	return c, nil
}

// NormalizeAdminURL strips trailing slashes and a trailing "/v1" (the
// public, OpenAI/Anthropic-style base) from a LiteLLM URL.
func NormalizeAdminURL(raw string) string {
	s := strings.TrimSpace(raw)
	for {
		t := strings.TrimSuffix(strings.TrimRight(s, "/"), "/v1")
		if t == s {
			return s
		}
		s = t
	}
}

// APIError is a non-2xx answer of the admin API.
type APIError struct {
	Method   string
	Endpoint string
	Status   int
	// Message is LiteLLM's error message (error.message or detail), cut
	// to 300 bytes.
	Message string
}

func (e *APIError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("litellm: %s %s: HTTP %d", e.Method, e.Endpoint, e.Status)
	}
	return fmt.Sprintf("litellm: %s %s: HTTP %d: %s", e.Method, e.Endpoint, e.Status, e.Message)
}

// IsStatus reports whether err is an APIError with the given status.
func IsStatus(err error, status int) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == status
}

func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// do sends one admin call with retries and decodes a 2xx JSON answer into
// out (when not nil).
func (c *Client) do(ctx context.Context, method, endpoint string, query url.Values, body, out any) error {
	var payload []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("litellm: %s %s: encode request: %w", method, endpoint, err)
		}
		payload = b
	}
	target := c.base + endpoint
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	delay := c.backoff
	for attempt := 0; ; attempt++ {
		err := c.once(ctx, method, endpoint, target, payload, out)
		if err == nil {
			return nil
		}
		var ae *APIError
		again := attempt < c.retries && ctx.Err() == nil &&
			(!errors.As(err, &ae) || retryable(ae.Status))
		if !again {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (gave up: %w)", err, ctx.Err())
		case <-t.C:
		}
		delay *= 2
	}
}

func (c *Client) once(ctx context.Context, method, endpoint, target string, payload []byte, out any) error {
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return fmt.Errorf("litellm: %s %s: %w", method, endpoint, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.master)
	req.Header.Set("Accept", "application/json")
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		// url.Error carries the URL (no secrets: the key is in a header).
		return fmt.Errorf("litellm: %s %s: %w", method, endpoint, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("litellm: %s %s: read answer: %w", method, endpoint, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &APIError{Method: method, Endpoint: endpoint, Status: resp.StatusCode, Message: errorMessage(b)}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("litellm: %s %s: decode answer: %w", method, endpoint, err)
	}
	return nil
}

// errorMessage extracts LiteLLM's error text: {"error":{"message":…}}
// (ProxyException) or {"detail":…} (FastAPI), else the raw body.
func errorMessage(b []byte) string {
	var e struct {
		Error  json.RawMessage `json:"error"`
		Detail json.RawMessage `json:"detail"`
	}
	msg := ""
	if json.Unmarshal(b, &e) == nil {
		var inner struct {
			Message any `json:"message"`
		}
		switch {
		case len(e.Error) > 0 && json.Unmarshal(e.Error, &inner) == nil && inner.Message != nil:
			msg = fmt.Sprint(inner.Message)
		case len(e.Error) > 0:
			msg = string(e.Error)
		case len(e.Detail) > 0:
			var s string
			if json.Unmarshal(e.Detail, &s) == nil {
				msg = s
			} else {
				msg = string(e.Detail)
			}
		}
	}
	if msg == "" {
		msg = string(b)
	}
	msg = strings.TrimSpace(msg)
	if len(msg) > 300 {
		msg = msg[:300]
	}
	return msg
}

// Team is a LiteLLM team (one per organization).
type Team struct {
	TeamID    string         `json:"team_id"`
	TeamAlias string         `json:"team_alias,omitempty"`
	MaxBudget *float64       `json:"max_budget,omitempty"`
	Spend     float64        `json:"spend,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

// ErrTeamNotFound: /team/info does not know the team.
var ErrTeamNotFound = errors.New("litellm: team not found")

// TeamInfo returns the team (GET /team/info?team_id=…); ErrTeamNotFound
// when LiteLLM does not know it.
func (c *Client) TeamInfo(ctx context.Context, teamID string) (Team, error) {
	var out struct {
		TeamID   string `json:"team_id"`
		TeamInfo Team   `json:"team_info"`
	}
	err := c.do(ctx, http.MethodGet, EndpointTeamInfo, url.Values{"team_id": {teamID}}, nil, &out)
	if err != nil {
		var ae *APIError
		if errors.As(err, &ae) && (ae.Status == http.StatusNotFound ||
			(ae.Status == http.StatusBadRequest && notFoundMessage(ae.Message))) {
			return Team{}, fmt.Errorf("%w: %s", ErrTeamNotFound, teamID)
		}
		return Team{}, err
	}
	t := out.TeamInfo
	if t.TeamID == "" {
		t.TeamID = out.TeamID
	}
	return t, nil
}

func notFoundMessage(m string) bool {
	m = strings.ToLower(m)
	return strings.Contains(m, "not found") || strings.Contains(m, "does not exist") || strings.Contains(m, "doesn't exist")
}

func duplicateMessage(m string) bool {
	m = strings.ToLower(m)
	return strings.Contains(m, "already exists") || strings.Contains(m, "duplicate") || strings.Contains(m, "unique constraint")
}

// NewTeam creates a team (POST /team/new).
func (c *Client) NewTeam(ctx context.Context, t Team) (Team, error) {
	var out Team
	if err := c.do(ctx, http.MethodPost, EndpointTeamNew, nil, t, &out); err != nil {
		return Team{}, err
	}
	if out.TeamID == "" {
		out.TeamID = t.TeamID
	}
	return out, nil
}

// EnsureTeam makes sure the team exists: GET /team/info first, then POST
// /team/new, tolerating the "already exists" of a concurrent creator.
// It reports whether it created the team.
func (c *Client) EnsureTeam(ctx context.Context, teamID, alias string) (created bool, err error) {
	if _, err := c.TeamInfo(ctx, teamID); err == nil {
		return false, nil
	} else if !errors.Is(err, ErrTeamNotFound) {
		return false, err
	}
	_, err = c.NewTeam(ctx, Team{TeamID: teamID, TeamAlias: alias, Metadata: map[string]any{"source": "proliferate"}})
	if err != nil {
		var ae *APIError
		if errors.As(err, &ae) && (ae.Status == http.StatusBadRequest || ae.Status == http.StatusConflict) && duplicateMessage(ae.Message) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// KeyRequest is a /key/generate request.
type KeyRequest struct {
	TeamID   string
	UserID   string
	KeyAlias string
	// Duration is the key's lifetime (rendered as LiteLLM's "30s", "15m",
	// "24h"); 0: no expiry.
	Duration time.Duration
	// MaxBudgetUSDMicros is the key's spend limit in dollars; 0: none.
	MaxBudgetUSDMicros int64
	Metadata           map[string]any
}

// GeneratedKey is /key/generate's answer.
type GeneratedKey struct {
	// Key is the secret ("sk-…"). Never logged.
	Key       string
	Expires   time.Time
	TeamID    string
	UserID    string
	KeyAlias  string
	MaxBudget *float64
}

// FormatDuration renders d as a LiteLLM duration string in the largest
// exact unit among hours, minutes and seconds ("24h", "15m", "90s").
func FormatDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return ""
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	default:
		return strconv.FormatInt(int64(math.Ceil(d.Seconds())), 10) + "s"
	}
}

// GenerateKey creates a virtual key (POST /key/generate).
func (c *Client) GenerateKey(ctx context.Context, r KeyRequest) (GeneratedKey, error) {
	body := map[string]any{
		"team_id":   r.TeamID,
		"user_id":   r.UserID,
		"key_alias": r.KeyAlias,
	}
	if d := FormatDuration(r.Duration); d != "" {
		body["duration"] = d
	}
	if r.MaxBudgetUSDMicros > 0 {
		body["max_budget"] = float64(r.MaxBudgetUSDMicros) / 1e6
	}
	if len(r.Metadata) > 0 {
		body["metadata"] = r.Metadata
	}
	var out struct {
		Key       string   `json:"key"`
		Expires   *string  `json:"expires"`
		TeamID    *string  `json:"team_id"`
		UserID    *string  `json:"user_id"`
		KeyAlias  *string  `json:"key_alias"`
		MaxBudget *float64 `json:"max_budget"`
	}
	if err := c.do(ctx, http.MethodPost, EndpointKeyGenerate, nil, body, &out); err != nil {
		return GeneratedKey{}, err
	}
	if out.Key == "" {
		return GeneratedKey{}, fmt.Errorf("litellm: POST %s: answer has no key", EndpointKeyGenerate)
	}
	g := GeneratedKey{Key: out.Key, MaxBudget: out.MaxBudget, TeamID: Deref(out.TeamID), UserID: Deref(out.UserID), KeyAlias: Deref(out.KeyAlias)}
	if out.Expires != nil && *out.Expires != "" {
		t, err := ParseTime(*out.Expires)
		if err != nil {
			return GeneratedKey{}, fmt.Errorf("litellm: POST %s: expires: %w", EndpointKeyGenerate, err)
		}
		g.Expires = t
	}
	return g, nil
}

// Deref is *s, or "" for nil.
func Deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// DeleteKeys deletes every key with one of the aliases (POST /key/delete
// {"key_aliases": […]}). A 404 (nothing to delete) is success.
func (c *Client) DeleteKeys(ctx context.Context, aliases []string) error {
	if len(aliases) == 0 {
		return nil
	}
	err := c.do(ctx, http.MethodPost, EndpointKeyDelete, nil, map[string]any{"key_aliases": aliases}, nil)
	if IsStatus(err, http.StatusNotFound) {
		return nil
	}
	return err
}

// SpendLog is one row of LiteLLM's spend logs (LiteLLM_SpendLogs).
type SpendLog struct {
	RequestID         string          `json:"request_id"`
	CallType          string          `json:"call_type,omitempty"`
	APIKey            string          `json:"api_key,omitempty"` // hashed token
	Spend             float64         `json:"spend"`
	TotalTokens       int64           `json:"total_tokens"`
	PromptTokens      int64           `json:"prompt_tokens"`
	CompletionTokens  int64           `json:"completion_tokens"`
	StartTime         string          `json:"startTime"`
	EndTime           string          `json:"endTime,omitempty"`
	Model             string          `json:"model"`
	ModelGroup        *string         `json:"model_group,omitempty"`
	CustomLLMProvider *string         `json:"custom_llm_provider,omitempty"`
	User              *string         `json:"user,omitempty"` // the key's user_id
	TeamID            *string         `json:"team_id,omitempty"`
	EndUser           *string         `json:"end_user,omitempty"`
	Status            *string         `json:"status,omitempty"`
	Metadata          json.RawMessage `json:"metadata,omitempty"`
}

// SpendLogsPage is one page of /spend/logs/v2.
type SpendLogsPage struct {
	Data       []SpendLog `json:"data"`
	Total      int        `json:"total"`
	Page       int        `json:"page"`
	PageSize   int        `json:"page_size"`
	TotalPages int        `json:"total_pages"`
}

// SpendLogsQuery selects spend logs: a team and an inclusive time range
// (second resolution; LiteLLM answers newest first).
type SpendLogsQuery struct {
	TeamID   string
	Start    time.Time
	End      time.Time
	Page     int // from 1
	PageSize int // ≤ SpendLogsMaxPageSize
}

// SpendLogs fetches one page of GET /spend/logs/v2.
func (c *Client) SpendLogs(ctx context.Context, q SpendLogsQuery) (SpendLogsPage, error) {
	if q.Page < 1 {
		q.Page = 1
	}
	if q.PageSize < 1 || q.PageSize > SpendLogsMaxPageSize {
		q.PageSize = SpendLogsMaxPageSize
	}
	v := url.Values{
		"start_date": {q.Start.UTC().Format(spendDateLayout)},
		"end_date":   {q.End.UTC().Format(spendDateLayout)},
		"page":       {strconv.Itoa(q.Page)},
		"page_size":  {strconv.Itoa(q.PageSize)},
	}
	if q.TeamID != "" {
		v.Set("team_id", q.TeamID)
	}
	var out SpendLogsPage
	if err := c.do(ctx, http.MethodGet, EndpointSpendLogs, v, nil, &out); err != nil {
		return SpendLogsPage{}, err
	}
	return out, nil
}

// ParseTime parses LiteLLM's timestamps: ISO 8601 with or without a zone
// (no zone = UTC, as LiteLLM stores them), truncated to microseconds.
func ParseTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC().Truncate(time.Microsecond), nil
		}
	}
	return time.Time{}, fmt.Errorf("litellm: unparseable time %q", s)
}
