// Package runsessions implements the run pipeline's sessions (runs.Sessions)
// over the gateway client, so the client itself does not depend on the run
// pipeline.
package runsessions

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/runs"
)

// Sessions implements runs.Sessions over the gateway with a service
// token: a run's session is an automation session (client type automation,
// sandbox started immediately) created with the run's idempotency key, its
// prompt is sent once per key, and its state is the gateway's status.
type Sessions struct {
	C *client.Client
}

var _ runs.Sessions = (*Sessions)(nil)

// New returns the run pipeline's sessions over c (c.Token must be a
// service token).
func New(c *client.Client) *Sessions { return &Sessions{C: c} }

// rejected wraps permanent refusals so the run fails instead of retrying.
func rejected(err error) error {
	var e *client.Error
	if errors.As(err, &e) && e.Permanent() {
		return fmt.Errorf("%w: %w", runs.ErrSessionRejected, err)
	}
	return err
}

// scoped returns a client whose lookups are scoped to orgID.
func (r *Sessions) scoped(orgID string) *client.Client { return r.C.ForOrg(orgID) }

// CreateSession implements runs.Sessions.
func (r *Sessions) CreateSession(ctx context.Context, req runs.SessionRequest) (string, error) {
	run, auto := req.RunID, req.AutomationID
	cr := protocol.CreateSessionRequest{
		OrgID: req.OrgID, ConfigurationID: req.ConfigurationID, SessionType: "automation",
		ClientType: "automation", SandboxMode: "immediate", ModelID: req.ModelID, Title: req.Title,
		RunID: &run, IdempotencyKey: req.IdempotencyKey,
	}
	if auto != "" {
		cr.AutomationID = &auto
	}
	if req.TriggeredBy != nil {
		cr.ClientMetadata = map[string]any{"triggered_by": *req.TriggeredBy}
	}
	s, err := r.scoped(req.OrgID).CreateSession(ctx, cr)
	if err != nil {
		return "", rejected(fmt.Errorf("create session of run %s: %w", req.RunID, err))
	}
	return s.ID, nil
}

// SendPrompt implements runs.Sessions.
func (r *Sessions) SendPrompt(ctx context.Context, orgID, sessionID, prompt, idempotencyKey string) error {
	if _, err := r.scoped(orgID).PostMessage(ctx, sessionID, prompt, idempotencyKey); err != nil {
		return rejected(fmt.Errorf("prompt session %s: %w", sessionID, err))
	}
	return nil
}

// SessionState implements runs.Sessions; a missing session is reported as
// gone, not as an error.
func (r *Sessions) SessionState(ctx context.Context, orgID, sessionID string) (runs.SessionState, error) {
	st, err := r.scoped(orgID).Status(ctx, sessionID)
	var e *client.Error
	if errors.As(err, &e) && e.Status == http.StatusNotFound {
		return runs.SessionState{}, nil
	}
	if err != nil {
		return runs.SessionState{}, fmt.Errorf("status of session %s: %w", sessionID, err)
	}
	return runs.SessionState{Exists: true, Status: st.Status, SandboxAlive: st.SandboxAlive}, nil
}
