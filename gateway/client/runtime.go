package client

import (
	"context"
	"net/http"

	"github.com/proliferate/proliferate/gateway/protocol"
)

// Start asks the gateway to start the session's runtime now (returns
// before it is ready).
func (c *Client) Start(ctx context.Context, sessionID string) error {
	_, err := c.do(ctx, http.MethodPost, sessionPath(sessionID, "/start"), struct{}{}, nil, nil)
	return err
}

// Pause snapshots and stops the session's sandbox and marks it paused
// (a manual pause). ErrNotFound: no such session; ErrConflict: it has
// ended.
func (c *Client) Pause(ctx context.Context, sessionID string) (protocol.Session, error) {
	return c.PauseWithReason(ctx, sessionID, "")
}

// PauseWithReason pauses the session recording why: credit_limit,
// payment_failed or overage_cap (service credentials only; "" is a manual
// pause).
func (c *Client) PauseWithReason(ctx context.Context, sessionID, reason string) (protocol.Session, error) {
	var s protocol.Session
	_, err := c.do(ctx, http.MethodPost, sessionPath(sessionID, "/pause"), protocol.PauseRequest{Reason: reason}, nil, &s)
	return s, err
}

// Snapshot snapshots the session's running sandbox and returns the id.
func (c *Client) Snapshot(ctx context.Context, sessionID string) (string, error) {
	var out protocol.SnapshotResponse
	_, err := c.do(ctx, http.MethodPost, sessionPath(sessionID, "/snapshot"), struct{}{}, nil, &out)
	return out.SnapshotID, err
}

// SessionRuntime is the dashboard API's view of live sessions
// (api/sessions.Runtime: Start, Pause, Snapshot by org and session) over a
// client holding a service credential; calls are scoped to the org.
type SessionRuntime struct {
	C *Client
}

// NewSessionRuntime returns the API's runtime over c (a service credential).
func NewSessionRuntime(c *Client) *SessionRuntime { return &SessionRuntime{C: c} }

func (r *SessionRuntime) scoped(orgID string) *Client { return r.C.ForOrg(orgID) }

// Start implements api/sessions.Runtime.
func (r *SessionRuntime) Start(ctx context.Context, orgID, sessionID string) error {
	return r.scoped(orgID).Start(ctx, sessionID)
}

// Pause implements api/sessions.Runtime.
func (r *SessionRuntime) Pause(ctx context.Context, orgID, sessionID string) error {
	_, err := r.scoped(orgID).Pause(ctx, sessionID)
	return err
}

// Snapshot implements api/sessions.Runtime.
func (r *SessionRuntime) Snapshot(ctx context.Context, orgID, sessionID string) (string, error) {
	return r.scoped(orgID).Snapshot(ctx, sessionID)
}
