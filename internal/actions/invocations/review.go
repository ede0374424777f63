package invocations

// review.go: connector tools whose definition changed since an admin
// reviewed them.
//
//   - Invoke records on the invocation the hash of the definition it was
//     made against (the server's current one for a reviewed tool, from
//     Sources.Drifted), the reviewed hash and, when they differ (drifted),
//     the diff of the description and input schema. Every surface that
//     shows the approval request (the action_approval_request frame, the
//     gateway's invocation routes, the org inbox) shows them, as they are
//     fields of Invocation.
//   - An approval is pinned to that definition: before anything is
//     stored, the tool's definition is fetched from its server and must
//     still be the invocation's, and the definition_hash the approver sent
//     (optional, except for "always" on a drifted invocation, where it is
//     the approver's acknowledgment of the diff) must be the invocation's;
//     otherwise *DefinitionChangedError (409) and nothing changes. A tool
//     that changes between this check and the call is the same race as at
//     invoke time, bounded by one round trip.
//   - "always" on a drifted invocation records the invocation's definition
//     as the reviewed one (the tool's tool_risk_overrides hash; the
//     definition itself is already in connector_tool_definitions, recorded
//     by the drift check) besides setting the mode to allow, so the next
//     call runs. Before, it only set allow, which the drift guard
//     downgraded again: the next call waited, without saying why.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/invocations/invocationsdb"
	"github.com/proliferate/proliferate/internal/integrations/integrationsdb"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionsdb"
)

// Drift is a connector tool checked against its review at invocation time
// (Sources.Drifted). The zero Drift is a provider action.
type Drift struct {
	// Drifted: the tool was reviewed and the server's current definition
	// is not the reviewed one (or the server no longer lists it).
	Drifted bool
	// Current is the definition the invocation is made against: the
	// server's current one for a reviewed tool (nil when the server no
	// longer lists it), the listed one for a tool never reviewed.
	Current *actions.Definition
	// CurrentHash is actions.DefinitionHash(*Current), "" without Current.
	CurrentHash string
	// ReviewedHash is the hash an admin reviewed, "" when none did.
	ReviewedHash string
	// Diff is what changed since the review, when Drifted.
	Diff *actions.DefinitionDiff
}

// Approval is a person's decision to run a pending invocation.
type Approval struct {
	// Mode is ApproveOnce (default) or ApproveAlways.
	Mode string
	// DefinitionHash is the invocation's definition_hash as the approver
	// was shown it. Optional, except with ApproveAlways on a drifted
	// invocation (ErrDefinitionHashRequired). Ignored for provider actions,
	// which have none.
	DefinitionHash string
}

// Reasons a pending invocation waits (PendingReason).
const (
	// ReasonDefinitionChanged: a connector tool's definition changed since
	// an admin reviewed it; its allow is held for approval until the new
	// definition is approved with "always" (or reviewed anew).
	ReasonDefinitionChanged = "definition_changed"
	// ReasonPolicy: the action's resolved mode is require_approval
	// (mode_source says which level set it).
	ReasonPolicy = "policy"
)

// PendingReason says why a pending invocation waits for a person.
func PendingReason(inv Invocation) string {
	if inv.Drifted {
		return ReasonDefinitionChanged
	}
	return ReasonPolicy
}

var (
	// ErrDefinitionChanged: the tool is no longer the definition the
	// invocation was made against, or the approver was shown another one
	// (errors.Is of every *DefinitionChangedError): 409.
	ErrDefinitionChanged = errors.New("invocations: the tool's definition changed")
	// ErrDefinitionHashRequired: "always" on a drifted invocation without
	// the definition_hash the approver was shown: 422.
	ErrDefinitionHashRequired = errors.New("invocations: definition_hash is required to approve a changed tool with mode always")
	// ErrDefinitionUnverifiable: the tool's current definition could not
	// be fetched to check the approval against it (the MCP server is
	// unreachable): 502, nothing stored; retry.
	ErrDefinitionUnverifiable = errors.New("invocations: the tool's current definition could not be checked")
)

// DefinitionChangedError refuses an approval whose definition is not the
// tool's current one. Nothing was stored.
type DefinitionChangedError struct {
	// InvocationHash is the invocation's definition_hash ("" when the
	// server did not list the tool at invocation time).
	InvocationHash string `json:"invocation_hash"`
	// CurrentHash is the hash of the server's definition now, "" when it
	// no longer lists the tool.
	CurrentHash string `json:"current_hash"`
	// ApprovedHash is the definition_hash the approver sent, if any.
	ApprovedHash string `json:"approved_hash,omitempty"`
}

func (e *DefinitionChangedError) Error() string {
	if e.ApprovedHash != "" && e.ApprovedHash != e.InvocationHash {
		return "the approval is for definition " + e.ApprovedHash + ", the invocation was made against " + e.InvocationHash
	}
	if e.CurrentHash == "" {
		return "the server no longer lists the tool the invocation was made against"
	}
	return "the tool changed since the invocation was made: its definition is now " + e.CurrentHash
}

// Is makes errors.Is(err, ErrDefinitionChanged) hold.
func (e *DefinitionChangedError) Is(target error) bool { return target == ErrDefinitionChanged }

// checkDefinition refuses an approval of a connector invocation whose tool
// is no longer the definition the invocation was made against (see the
// file comment). It reads without locking and before anything is stored:
// invocations that are not pending, overdue or not a connector tool's are
// left to resolve (ErrConflict, ErrExpired, no check).
func (s *Svc) checkDefinition(ctx context.Context, a Approver, invocationID string, ap Approval) error {
	if !isUUID(invocationID) || !isUUID(a.OrgID) {
		return nil
	}
	row, err := invocationsdb.New(s.d.Pool).OrgInvocation(ctx, invocationsdb.OrgInvocationParams{ID: invocationID, OrgID: a.OrgID})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read invocation %s: %w", invocationID, err)
	}
	inv := fromRow(row)
	if inv.Status != StatusPending || (inv.ExpiresAt != nil && !inv.ExpiresAt.After(s.now())) ||
		!strings.HasPrefix(inv.Integration, actions.ConnectorPrefix) || (inv.DefinitionHash == nil && !inv.Drifted) {
		return nil // resolve answers; rows from before definition hashes were recorded are not checked
	}
	want := ""
	if inv.DefinitionHash != nil {
		want = *inv.DefinitionHash
	}
	if ap.Mode == ApproveAlways && inv.Drifted && ap.DefinitionHash == "" {
		return ErrDefinitionHashRequired
	}
	if s.d.Sources == nil {
		return fmt.Errorf("%w: no action sources configured", ErrDefinitionUnverifiable)
	}
	cur, listed, err := s.d.Sources.CurrentDefinition(ctx, s.sessionOf(ctx, inv), inv.Integration, inv.Action)
	switch {
	case errors.Is(err, ErrUnknownIntegration):
		listed = false // the connector is gone or disabled: the tool is not what was shown
	case err != nil:
		return fmt.Errorf("%w: %s:%s: %v", ErrDefinitionUnverifiable, inv.Integration, inv.Action, err)
	}
	e := &DefinitionChangedError{InvocationHash: want, ApprovedHash: ap.DefinitionHash}
	if listed {
		e.CurrentHash = actions.DefinitionHash(cur)
	}
	same := (want == "" && !listed) || (want != "" && listed && actions.MatchesHash(cur, want))
	if !same || (ap.DefinitionHash != "" && ap.DefinitionHash != want) {
		s.d.Log.InfoContext(ctx, "approval refused: tool definition changed", "invocation_id", inv.ID,
			"source_id", inv.Integration, "action_id", inv.Action, "invocation_hash", want,
			"current_hash", e.CurrentHash, "approved_hash", ap.DefinitionHash)
		return e
	}
	return nil
}

// sessionOf is the session an invocation's source is built for.
func (s *Svc) sessionOf(ctx context.Context, inv Invocation) sessions.Session {
	sess := sessions.Session{ID: inv.SessionID, OrgID: inv.OrgID, AutomationID: inv.AutomationID, RunID: inv.RunID}
	title, err := sessionsdb.New(s.d.Pool).SessionTitle(ctx, inv.SessionID)
	if err == nil {
		sess.Title = title
	} else {
		s.d.Log.WarnContext(ctx, "read session of invocation", "invocation_id", inv.ID, "error", err)
	}
	return sess
}

// acceptReview records a drifted invocation's definition as the reviewed
// one of its connector tool (the hash in tool_risk_overrides; the mode
// stays). A tool whose review an admin removed meanwhile is left
// unreviewed. updated_at is kept: the hash is not part of the connector's
// MCP configuration, so its cached source stays valid.
func acceptReview(ctx context.Context, tx pgx.Tx, inv Invocation) error {
	if !inv.Drifted || inv.DefinitionHash == nil || !strings.HasPrefix(inv.Integration, actions.ConnectorPrefix) {
		return nil
	}
	connID := strings.TrimPrefix(inv.Integration, actions.ConnectorPrefix)
	if !isUUID(connID) {
		return nil
	}
	if err := integrationsdb.New(tx).AcceptToolReview(ctx, integrationsdb.AcceptToolReviewParams{
		ID: connID, OrgID: inv.OrgID, Tool: inv.Action, Hash: *inv.DefinitionHash}); err != nil {
		return fmt.Errorf("record review of %s:%s: %w", inv.Integration, inv.Action, err)
	}
	return nil
}

// diffJSON is the stored form of a diff (NULL without one).
func diffJSON(d *actions.DefinitionDiff) ([]byte, error) {
	if d == nil {
		return nil, nil
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode definition diff: %w", err)
	}
	return b, nil
}

// scanDiff reads a stored diff (nil for NULL; an unreadable one is dropped
// rather than failing the read of the invocation).
func scanDiff(raw []byte) *actions.DefinitionDiff {
	if len(raw) == 0 {
		return nil
	}
	var d actions.DefinitionDiff
	if json.Unmarshal(raw, &d) != nil {
		return nil
	}
	return &d
}

// validate checks params against def's schema (*actions.ParamsError).
func (s *Svc) validate(def actions.Definition, params json.RawMessage) error {
	if s.d.Validator != nil {
		return s.d.Validator.Validate(def, params)
	}
	return actions.Validate(def, params)
}
