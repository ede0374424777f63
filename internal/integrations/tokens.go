package integrations

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/integrations/integrationsdb"
)

// TokenOption refines GetToken.
type TokenOption func(*tokenOptions)

type tokenOptions struct{ userID, repo string }

// ForUser prefers the person's own connection to the integration's provider
// (user_connections) when they have an active one, for user attribution
// (commits authored by them); otherwise the org integration is used.
func ForUser(userID string) TokenOption { return func(o *tokenOptions) { o.userID = userID } }

// ForRepository narrows a GitHub App installation token to one repository
// of the installation (its name, without the owner): the token can read
// and push that repository only. Other providers' tokens cannot be
// narrowed and are returned as they are.
func ForRepository(repo string) TokenOption { return func(o *tokenOptions) { o.repo = repo } }

// GetToken is the single boundary that turns an integration into a live
// bearer token. Actions, triggers, runs and the gateway call it; nothing else
// reads tokens. GitHub App installation tokens come from the cache or GitHub;
// Nango tokens are read live from Nango (which refreshes them).
//
// Failures are *UpstreamError values wrapping a kind (ErrUpstreamUnavailable,
// ErrUpstreamUnauthorized, ErrUpstreamNotFound, ErrSuspended,
// ErrReauthRequired); ErrInactive and ErrNotConfigured are returned as is.
// When the provider says the connection is gone, suspended or needs a new
// authorization, the integration's status is updated accordingly, so the
// dashboard shows it and later calls fail fast with ErrInactive.
func (s *Service) GetToken(ctx context.Context, it Integration, opts ...TokenOption) (Token, error) {
	var o tokenOptions
	for _, f := range opts {
		f(&o)
	}
	if o.userID != "" && it.OrgID != "" {
		tok, ok, err := s.userToken(ctx, it.OrgID, o.userID, it.IntegrationID)
		if ok || err != nil {
			return tok, err
		}
	}
	if it.Status != StatusActive {
		return Token{}, ErrInactive
	}
	switch it.Provider {
	case ProviderGitHubApp:
		if s.github == nil {
			return Token{}, ErrNotConfigured
		}
		if it.GitHubInstallationID <= 0 {
			return Token{}, fmt.Errorf("integration %s has no installation id", it.ID)
		}
		var tok Token
		var err error
		if o.repo != "" {
			tok, err = s.github.RepositoryToken(ctx, it.GitHubInstallationID, o.repo)
		} else {
			tok, err = s.github.InstallationToken(ctx, it.GitHubInstallationID)
		}
		switch {
		case errors.Is(err, ErrUpstreamNotFound):
			s.markAfterTokenFailure(ctx, it, StatusDeleted, "installation not found on GitHub", err)
		case errors.Is(err, ErrSuspended):
			s.markAfterTokenFailure(ctx, it, StatusSuspended, "installation suspended on GitHub", err)
		}
		return tok, err
	case ProviderNango:
		if s.nango == nil {
			return Token{}, ErrNotConfigured
		}
		tok, err := s.nango.Token(ctx, it.ConnectionID, it.ProviderConfigKey)
		switch {
		case errors.Is(err, ErrUpstreamNotFound):
			s.markAfterTokenFailure(ctx, it, StatusRevoked, "connection not found at Nango", err)
		case errors.Is(err, ErrReauthRequired):
			s.markAfterTokenFailure(ctx, it, StatusExpired, "credentials could not be refreshed; re-authorize", err)
		}
		return tok, err
	}
	return Token{}, fmt.Errorf("integration %s: unknown provider %q", it.ID, it.Provider)
}

func (s *Service) markAfterTokenFailure(ctx context.Context, it Integration, to Status, reason string, cause error) {
	log := s.log.With("org_id", it.OrgID, "integration_id", it.ID, "provider", string(it.Provider))
	if it.ID == "" || it.OrgID == "" {
		return
	}
	if err := s.SetStatus(context.WithoutCancel(ctx), it.OrgID, it.ID, to, reason); err != nil && !errors.Is(err, ErrInvalidTransition) {
		log.Error("could not record integration status after a token failure", "error", err)
		return
	}
	log.Warn("integration token failed; status updated", "status", string(to), "error", cause)
}

// TokenFor looks an integration up by id within org (no visibility filter:
// platform code acting for the org) and resolves its token.
func (s *Service) TokenFor(ctx context.Context, orgID, integrationID string, opts ...TokenOption) (Token, error) {
	it, err := s.Lookup(ctx, orgID, integrationID)
	if err != nil {
		return Token{}, err
	}
	return s.GetToken(ctx, it, opts...)
}

// ResolvedToken is one result of ResolveTokens.
type ResolvedToken struct {
	Integration Integration
	EnvVar      string
	Token       Token
	Err         error
}

// ResolveTokens resolves several integrations concurrently; each result has
// either Token or Err (one failure does not fail the others).
func (s *Service) ResolveTokens(ctx context.Context, its []Integration, opts ...TokenOption) []ResolvedToken {
	out := make([]ResolvedToken, len(its))
	var wg sync.WaitGroup
	for i, it := range its {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok, err := s.GetToken(ctx, it, opts...)
			out[i] = ResolvedToken{Integration: it, EnvVar: EnvVarName(it), Token: tok, Err: err}
		}()
	}
	wg.Wait()
	return out
}

// EnvVarName is the sandbox environment variable carrying an integration's
// token, e.g. LINEAR_ACCESS_TOKEN_1a2b3c4d.
func EnvVarName(it Integration) string {
	id := strings.ReplaceAll(it.ID, "-", "")
	if len(id) > 8 {
		id = id[:8]
	}
	name := strings.ToUpper(strings.NewReplacer("-", "_").Replace(it.IntegrationID))
	return name + "_ACCESS_TOKEN_" + id
}

// --- user connections ---------------------------------------------------------

// UserConnection is a person's own credential for a provider.
type UserConnection struct {
	ID                string    `json:"id"`
	OrgID             string    `json:"org_id"`
	UserID            string    `json:"user_id"`
	Provider          Provider  `json:"provider"`
	IntegrationID     string    `json:"integration_id"`
	ConnectionID      string    `json:"connection_id"`
	ProviderConfigKey string    `json:"provider_config_key"`
	Status            Status    `json:"status"`
	CreatedAt         time.Time `json:"created_at"`
	UpdatedAt         time.Time `json:"updated_at"`
}

func userConnection(r integrationsdb.UserConnection) UserConnection {
	return UserConnection{ID: r.ID, OrgID: r.OrgID, UserID: r.UserID, Provider: Provider(r.Provider),
		IntegrationID: r.IntegrationID, ConnectionID: r.ConnectionID, ProviderConfigKey: r.ProviderConfigKey,
		Status: Status(r.Status), CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// userToken resolves the person's own connection; ok=false means they have
// none usable and the org integration applies. A connection Nango lost or
// cannot refresh is marked and skipped.
func (s *Service) userToken(ctx context.Context, orgID, userID, integrationID string) (Token, bool, error) {
	q := integrationsdb.New(s.pool)
	uc, err := q.ActiveUserConnection(ctx, integrationsdb.ActiveUserConnectionParams{
		OrgID: orgID, UserID: userID, IntegrationID: integrationID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Token{}, false, nil
	}
	if err != nil {
		return Token{}, false, fmt.Errorf("find user connection: %w", err)
	}
	if s.nango == nil {
		return Token{}, false, nil
	}
	tok, err := s.nango.Token(ctx, uc.ConnectionID, uc.ProviderConfigKey)
	var to Status
	switch {
	case err == nil:
		return tok, true, nil
	case errors.Is(err, ErrUpstreamNotFound):
		to = StatusRevoked
	case errors.Is(err, ErrReauthRequired):
		to = StatusExpired
	default:
		return Token{}, false, err
	}
	uerr := q.MarkUserConnection(context.WithoutCancel(ctx), integrationsdb.MarkUserConnectionParams{ID: uc.ID, Status: string(to)})
	s.log.Warn("user connection unusable; falling back to the org integration",
		"org_id", orgID, "user_id", userID, "user_connection_id", uc.ID, "status", string(to), "error", err, "update_error", uerr)
	return Token{}, false, nil
}

// ListUserConnections lists a person's own connections in an org.
func (s *Service) ListUserConnections(ctx context.Context, orgID, userID string, p Page) ([]UserConnection, error) {
	rows, err := integrationsdb.New(s.pool).ListUserConnections(ctx, integrationsdb.ListUserConnectionsParams{
		OrgID: orgID, UserID: userID, BeforeAt: p.At, BeforeID: p.ID, MaxRows: int32(p.Limit + 1)})
	if err != nil {
		return nil, fmt.Errorf("list user connections: %w", err)
	}
	out := make([]UserConnection, len(rows))
	for i, r := range rows {
		out[i] = userConnection(r)
	}
	return out, nil
}

// RegisterUserConnection saves a person's own Nango connection after their
// connect flow; it must have been created by a connect session of this person
// in this org. A previous connection for the same provider is replaced (and
// deleted at Nango).
func (s *Service) RegisterUserConnection(ctx context.Context, orgID, userID, connectionID, configKey string) (UserConnection, bool, error) {
	p, err := s.verifyNangoConnection(ctx, orgID, userID, connectionID, configKey, true)
	if err != nil {
		return UserConnection{}, false, err
	}
	if !p.UserAttribution {
		return UserConnection{}, false, invalid("provider_config_key", "does not support personal connections")
	}
	q := integrationsdb.New(s.pool)
	var prev *string
	if id, err := q.UserConnectionID(ctx, integrationsdb.UserConnectionIDParams{OrgID: orgID, UserID: userID, IntegrationID: p.ID}); err == nil {
		prev = &id
	}
	r, err := q.UpsertUserConnection(ctx, integrationsdb.UpsertUserConnectionParams{
		OrgID: orgID, UserID: userID, IntegrationID: p.ID, ConnectionID: connectionID, ProviderConfigKey: configKey})
	if isUniqueViolation(err) { // the connection id is registered to someone else
		return UserConnection{}, false, invalid("connection_id", "is already registered")
	}
	if err != nil {
		return UserConnection{}, false, fmt.Errorf("save user connection: %w", err)
	}
	if prev != nil && *prev != connectionID {
		if err := s.nango.DeleteConnection(ctx, *prev, configKey); err != nil {
			s.log.Warn("replaced user connection; deleting the old Nango connection failed",
				"org_id", orgID, "user_id", userID, "error", err)
		}
	}
	uc := userConnection(integrationsdb.UserConnection{ID: r.ID, OrgID: r.OrgID, UserID: r.UserID, Provider: r.Provider,
		IntegrationID: r.IntegrationID, ConnectionID: r.ConnectionID, ProviderConfigKey: r.ProviderConfigKey,
		Status: r.Status, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt})
	return uc, r.Created, nil
}

// DeleteUserConnection removes a person's own connection (and, best effort,
// the Nango connection).
func (s *Service) DeleteUserConnection(ctx context.Context, orgID, userID, id string) error {
	r, err := integrationsdb.New(s.pool).DeleteUserConnection(ctx, integrationsdb.DeleteUserConnectionParams{
		ID: id, OrgID: orgID, UserID: userID})
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("delete user connection: %w", err)
	}
	if s.nango != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), defaultUpstreamTimeout)
		defer cancel()
		if err := s.nango.DeleteConnection(ctx, r.ConnectionID, r.ProviderConfigKey); err != nil {
			s.log.Warn("user connection deleted locally; deleting the Nango connection failed",
				"org_id", orgID, "user_id", userID, "error", err)
		}
	}
	return nil
}
