// Package actions is how agents act on external services (Linear, Sentry,
// Slack, any MCP server) under a per-action policy: allow, deny or
// require a person's approval (actions.md).
//
// Every catalog and execution path goes through one interface, Source:
// provider sources (code-defined adapters over REST or GraphQL, in
// internal/actions/providers/...) and MCP connector sources (tools
// discovered over streamable HTTP, internal/actions/mcp). The gateway lists
// and executes without knowing which kind a source is.
//
// This file is the contract shared by the sources, the mode cascade
// (modes.go), parameter validation and definition hashing (schema.go) and
// result shaping (results.go).
package actions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// RiskLevel is a static hint on an action: it only picks the inferred
// default mode when no explicit mode is set. Enforcement is by Mode.
type RiskLevel string

// Risk levels.
const (
	RiskRead   RiskLevel = "read"
	RiskWrite  RiskLevel = "write"
	RiskDanger RiskLevel = "danger"
)

// Mode is the resolved policy of one invocation.
type Mode string

// Modes.
const (
	ModeAllow           Mode = "allow"
	ModeRequireApproval Mode = "require_approval"
	ModeDeny            Mode = "deny"
)

// Definition describes one action of a source.
type Definition struct {
	// ID is the action id within its source ("create_issue").
	ID          string    `json:"id"`
	Description string    `json:"description"`
	Risk        RiskLevel `json:"risk_level"`
	// Params is the JSON Schema (draft 2020-12) of the parameters object.
	Params json.RawMessage `json:"params"`
}

// ExecContext is what a source needs to list or execute for a session.
type ExecContext struct {
	OrgID     string
	SessionID string
	// Token is the credential resolved by the platform at call time (an
	// OAuth token, a connector's API key). Never logged, never returned to
	// the sandbox.
	Token string
}

// Source is an action catalog and its executor.
type Source interface {
	// ID is "linear", "sentry", "slack" or "connector:<uuid>".
	ID() string
	DisplayName() string
	// Guide is markdown for the agent (how to use the integration).
	Guide(ctx context.Context, ec ExecContext) (string, error)
	// ListActions may reach the network (MCP tools/list).
	ListActions(ctx context.Context, ec ExecContext) ([]Definition, error)
	// Execute runs actionID with params already validated against its
	// Definition.Params, returning the result as JSON. Errors are
	// *ExecError when the remote side refused or failed, ErrUnknownAction
	// for an id the source does not have.
	Execute(ctx context.Context, actionID string, params json.RawMessage, ec ExecContext) (json.RawMessage, error)
}

// ErrUnknownAction reports an action id a source does not have.
var ErrUnknownAction = errors.New("actions: unknown action")

// ExecError is a failed execution on the remote side: its message is safe
// to show the agent (no credentials).
type ExecError struct {
	// Status is the remote HTTP status (0 when none: timeout, transport).
	Status  int
	Message string
	Err     error
}

func (e *ExecError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("actions: remote error %d: %s", e.Status, e.Message)
	}
	return "actions: " + e.Message
}

func (e *ExecError) Unwrap() error { return e.Err }
