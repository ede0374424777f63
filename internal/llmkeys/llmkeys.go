// Package llmkeys is the contract between sessions and the LLM proxy: every
// session's sandbox gets its own short-lived virtual key (team = the
// organization, user and alias = the session), never the real model key,
// and the key is revoked when the session pauses or stops or its
// organization runs out of credits.
//
// Two implementations: the built-in proxy (internal/llmproxy, role
// `proliferate llm-proxy`) and LiteLLM's admin API
// (internal/llmproxy/litellm).
package llmkeys

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/proliferate/proliferate/internal/billing"
)

// Key is a session's virtual key.
type Key struct {
	// Value is the secret the sandbox sends as x-api-key. Never logged.
	Value string
	// BaseURL is the Anthropic-compatible base the sandbox calls
	// ({BaseURL}/messages), ending in /v1.
	BaseURL string
	// ExpiresAt is when the key stops working on its own.
	ExpiresAt time.Time
	// MaxBudgetUSDMicros is the key's spend limit in model dollars (the
	// organization's balance at issue, before markup); 0 = unlimited.
	MaxBudgetUSDMicros int64
}

// Issuer issues and revokes virtual keys.
type Issuer interface {
	// Issue creates a key for the session (a new one per sandbox boot;
	// earlier keys of the session stay valid until revoked or expired).
	Issue(ctx context.Context, orgID, sessionID string) (Key, error)
	// RevokeSession revokes every key of the session; revoking nothing is
	// not an error.
	RevokeSession(ctx context.Context, sessionID, reason string) error
	// RevokeOrg revokes every key of the organization's sessions.
	RevokeOrg(ctx context.Context, orgID, reason string) error
}

// ErrNoCredits: the organization has no balance to spend on a key.
var ErrNoCredits = errors.New("llmkeys: the organization has no credits for LLM usage")

// BudgetUSDMicros is the model-dollar budget a balance of credits buys: the
// balance × $0.01, divided by the LLM markup (so the key cannot spend more
// credits than the organization has). Never negative.
func BudgetUSDMicros(balanceCreditMicros int64, markup int64) int64 {
	if balanceCreditMicros <= 0 || markup <= 0 {
		return 0
	}
	return balanceCreditMicros / (100 * markup)
}

// OrgBudget is the budget of a new key of orgID: BudgetUSDMicros of its
// balance; ErrNoCredits when it is exhausted or suspended or has nothing
// to spend.
func OrgBudget(ctx context.Context, q billing.Querier, orgID string) (int64, error) {
	a, err := billing.ReadAccount(ctx, q, orgID)
	if err != nil {
		return 0, err
	}
	if billing.ShouldPause(a.State) {
		return 0, fmt.Errorf("%w (organization %s is %s)", ErrNoCredits, orgID, a.State)
	}
	b := BudgetUSDMicros(a.BalanceMicros, billing.LLMMarkup)
	if b <= 0 {
		return 0, fmt.Errorf("%w (organization %s)", ErrNoCredits, orgID)
	}
	return b, nil
}
