package litellm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/llmkeys"
	"github.com/proliferate/proliferate/internal/sessions/sessionsdb"
)

// IssuerDeps are the Issuer's dependencies.
type IssuerDeps struct {
	Client *Client
	Pool   *pgxpool.Pool
	// PublicURL is the base sandboxes call (LLM_PROXY_PUBLIC_URL, else
	// LLM_PROXY_URL); keys carry it normalized with "/v1".
	PublicURL string
	// KeyDuration is a key's lifetime (LLM_PROXY_KEY_DURATION, default 24 h).
	KeyDuration time.Duration
	// BillingEnabled caps every key at the organization's balance and
	// refuses keys to organizations without credits.
	BillingEnabled bool
	Logger         *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
}

// Issuer issues and revokes LiteLLM virtual keys (llmkeys.Issuer).
type Issuer struct {
	d       IssuerDeps
	baseURL string
}

var _ llmkeys.Issuer = (*Issuer)(nil)

// NewIssuer returns an Issuer.
func NewIssuer(d IssuerDeps) (*Issuer, error) {
	if d.Client == nil || d.Pool == nil {
		return nil, errors.New("litellm: issuer needs a client and a pool")
	}
	pub := NormalizeAdminURL(d.PublicURL)
	if pub == "" {
		return nil, errors.New("litellm: issuer needs the public proxy URL (LLM_PROXY_PUBLIC_URL or LLM_PROXY_URL)")
	}
	if d.KeyDuration <= 0 {
		d.KeyDuration = 24 * time.Hour
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	return &Issuer{d: d, baseURL: pub + "/v1"}, nil
}

// BaseURL is the Anthropic-compatible base URL keys are valid for.
func (i *Issuer) BaseURL() string { return i.baseURL }

// Issue creates the session's key: the organization's team first (once),
// then a key with team = organization, user = alias = session, the
// configured lifetime and, with billing, a budget of the organization's
// balance in model dollars.
//
// LiteLLM requires key aliases to be unique, so a session that already
// has a key (a sandbox rebooted without a pause) gets its old key deleted
// and a fresh one: the old sandbox is gone, and one live key per session
// keeps revocation by alias complete.
func (i *Issuer) Issue(ctx context.Context, orgID, sessionID string) (llmkeys.Key, error) {
	var budget int64
	if i.d.BillingEnabled {
		b, err := i.budget(ctx, orgID)
		if err != nil {
			return llmkeys.Key{}, err
		}
		budget = b
	}
	if _, err := i.d.Client.EnsureTeam(ctx, orgID, orgID); err != nil {
		return llmkeys.Key{}, fmt.Errorf("litellm: ensure team for organization %s: %w", orgID, err)
	}
	req := KeyRequest{
		TeamID:             orgID,
		UserID:             sessionID,
		KeyAlias:           sessionID,
		Duration:           i.d.KeyDuration,
		MaxBudgetUSDMicros: budget,
		Metadata:           map[string]any{"organization_id": orgID, "session_id": sessionID, "source": "proliferate"},
	}
	start := i.d.Now()
	g, err := i.d.Client.GenerateKey(ctx, req)
	var ae *APIError
	if err != nil && errors.As(err, &ae) && ae.Status == http.StatusBadRequest && duplicateMessage(ae.Message) {
		if derr := i.d.Client.DeleteKeys(ctx, []string{sessionID}); derr != nil {
			return llmkeys.Key{}, fmt.Errorf("litellm: replace key of session %s: %w", sessionID, derr)
		}
		g, err = i.d.Client.GenerateKey(ctx, req)
	}
	if err != nil {
		return llmkeys.Key{}, fmt.Errorf("litellm: generate key for session %s: %w", sessionID, err)
	}
	exp := g.Expires
	if exp.IsZero() {
		exp = start.Add(i.d.KeyDuration)
	}
	i.d.Logger.DebugContext(ctx, "generated LiteLLM session key", "org_id", orgID, "session_id", sessionID,
		"max_budget_usd_micros", budget, "duration_ms", i.d.Now().Sub(start).Milliseconds())
	return llmkeys.Key{Value: g.Key, BaseURL: i.baseURL, ExpiresAt: exp, MaxBudgetUSDMicros: budget}, nil
}

// budget is the organization's balance in model dollars (micros);
// llmkeys.ErrNoCredits when there is none to spend.
func (i *Issuer) budget(ctx context.Context, orgID string) (int64, error) {
	b, err := llmkeys.OrgBudget(ctx, i.d.Pool, orgID)
	if err != nil {
		return 0, fmt.Errorf("litellm: %w", err)
	}
	return b, nil
}

// RevokeSession deletes the session's key (alias = session id); a key
// already gone is not an error.
func (i *Issuer) RevokeSession(ctx context.Context, sessionID, reason string) error {
	if err := i.d.Client.DeleteKeys(ctx, []string{sessionID}); err != nil {
		return fmt.Errorf("litellm: revoke key of session %s (%s): %w", sessionID, reason, err)
	}
	i.d.Logger.DebugContext(ctx, "revoked LiteLLM session key", "session_id", sessionID, "reason", reason)
	return nil
}

// revokeBatch bounds the aliases of one /key/delete call.
const revokeBatch = 100

// RevokeOrg deletes the keys of every session of the organization that is
// not stopped.
func (i *Issuer) RevokeOrg(ctx context.Context, orgID, reason string) error {
	ids, err := sessionsdb.New(i.d.Pool).UnstoppedSessionIDs(ctx, orgID)
	if err != nil {
		return fmt.Errorf("litellm: list sessions of organization %s: %w", orgID, err)
	}
	var errs []string
	for start := 0; start < len(ids); start += revokeBatch {
		batch := ids[start:min(start+revokeBatch, len(ids))]
		if err := i.d.Client.DeleteKeys(ctx, batch); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("litellm: revoke keys of organization %s (%s): %s", orgID, reason, strings.Join(errs, "; "))
	}
	i.d.Logger.InfoContext(ctx, "revoked LiteLLM keys of organization", "org_id", orgID, "sessions", len(ids), "reason", reason)
	return nil
}
