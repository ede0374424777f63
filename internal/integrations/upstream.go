package integrations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// maxUpstreamBody bounds what is read from a third party's response.
const maxUpstreamBody = 4 << 20

// defaultUpstreamTimeout bounds one call to a third party when the caller's
// context has no earlier deadline.
const defaultUpstreamTimeout = 20 * time.Second

// Token is a live credential. Its String and LogValue hide the value, so a
// token passed to a logger or a format verb by mistake prints as REDACTED.
type Token struct {
	Value     string
	ExpiresAt time.Time // zero when the provider did not say
}

func (t Token) String() string { return "REDACTED" }

// GoString hides the value from %#v as well.
func (t Token) GoString() string { return "integrations.Token{REDACTED}" }

// LogValue implements slog.LogValuer.
func (t Token) LogValue() slog.Value { return slog.StringValue("REDACTED") }

// upstream performs JSON calls to one third party and maps failures to
// *UpstreamError.
type upstream struct {
	provider string
	client   *http.Client
}

// do sends req and decodes a 2xx JSON body into out (nil: discard). Any other
// status becomes an *UpstreamError; errCode extracts the provider's error code
// from an error body.
func (u upstream) do(ctx context.Context, op string, req *http.Request, out any, errCode func([]byte) string) (int, error) {
	return u.doWithHeader(ctx, op, req, out, errCode, "", nil)
}

// doWithHeader is do that also copies one response header into dst.
func (u upstream) doWithHeader(ctx context.Context, op string, req *http.Request, out any, errCode func([]byte) string,
	header string, dst *string) (int, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultUpstreamTimeout)
		defer cancel()
	}
	req = req.WithContext(ctx)
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := u.client.Do(req)
	if err != nil {
		// Only the transport cause is kept: no URL, header or body.
		cause := errors.Unwrap(err)
		if cause == nil {
			cause = err
		}
		return 0, &UpstreamError{Provider: u.provider, Op: op, Err: fmt.Errorf("%w: %v", ErrUpstreamUnavailable, cause)}
	}
	defer resp.Body.Close()
	if dst != nil {
		*dst = resp.Header.Get(header)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody))
	if err != nil {
		return resp.StatusCode, &UpstreamError{Provider: u.provider, Op: op, Status: resp.StatusCode, Err: ErrUpstreamUnavailable}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if out != nil {
			if err := json.Unmarshal(body, out); err != nil {
				return resp.StatusCode, &UpstreamError{Provider: u.provider, Op: op, Status: resp.StatusCode, Code: "malformed_response", Err: ErrUpstreamUnavailable}
			}
		}
		return resp.StatusCode, nil
	}
	ue := &UpstreamError{Provider: u.provider, Op: op, Status: resp.StatusCode}
	if errCode != nil {
		ue.Code = errCode(body)
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		ue.Err = ErrUpstreamUnauthorized
	case resp.StatusCode == http.StatusNotFound:
		ue.Err = ErrUpstreamNotFound
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		ue.Err = ErrUpstreamUnavailable
	default:
		ue.Err = ErrUpstreamRejected
	}
	return resp.StatusCode, ue
}

// sanitizeCode keeps an upstream error code short and printable, since it is
// copied into errors and logs.
func sanitizeCode(s string) string {
	if len(s) > 80 {
		s = s[:80]
	}
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}
