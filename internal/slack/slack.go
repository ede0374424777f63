// Package slack is a small client for the Slack Web API methods the platform
// posts with: conversations.open (a DM channel with a user) and
// chat.postMessage.
//
// Wire format: POST {SLACK_API_URL}/{method} with a JSON body and the bot token
// as `Authorization: Bearer`; Slack answers HTTP 200 with an envelope
// {"ok": true, …} or {"ok": false, "error": "<code>"}.
//
// Errors are classified for the caller (the notifier decides between retrying
// a record and giving up on it):
//
//   - retryable: network errors, timeouts, HTTP 5xx, HTTP 429 (rate limited,
//     with the Retry-After it sent) and the few envelope codes Slack documents
//     as transient (internal_error, fatal_error, service_unavailable,
//     request_timeout, ratelimited);
//   - permanent: every other {"ok": false} code — channel_not_found,
//     not_in_channel, invalid_auth, account_inactive, token_revoked,
//     missing_scope, … — and other 4xx answers. Retrying cannot fix them.
//
// A 429 whose Retry-After is short (≤ Options.MaxRetryAfter) is waited out
// and retried inside the call (at most Options.RateLimitRetries times), as
// Slack asks; longer waits are returned to the caller as a retryable error.
//
// Each HTTP request has its own timeout (10 s by default). The token is never
// logged and never appears in an error.
package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Options configure a Client.
type Options struct {
	// BaseURL is the Web API base, e.g. https://slack.com/api (SLACK_API_URL).
	BaseURL string
	// HTTPClient sends the requests (default: a new http.Client).
	HTTPClient *http.Client
	// Timeout bounds each HTTP request (default 10 s).
	Timeout time.Duration
	// MaxRetryAfter is the longest Retry-After waited out inside a call
	// (default 30 s); RateLimitRetries how many times (default 2).
	MaxRetryAfter    time.Duration
	RateLimitRetries int
}

// Client calls the Slack Web API. It is safe for concurrent use.
type Client struct {
	base        string
	hc          *http.Client
	timeout     time.Duration
	maxWait     time.Duration
	rateRetries int
}

// New returns a client for o.BaseURL.
func New(o Options) *Client {
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.MaxRetryAfter <= 0 {
		o.MaxRetryAfter = 30 * time.Second
	}
	if o.RateLimitRetries < 0 {
		o.RateLimitRetries = 0
	} else if o.RateLimitRetries == 0 {
		o.RateLimitRetries = 2
	}
	return &Client{base: strings.TrimRight(o.BaseURL, "/"), hc: o.HTTPClient, timeout: o.Timeout,
		maxWait: o.MaxRetryAfter, rateRetries: o.RateLimitRetries}
}

// Error is a failed Web API call.
type Error struct {
	// Method is the API method, e.g. chat.postMessage.
	Method string
	// Code is Slack's error code ({"ok": false, "error": code}), or
	// "http_<status>" for an HTTP failure, or "network" for a transport error.
	Code string
	// Status is the HTTP status (0 for a transport error).
	Status int
	// RetryAfter is what a 429 asked to wait.
	RetryAfter time.Duration
	// Retryable is true when trying again later may succeed.
	Retryable bool
	// Err is the underlying transport error, if any.
	Err error
}

func (e *Error) Error() string {
	kind := "permanent"
	if e.Retryable {
		kind = "retryable"
	}
	msg := fmt.Sprintf("slack %s: %s (%s)", e.Method, e.Code, kind)
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(", retry after %s", e.RetryAfter)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether err is a Slack error worth retrying (or a
// transport failure, or a context deadline). Errors that are not from this
// package are treated as retryable.
func Retryable(err error) bool {
	var se *Error
	if errors.As(err, &se) {
		return se.Retryable
	}
	return err != nil
}

// Permanent reports whether err is a Slack error that retrying cannot fix.
func Permanent(err error) bool {
	var se *Error
	return errors.As(err, &se) && !se.Retryable
}

// ErrorCode returns the Slack error code of err ("" when it is not a Slack
// error).
func ErrorCode(err error) string {
	var se *Error
	if errors.As(err, &se) {
		return se.Code
	}
	return ""
}

// transientCodes are {"ok": false} codes Slack documents as temporary.
var transientCodes = map[string]bool{
	"internal_error": true, "fatal_error": true, "service_unavailable": true,
	"request_timeout": true, "ratelimited": true,
}

// Block is one Block Kit block, e.g. {"type": "section", "text": {…}}.
type Block map[string]any

// Section is a section block with mrkdwn text.
func Section(mrkdwn string) Block {
	return Block{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": mrkdwn}}
}

// Context is a context block (small grey text) with mrkdwn elements.
func Context(mrkdwn ...string) Block {
	els := make([]any, 0, len(mrkdwn))
	for _, m := range mrkdwn {
		els = append(els, map[string]any{"type": "mrkdwn", "text": m})
	}
	return Block{"type": "context", "elements": els}
}

// Escape escapes the three characters Slack's mrkdwn reserves (&, <, >) in
// text that comes from users, so it cannot inject links or mentions.
func Escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// Message is a chat.postMessage request. Text is required: it is the
// notification fallback when Blocks are set.
type Message struct {
	Channel string  `json:"channel"`
	Text    string  `json:"text"`
	Blocks  []Block `json:"blocks,omitempty"`
	// UnfurlLinks false keeps a link-heavy notification compact.
	UnfurlLinks *bool `json:"unfurl_links,omitempty"`
}

// PostResult is what chat.postMessage returns.
type PostResult struct {
	Channel string `json:"channel"`
	TS      string `json:"ts"`
}

// ConversationsOpen opens (or finds) the DM channel between the bot and
// userID and returns its id.
func (c *Client) ConversationsOpen(ctx context.Context, token, userID string) (string, error) {
	var out struct {
		Channel struct {
			ID string `json:"id"`
		} `json:"channel"`
	}
	if err := c.call(ctx, "conversations.open", token, map[string]any{"users": userID}, &out); err != nil {
		return "", err
	}
	if out.Channel.ID == "" {
		return "", &Error{Method: "conversations.open", Code: "invalid_response", Status: http.StatusOK}
	}
	return out.Channel.ID, nil
}

// ChatPostMessage posts m and returns the message timestamp (its id).
func (c *Client) ChatPostMessage(ctx context.Context, token string, m Message) (PostResult, error) {
	var out PostResult
	if m.Channel == "" || m.Text == "" {
		return out, &Error{Method: "chat.postMessage", Code: "invalid_arguments"}
	}
	if err := c.call(ctx, "chat.postMessage", token, m, &out); err != nil {
		return out, err
	}
	if out.TS == "" {
		return out, &Error{Method: "chat.postMessage", Code: "invalid_response", Status: http.StatusOK}
	}
	return out, nil
}

// call performs one API method, waiting out short rate limits.
func (c *Client) call(ctx context.Context, method, token string, body, out any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("slack %s: marshal request: %w", method, err)
	}
	for attempt := 0; ; attempt++ {
		err := c.once(ctx, method, token, raw, out)
		var se *Error
		if !errors.As(err, &se) || se.Status != http.StatusTooManyRequests ||
			attempt >= c.rateRetries || se.RetryAfter > c.maxWait {
			return err
		}
		t := time.NewTimer(se.RetryAfter)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

func (c *Client) once(ctx context.Context, method, token string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/"+method, bytes.NewReader(body))
	if err != nil {
		return &Error{Method: method, Code: "bad_request", Err: err}
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return &Error{Method: method, Code: "network", Retryable: true, Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return &Error{Method: method, Code: "network", Status: resp.StatusCode, Retryable: true, Err: err}
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		return &Error{Method: method, Code: "ratelimited", Status: resp.StatusCode, Retryable: true,
			RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	case resp.StatusCode >= 500:
		return &Error{Method: method, Code: "http_" + strconv.Itoa(resp.StatusCode), Status: resp.StatusCode, Retryable: true}
	case resp.StatusCode != http.StatusOK:
		return &Error{Method: method, Code: "http_" + strconv.Itoa(resp.StatusCode), Status: resp.StatusCode}
	}
	var env struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		// A proxy's HTML error page or a truncated body: try again later.
		return &Error{Method: method, Code: "invalid_response", Status: resp.StatusCode, Retryable: true}
	}
	if !env.OK {
		code := env.Error
		if code == "" {
			code = "unknown_error"
		}
		return &Error{Method: method, Code: code, Status: resp.StatusCode, Retryable: transientCodes[code]}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return &Error{Method: method, Code: "invalid_response", Status: resp.StatusCode, Err: err}
		}
	}
	return nil
}

// retryAfter parses Retry-After (seconds); a missing or odd value means 1 s.
func retryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return time.Second
	}
	return time.Duration(n) * time.Second
}
