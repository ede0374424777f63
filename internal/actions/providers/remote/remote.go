// Package remote is the HTTP plumbing shared by the provider action sources
// (Linear, Sentry, Slack): one place that enforces what every call to a
// third party must do.
//
//   - Every request has its own timeout (30 s by default, as actions.md
//     requires of every adapter), layered under the caller's context.
//   - A response body is read up to a bound (5 MiB by default); a larger
//     answer is an error rather than an unbounded allocation.
//   - Transport failures, timeouts and oversized answers become
//     *actions.ExecError with Status 0; the caller maps HTTP statuses and
//     provider error envelopes to *actions.ExecError with the status.
//   - The credential never leaves the Authorization header: it is never
//     logged, and any message built from a remote answer passes through
//     Scrub, which removes the token should the provider echo it back.
//
// Parameters arrive validated against the action's JSON Schema, but sources
// still decode them strictly (unknown fields and wrong types rejected) with
// DecodeParams. A decoding failure is not a remote failure, so it is not an
// *actions.ExecError: it is an *actions.ParamsError (the type schema
// validation returns, answered 400) that also matches ErrInvalidParams.
package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/proliferate/proliferate/internal/actions"
)

// Defaults every provider source applies.
const (
	DefaultTimeout          = 30 * time.Second
	DefaultMaxResponseBytes = 5 << 20
)

// ErrInvalidParams reports parameters a source cannot use (a wrong type, an
// unknown field, a missing required value, a path segment such as ".."). It
// is the caller's fault, not the remote side's.
var ErrInvalidParams = errors.New("actions: invalid params")

// Options configure a Client.
type Options struct {
	// Provider names the remote side in messages and logs ("linear").
	Provider string
	// HTTPClient sends the requests (default: a new http.Client).
	HTTPClient *http.Client
	// Timeout bounds each request (default DefaultTimeout).
	Timeout time.Duration
	// MaxResponseBytes bounds each response body read (default
	// DefaultMaxResponseBytes).
	MaxResponseBytes int64
	// Logger receives one debug line per call (default: discard).
	Logger *slog.Logger
}

// Client sends requests to one provider. It is safe for concurrent use.
type Client struct {
	provider string
	hc       *http.Client
	timeout  time.Duration
	max      int64
	log      *slog.Logger
}

// New returns a client with o's defaults filled in.
func New(o Options) *Client {
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Client{provider: o.Provider, hc: o.HTTPClient, timeout: o.Timeout, max: o.MaxResponseBytes, log: o.Logger}
}

// Timeout is the per-request timeout in force.
func (c *Client) Timeout() time.Duration { return c.timeout }

// Request is one call.
type Request struct {
	// Action is the action id, for logs.
	Action string
	Method string
	URL    string
	// Body is marshalled as JSON when non-nil.
	Body any
	// Authorization is the full header value ("Bearer …"); Token is the raw
	// credential, used only to scrub messages.
	Authorization string
	Token         string
}

// Response is a complete, bounded answer of any HTTP status.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends r and reads the whole answer. Errors are *actions.ExecError with
// Status 0 (transport failure, timeout, cancelled, answer too large); an
// answer of any HTTP status is returned for the caller to map.
func (c *Client) Do(ctx context.Context, r Request) (Response, error) {
	start := time.Now()
	var body io.Reader
	if r.Body != nil {
		raw, err := json.Marshal(r.Body)
		if err != nil {
			return Response{}, fmt.Errorf("%s %s: marshal request: %w", c.provider, r.Action, err)
		}
		body = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.Method, r.URL, body)
	if err != nil {
		return Response{}, &actions.ExecError{Message: c.provider + ": cannot build request", Err: err}
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
	}
	if r.Authorization != "" {
		req.Header.Set("Authorization", r.Authorization)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return Response{}, c.transportError(ctx, r, err, start)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.max+1))
	if err != nil {
		return Response{}, c.transportError(ctx, r, err, start)
	}
	if int64(len(data)) > c.max {
		c.log.WarnContext(ctx, "provider answer too large", "provider", c.provider, "action", r.Action,
			"status", resp.StatusCode, "limit_bytes", c.max)
		return Response{}, &actions.ExecError{
			Message: fmt.Sprintf("%s: response larger than %d bytes", c.provider, c.max)}
	}
	c.log.DebugContext(ctx, "provider call", "provider", c.provider, "action", r.Action,
		"method", r.Method, "status", resp.StatusCode, "duration", time.Since(start))
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: data}, nil
}

// transportError maps a failed exchange to an ExecError with Status 0. Only
// the cause is kept (not the *url.Error, whose text repeats the URL).
func (c *Client) transportError(ctx context.Context, r Request, err error, start time.Time) error {
	var cause error = err
	var ue *url.Error
	if errors.As(err, &ue) {
		cause = ue.Err
	}
	msg := c.provider + ": request failed"
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		msg = fmt.Sprintf("%s: no answer within %s", c.provider, c.timeout)
		cause = context.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		msg = c.provider + ": request cancelled"
		cause = context.Canceled
	}
	c.log.WarnContext(ctx, "provider call failed", "provider", c.provider, "action", r.Action,
		"method", r.Method, "duration", time.Since(start), "error", Scrub(cause.Error(), r.Token))
	return &actions.ExecError{Message: msg, Err: scrubbed{cause, r.Token}}
}

// scrubbed wraps an error whose text is scrubbed of the token while
// errors.Is still sees the cause.
type scrubbed struct {
	err   error
	token string
}

func (s scrubbed) Error() string { return Scrub(s.err.Error(), s.token) }
func (s scrubbed) Unwrap() error { return s.err }

// Scrub removes token (and its Bearer form) from s.
func Scrub(s, token string) string {
	if len(token) < 4 {
		return s
	}
	return strings.ReplaceAll(s, token, "[REDACTED]")
}

// Truncate shortens s to at most n bytes on a rune boundary.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// DecodeParams decodes params into dst strictly: an object, no unknown
// fields, matching types. Failures are InvalidParams errors.
func DecodeParams(params json.RawMessage, dst any) error {
	p := bytes.TrimSpace(params)
	if len(p) == 0 || bytes.Equal(p, []byte("null")) {
		p = []byte("{}")
	}
	if p[0] != '{' {
		return InvalidParams("", "params must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return InvalidParams("/"+strings.ReplaceAll(te.Field, ".", "/"), "must be of type "+jsonType(te.Type.Kind().String())+", not "+te.Value)
		}
		return InvalidParams("", strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return InvalidParams("", "trailing data after the params object")
	}
	return nil
}

func jsonType(kind string) string {
	switch {
	case kind == "string":
		return "string"
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "integer"
	case kind == "slice":
		return "array"
	case kind == "bool":
		return "boolean"
	default:
		return kind
	}
}

// InvalidParams is the error for an unusable parameter at a JSON pointer
// ("" for params itself). It matches both errors.Is(err, ErrInvalidParams)
// and errors.As(err, **actions.ParamsError), so the gateway answers it
// with the same 400 body as a schema validation failure.
func InvalidParams(pointer, msg string) error {
	return &paramsError{pe: &actions.ParamsError{Details: []actions.ParamDetail{{Pointer: pointer, Message: msg}}}}
}

type paramsError struct{ pe *actions.ParamsError }

func (e *paramsError) Error() string   { return e.pe.Error() }
func (e *paramsError) Unwrap() []error { return []error{ErrInvalidParams, e.pe} }

// Required reports a missing required parameter.
func Required(name string) error {
	return InvalidParams("/"+name, "is required")
}

// Segment escapes v for use as one URL path segment. Empty values and the
// dot segments "." and ".." are rejected: escaping leaves dots alone, and a
// normalising proxy would otherwise resolve them and change the path.
func Segment(name, v string) (string, error) {
	switch v {
	case "":
		return "", Required(name)
	case ".", "..":
		return "", InvalidParams("/"+name, fmt.Sprintf("must not be %q", v))
	}
	return url.PathEscape(v), nil
}

// SourceOptions configure a provider source (every provider takes the
// same).
type SourceOptions struct {
	// BaseURL is the provider's API base (Linear: the GraphQL endpoint);
	// empty means the provider's public default.
	BaseURL    string
	HTTPClient *http.Client
	// Timeout bounds each call (default DefaultTimeout).
	Timeout time.Duration
	// MaxResponseBytes bounds each answer (default DefaultMaxResponseBytes).
	MaxResponseBytes int64
	Logger           *slog.Logger
}

// Client returns the base URL (defaultBase when unset, without a trailing
// slash) and the client of provider.
func (o SourceOptions) Client(provider, defaultBase string) (string, *Client) {
	base := o.BaseURL
	if base == "" {
		base = defaultBase
	}
	return strings.TrimRight(base, "/"), New(Options{Provider: provider, HTTPClient: o.HTTPClient, Timeout: o.Timeout,
		MaxResponseBytes: o.MaxResponseBytes, Logger: o.Logger})
}

// Catalog is the static half of a provider source — its identity, guide
// and action definitions — for embedding in the source.
type Catalog struct {
	SourceID, Name, GuideMD string
	Defs                    func() []actions.Definition
}

// ID implements actions.Source.
func (c Catalog) ID() string { return c.SourceID }

// DisplayName implements actions.Source.
func (c Catalog) DisplayName() string { return c.Name }

// Guide implements actions.Source.
func (c Catalog) Guide(context.Context, actions.ExecContext) (string, error) { return c.GuideMD, nil }

// ListActions implements actions.Source: a static catalog.
func (c Catalog) ListActions(context.Context, actions.ExecContext) ([]actions.Definition, error) {
	return c.Defs(), nil
}
