package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
)

// authTransport sets the auth header on every request, resolving the
// secret at that moment, and records the HTTP status of failures for the
// caller's ExecError.
type authTransport struct {
	base http.RoundTripper
	auth Auth
}

type ctxKey int

const (
	tokenKey ctxKey = iota
	statusKey
)

// withToken carries the ExecContext's token to the transport (used when
// Auth.Secret is nil).
func withToken(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return context.WithValue(ctx, tokenKey, token)
}

// statusRecorder keeps the last non-2xx status seen by one operation.
type statusRecorder struct {
	status    atomic.Int32
	responded atomic.Bool // any HTTP response at all
}

// withStatus attaches a recorder unless ctx already has one.
func withStatus(ctx context.Context) (context.Context, *statusRecorder) {
	if r, ok := ctx.Value(statusKey).(*statusRecorder); ok {
		return ctx, r
	}
	r := &statusRecorder{}
	return context.WithValue(ctx, statusKey, r), r
}

func statusFrom(ctx context.Context) int {
	if r, ok := ctx.Value(statusKey).(*statusRecorder); ok {
		return int(r.status.Load())
	}
	return 0
}

// errSecret reports a secret that could not be resolved.
var errSecret = errors.New("mcp: connector secret unavailable")

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if t.auth.Header != "" {
		var secret string
		if t.auth.Secret != nil {
			v, err := t.auth.Secret(ctx)
			if err != nil {
				// The resolver's error may name the secret key, never its value.
				return nil, fmt.Errorf("%w: %v", errSecret, err)
			}
			secret = v
		} else if v, ok := ctx.Value(tokenKey).(string); ok {
			secret = v
		}
		if secret == "" {
			return nil, fmt.Errorf("%w: empty", errSecret)
		}
		if t.auth.Prefix != "" {
			secret = t.auth.Prefix + " " + secret
		}
		req = req.Clone(ctx)
		req.Header.Set(t.auth.Header, secret)
	}
	resp, err := t.base.RoundTrip(req)
	if r, ok := ctx.Value(statusKey).(*statusRecorder); ok && err == nil {
		r.responded.Store(true)
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			r.status.Store(int32(resp.StatusCode))
		}
	}
	return resp, err
}
