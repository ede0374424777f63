package integrations

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/proliferate/proliferate/internal/audit"
)

// integrationCols are selected from integrations i LEFT JOIN users u.
const integrationCols = `i.id::text, i.org_id::text, i.provider, i.integration_id, i.connection_id,
	COALESCE(i.provider_config_key, ''), COALESCE(i.github_installation_id, 0), i.display_name, i.scopes,
	i.status, i.status_reason, i.visibility, i.metadata, i.created_by::text, i.created_at, i.updated_at,
	u.id::text, u.name, u.email`

// visibleTo is the visibility rule, always applied in SQL: org-wide rows for
// every member, private rows for their creator only. $2 is the viewer.
const visibleTo = `(i.visibility = 'org' OR i.created_by = $2::uuid)`

func scanIntegration(row pgx.Row) (Integration, error) {
	var it Integration
	var creatorID, creatorName, creatorEmail *string
	err := row.Scan(&it.ID, &it.OrgID, &it.Provider, &it.IntegrationID, &it.ConnectionID,
		&it.ProviderConfigKey, &it.GitHubInstallationID, &it.DisplayName, &it.Scopes,
		&it.Status, &it.StatusReason, &it.Visibility, &it.Metadata, &it.CreatedBy, &it.CreatedAt, &it.UpdatedAt,
		&creatorID, &creatorName, &creatorEmail)
	if err != nil {
		return it, err
	}
	if creatorID != nil {
		it.Creator = &Creator{ID: *creatorID, Name: deref(creatorName), Email: deref(creatorEmail)}
	}
	if it.Scopes == nil {
		it.Scopes = []string{}
	}
	if it.Metadata == nil {
		it.Metadata = map[string]any{}
	}
	return it, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ListFilter narrows a list.
type ListFilter struct {
	IntegrationID string // preset: github, sentry…
	Status        Status
}

// List returns the integrations of org visible to viewer, newest first.
func (s *Service) List(ctx context.Context, orgID, viewer string, f ListFilter, p Page) ([]Integration, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+integrationCols+`
		FROM integrations i LEFT JOIN users u ON u.id = i.created_by
		WHERE i.org_id = $1 AND `+visibleTo+`
		  AND ($3 = '' OR i.integration_id = $3) AND ($4 = '' OR i.status = $4)
		  AND (i.created_at, i.id) < ($5, $6::uuid)
		ORDER BY i.created_at DESC, i.id DESC LIMIT $7`,
		orgID, viewer, f.IntegrationID, string(f.Status), p.At, p.ID, p.Limit+1)
	if err != nil {
		return nil, fmt.Errorf("list integrations: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Integration, error) { return scanIntegration(r) })
}

// Get returns one integration of org visible to viewer.
func (s *Service) Get(ctx context.Context, orgID, viewer, id string) (Integration, error) {
	return s.get(ctx, s.pool, orgID, viewer, id, lockNone)
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Row locks taken by get. Changing or deleting an integration takes
// lockUpdate; binding to it takes lockShare, which lets bindings proceed
// together but waits for (and blocks) a disconnect. Both are taken before
// any repo lock, so binds and disconnects cannot deadlock.
const (
	lockNone   = ""
	lockShare  = " FOR KEY SHARE OF i"
	lockUpdate = " FOR UPDATE OF i"
)

func (s *Service) get(ctx context.Context, q querier, orgID, viewer, id string, lock string) (Integration, error) {
	sql := `SELECT ` + integrationCols + `
		FROM integrations i LEFT JOIN users u ON u.id = i.created_by
		WHERE i.id = $3 AND i.org_id = $1 AND ` + visibleTo + lock
	it, err := scanIntegration(q.QueryRow(ctx, sql, orgID, viewer, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return it, ErrNotFound
	}
	if err != nil {
		return it, fmt.Errorf("get integration %s: %w", id, err)
	}
	return it, nil
}

// Lookup returns an integration of org regardless of visibility: for platform
// code acting for the org (runs, sessions, gateway), never for a person.
func (s *Service) Lookup(ctx context.Context, orgID, id string) (Integration, error) {
	it, err := scanIntegration(s.pool.QueryRow(ctx, `SELECT `+integrationCols+`
		FROM integrations i LEFT JOIN users u ON u.id = i.created_by
		WHERE i.id = $2 AND i.org_id = $1`, orgID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return it, ErrNotFound
	}
	if err != nil {
		return it, fmt.Errorf("lookup integration %s: %w", id, err)
	}
	return it, nil
}

// Registration is a verified connection to save.
type Registration struct {
	OrgID, UserID        string
	Provider             Provider
	IntegrationID        string
	ConnectionID         string
	ProviderConfigKey    string
	GitHubInstallationID int64
	DisplayName          *string
	Scopes               []string
	Status               Status
	Visibility           Visibility
	Metadata             map[string]any
}

// save upserts on (org_id, connection_id): a re-authorization reactivates
// the existing row and refreshes what the provider reported; visibility and
// creator stay as they were. created reports a new row.
func (s *Service) save(ctx context.Context, r Registration) (Integration, bool, error) {
	if r.Status == "" {
		r.Status = StatusActive
	}
	if r.Visibility == "" {
		r.Visibility = VisibilityOrg
	}
	if r.Scopes == nil {
		r.Scopes = []string{}
	}
	if r.Metadata == nil {
		r.Metadata = map[string]any{}
	}
	var instID *int64
	if r.GitHubInstallationID != 0 {
		instID = &r.GitHubInstallationID
	}
	var cfgKey *string
	if r.ProviderConfigKey != "" {
		cfgKey = &r.ProviderConfigKey
	}
	var id string
	var created bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO integrations (org_id, provider, integration_id, connection_id,
			provider_config_key, github_installation_id, display_name, scopes, status, visibility, metadata, created_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT (org_id, connection_id) DO UPDATE SET
			status = EXCLUDED.status, status_reason = '',
			display_name = COALESCE(EXCLUDED.display_name, integrations.display_name),
			scopes = EXCLUDED.scopes, metadata = EXCLUDED.metadata, updated_at = now()
		WHERE integrations.provider = EXCLUDED.provider
		  AND (integrations.visibility = 'org' OR integrations.created_by = EXCLUDED.created_by)
		RETURNING id::text, (xmax = 0)`,
			r.OrgID, string(r.Provider), r.IntegrationID, r.ConnectionID, cfgKey, instID, r.DisplayName,
			r.Scopes, string(r.Status), string(r.Visibility), r.Metadata, r.UserID).Scan(&id, &created)
		if err != nil {
			return err
		}
		// The organization's audit trail, in the connection's transaction.
		ev := audit.Event{OrgID: r.OrgID, Action: "integration.connect", TargetType: "integration", TargetID: id,
			Details: map[string]any{"provider": string(r.Provider), "integration": r.IntegrationID, "name": r.DisplayName, "visibility": string(r.Visibility)},
			Actor:   audit.ActorFrom(ctx)}
		if !created {
			ev.Action = "integration.reconnect"
		}
		if ev.Actor.UserID == "" {
			ev.Actor.UserID = r.UserID
		}
		return audit.Emit(ctx, tx, ev)
	})
	// No row: the connection id exists under another provider, or as another
	// member's private integration (which must stay theirs and unseen).
	if errors.Is(err, pgx.ErrNoRows) {
		return Integration{}, false, ErrConflict
	}
	if isUniqueViolation(err) && r.GitHubInstallationID != 0 {
		return Integration{}, false, ErrInstallationClaimed
	}
	if err != nil {
		return Integration{}, false, fmt.Errorf("save integration: %w", err)
	}
	it, err := s.Lookup(ctx, r.OrgID, id)
	return it, created, err
}

// GitHubAppStateTTL is how long an install state stays valid.
const GitHubAppStateTTL = githubStateTTL

// StartGitHubAppInstall issues the state the GitHub App install redirect
// carries; the callback must return it.
func (s *Service) StartGitHubAppInstall(ctx context.Context, orgID, userID string) (string, time.Time, error) {
	if s.github == nil {
		return "", time.Time{}, ErrNotConfigured
	}
	st, err := s.states.issue(ctx, oauthState{Kind: "github-app", OrgID: orgID, UserID: userID}, githubStateTTL)
	return st, s.now().Add(githubStateTTL), err
}

// ErrInstallationClaimed: the GitHub App installation is registered to
// another organization.
var ErrInstallationClaimed = fmt.Errorf("installation %w by another organization", ErrConflict)

// RegisterGitHubApp completes an installation callback: the state must be one
// this person started in this org, the installation must exist for this app
// on GitHub, and no other organization may hold it (an installation id is
// guessable; see the unique index in 0040_integrations.sql). Proving that the
// caller controls the GitHub account needs a user-to-server OAuth exchange
// (GitHub App client id and secret), which the configuration lacks yet.
func (s *Service) RegisterGitHubApp(ctx context.Context, orgID, userID, state string, installationID int64, vis Visibility, displayName *string) (Integration, bool, error) {
	if s.github == nil {
		return Integration{}, false, ErrNotConfigured
	}
	if _, err := s.states.consume(ctx, "github-app", state, orgID, userID); err != nil {
		if errors.Is(err, ErrBadState) {
			return Integration{}, false, invalid("state", "is not a state this organization issued for this person, or it expired")
		}
		return Integration{}, false, err
	}
	inst, err := s.github.Installation(ctx, installationID)
	if errors.Is(err, ErrUpstreamNotFound) {
		return Integration{}, false, invalid("installation_id", "is not an installation of this GitHub App")
	}
	if err != nil {
		return Integration{}, false, err
	}
	status := StatusActive
	if inst.SuspendedAt != nil {
		status = StatusSuspended
	}
	if displayName == nil && inst.Account.Login != "" {
		displayName = &inst.Account.Login
	}
	return s.save(ctx, Registration{
		OrgID: orgID, UserID: userID, Provider: ProviderGitHubApp, IntegrationID: "github",
		ConnectionID:         "github-app-" + strconv.FormatInt(installationID, 10),
		GitHubInstallationID: installationID, DisplayName: displayName, Status: status, Visibility: vis,
		Metadata: map[string]any{"account_login": inst.Account.Login, "account_type": inst.Account.Type,
			"repository_selection": inst.RepositorySelection},
	})
}

// StartNangoConnect creates a Nango connect session for a preset, tagged with
// the person and org so the callback can check the connection came from it.
func (s *Service) StartNangoConnect(ctx context.Context, orgID, userID, email, presetID string) (ConnectSession, Preset, error) {
	if s.nango == nil {
		return ConnectSession{}, Preset{}, ErrNotConfigured
	}
	p, ok := s.presets.ByID(presetID)
	if !ok || !hasProvider(p, ProviderNango) {
		return ConnectSession{}, Preset{}, invalid("integration", "is not a provider that connects through Nango")
	}
	cs, err := s.nango.CreateConnectSession(ctx, userID, email, orgID, p.NangoKey)
	return cs, p, err
}

func hasProvider(p Preset, want Provider) bool {
	for _, x := range p.Providers {
		if x == want {
			return true
		}
	}
	return false
}

// verifyNangoConnection checks that a connection exists at Nango for a known
// preset and was created through a connect session of this org (and, for
// user connections, this person): a connection id learnt elsewhere cannot be
// attached to another org.
func (s *Service) verifyNangoConnection(ctx context.Context, orgID, userID, connectionID, configKey string, requireUser bool) (Preset, error) {
	if s.nango == nil {
		return Preset{}, ErrNotConfigured
	}
	p, ok := s.presets.ByNangoKey(configKey)
	if !ok {
		return Preset{}, invalid("provider_config_key", "is not a Nango integration this platform uses")
	}
	c, err := s.nango.Connection(ctx, connectionID, configKey, false)
	if errors.Is(err, ErrUpstreamNotFound) {
		return Preset{}, invalid("connection_id", "is not a Nango connection of this integration")
	}
	if errors.Is(err, ErrReauthRequired) {
		return Preset{}, invalid("connection_id", "has credentials Nango cannot use; connect again")
	}
	if err != nil {
		return Preset{}, err
	}
	if c.EndUser == nil || c.EndUser.Organization == nil || c.EndUser.Organization.ID != orgID ||
		(requireUser && c.EndUser.ID != userID) {
		return Preset{}, invalid("connection_id", "was not created by a connect session of this organization")
	}
	return p, nil
}

// RegisterNango completes a Nango connect flow for the org.
func (s *Service) RegisterNango(ctx context.Context, orgID, userID, connectionID, configKey string, vis Visibility, displayName *string) (Integration, bool, error) {
	p, err := s.verifyNangoConnection(ctx, orgID, userID, connectionID, configKey, false)
	if err != nil {
		return Integration{}, false, err
	}
	return s.save(ctx, Registration{
		OrgID: orgID, UserID: userID, Provider: ProviderNango, IntegrationID: p.ID,
		ConnectionID: connectionID, ProviderConfigKey: configKey, DisplayName: displayName,
		Scopes: p.Org.Scopes, Visibility: vis,
	})
}

// ErrPrivateNeedsCreator: only an integration's creator may make it private.
var ErrPrivateNeedsCreator = fmt.Errorf("%w: only the creator can make an integration private", ErrForbidden)

// Update is a change to an integration; nil fields stay.
type Update struct {
	DisplayName *string // "" clears it
	Visibility  *Visibility
}

// UpdateIntegration renames an integration or changes its visibility. The
// creator or an admin may change it; only the creator may make it private
// (anyone else would hide it from themselves).
func (s *Service) UpdateIntegration(ctx context.Context, orgID, viewer string, admin bool, id string, u Update) (Integration, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Integration{}, err
	}
	defer tx.Rollback(ctx)
	it, err := s.get(ctx, tx, orgID, viewer, id, lockUpdate)
	if err != nil {
		return it, err
	}
	creator := it.CreatedBy != nil && *it.CreatedBy == viewer
	if !creator && !admin {
		return it, ErrForbidden
	}
	if u.Visibility != nil && *u.Visibility == VisibilityPrivate && !creator {
		return it, ErrPrivateNeedsCreator
	}
	name := it.DisplayName
	if u.DisplayName != nil {
		if t := strings.TrimSpace(*u.DisplayName); t == "" {
			name = nil
		} else {
			name = &t
		}
	}
	vis := it.Visibility
	if u.Visibility != nil {
		vis = *u.Visibility
	}
	if _, err := tx.Exec(ctx, `UPDATE integrations SET display_name = $3, visibility = $4, updated_at = now()
		WHERE id = $1 AND org_id = $2`, id, orgID, name, string(vis)); err != nil {
		return it, fmt.Errorf("update integration: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return it, err
	}
	return s.Lookup(ctx, orgID, id)
}

// SetStatus moves an integration through its lifecycle (compare-and-set in
// SQL, so concurrent updates cannot skip a rule).
func (s *Service) SetStatus(ctx context.Context, orgID, id string, to Status, reason string) error {
	if !to.Valid() {
		return ErrInvalidTransition
	}
	tag, err := s.pool.Exec(ctx, `UPDATE integrations SET status = $3, status_reason = $4, updated_at = now()
		WHERE id = $1 AND org_id = $2 AND status = ANY($5)`, id, orgID, string(to), reason, sourcesOf(to))
	if isUniqueViolation(err) { // reviving an installation another org now holds
		return ErrInstallationClaimed
	}
	if err != nil {
		return fmt.Errorf("set integration status: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var cur Status
	err = s.pool.QueryRow(ctx, `SELECT status FROM integrations WHERE id = $1 AND org_id = $2`, id, orgID).Scan(&cur)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	if cur == to {
		return nil // already there: idempotent
	}
	return fmt.Errorf("%w: %s → %s", ErrInvalidTransition, cur, to)
}

// SetStatusByInstallation applies a GitHub App lifecycle event (installation
// deleted, suspended, unsuspended) to every org's record of the installation;
// rows whose status cannot make the move are left alone, and deleted records
// stay deleted (only registering again revives them). It returns how many
// changed. (Used by the GitHub App webhook handler.)
func (s *Service) SetStatusByInstallation(ctx context.Context, installationID int64, to Status, reason string) (int, error) {
	if !to.Valid() {
		return 0, ErrInvalidTransition
	}
	tag, err := s.pool.Exec(ctx, `UPDATE integrations SET status = $2, status_reason = $3, updated_at = now()
		WHERE github_installation_id = $1 AND status = ANY($4) AND status <> 'deleted'`, installationID, string(to), reason, sourcesOf(to))
	if err != nil {
		return 0, fmt.Errorf("set installation status: %w", err)
	}
	if s.github != nil && to != StatusActive {
		s.github.Forget(installationID)
	}
	return int(tag.RowsAffected()), nil
}

// DeletePrivateForUser removes a person's private integrations in an org
// (nobody else can see or use them). Call it when a member leaves the org.
func (s *Service) DeletePrivateForUser(ctx context.Context, orgID, userID string) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM integrations WHERE org_id = $1 AND created_by = $2 AND visibility = 'private'`, orgID, userID)
	if err != nil {
		return 0, fmt.Errorf("delete private integrations: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// OrphanedRepo is a repo left without any connection.
type OrphanedRepo struct {
	ID             string `json:"id"`
	GitHubRepoName string `json:"github_repo_name"`
}

// DisconnectResult says what a disconnect did.
type DisconnectResult struct {
	ID string `json:"id"`
	// OrphanedRepos lost their only connection and are now flagged
	// is_orphaned.
	OrphanedRepos []OrphanedRepo `json:"orphaned_repos"`
	// UpstreamRevoked: the broker connection was deleted at Nango (always
	// false for GitHub App installations, which belong to the GitHub account
	// and may serve other orgs).
	UpstreamRevoked bool `json:"upstream_revoked"`
}

// Disconnect deletes an integration (its bindings cascade) and flags the
// repos that thereby lost their last connection, in one transaction with one
// query for the orphans (the original ran a count per repo). Admins may
// disconnect any integration they can see; members only their own. For Nango
// connections the upstream connection is deleted afterwards, best effort.
func (s *Service) Disconnect(ctx context.Context, orgID, viewer string, admin bool, id string) (DisconnectResult, error) {
	res := DisconnectResult{ID: id, OrphanedRepos: []OrphanedRepo{}}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return res, err
	}
	defer tx.Rollback(ctx)
	it, err := s.get(ctx, tx, orgID, viewer, id, lockUpdate)
	if err != nil {
		return res, err
	}
	if !admin && (it.CreatedBy == nil || *it.CreatedBy != viewer) {
		return res, ErrForbidden
	}
	// Lock the bound repos first: a concurrent bind inserting into
	// repo_connections (which key-share locks the repo) waits, so the orphan
	// check below cannot miss a connection being added.
	if _, err := tx.Exec(ctx, `SELECT 1 FROM repos WHERE org_id = $1
		AND id IN (SELECT repo_id FROM repo_connections WHERE integration_id = $2) ORDER BY id FOR UPDATE`, orgID, id); err != nil {
		return res, fmt.Errorf("lock bound repos: %w", err)
	}
	rows, err := tx.Query(ctx, `UPDATE repos r SET is_orphaned = true, updated_at = now()
		WHERE r.org_id = $1
		  AND r.id IN (SELECT repo_id FROM repo_connections WHERE integration_id = $2)
		  AND NOT EXISTS (SELECT 1 FROM repo_connections o WHERE o.repo_id = r.id AND o.integration_id <> $2)
		RETURNING r.id::text, r.github_repo_name`, orgID, id)
	if err != nil {
		return res, fmt.Errorf("flag orphaned repos: %w", err)
	}
	res.OrphanedRepos, err = pgx.CollectRows(rows, pgx.RowToStructByPos[OrphanedRepo])
	if err != nil {
		return res, err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM integrations WHERE id = $1 AND org_id = $2`, id, orgID); err != nil {
		return res, fmt.Errorf("delete integration: %w", err)
	}
	if err := audit.Emit(ctx, tx, audit.Event{OrgID: orgID, Action: "integration.disconnect", TargetType: "integration", TargetID: id,
		Details: map[string]any{"provider": string(it.Provider), "name": it.DisplayName, "orphaned_repos": len(res.OrphanedRepos)},
		Actor:   audit.ActorFrom(ctx)}); err != nil {
		return res, err
	}
	if err := tx.Commit(ctx); err != nil {
		return res, err
	}
	if res.OrphanedRepos == nil {
		res.OrphanedRepos = []OrphanedRepo{}
	}
	log := s.log.With("org_id", orgID, "integration_id", id, "provider", string(it.Provider))
	// The local change is committed: finish the upstream cleanup even if the
	// caller goes away.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), defaultUpstreamTimeout)
	defer cancel()
	switch {
	case it.Provider == ProviderGitHubApp && s.github != nil:
		s.github.Forget(it.GitHubInstallationID)
	case it.Provider == ProviderNango && s.nango != nil:
		if err := s.nango.DeleteConnection(ctx, it.ConnectionID, it.ProviderConfigKey); err != nil {
			log.Warn("integration disconnected locally; deleting the Nango connection failed", "error", err)
		} else {
			res.UpstreamRevoked = true
		}
	}
	log.Info("integration disconnected", "orphaned_repos", len(res.OrphanedRepos))
	return res, nil
}
