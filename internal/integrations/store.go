package integrations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/internal/integrations/integrationsdb"
	"github.com/proliferate/proliferate/internal/repos/reposdb"
)

// integrationOf is an integration row with its creator (integrations i LEFT
// JOIN users u). The queries returning one have the same columns (the
// visibility rule, org-wide rows for every member and private rows for their
// creator only, is applied in their SQL), so their row types convert to
// LookupIntegrationRow.
func integrationOf(r integrationsdb.LookupIntegrationRow) (Integration, error) {
	i := r.Integration
	it := Integration{ID: i.ID, OrgID: i.OrgID, Provider: Provider(i.Provider), IntegrationID: i.IntegrationID,
		ConnectionID: i.ConnectionID, ProviderConfigKey: deref(i.ProviderConfigKey), DisplayName: i.DisplayName,
		Scopes: i.Scopes, Status: Status(i.Status), StatusReason: i.StatusReason, Visibility: Visibility(i.Visibility),
		CreatedBy: i.CreatedBy, CreatedAt: i.CreatedAt, UpdatedAt: i.UpdatedAt}
	if i.GithubInstallationID != nil {
		it.GitHubInstallationID = *i.GithubInstallationID
	}
	if err := json.Unmarshal(i.Metadata, &it.Metadata); err != nil {
		return it, fmt.Errorf("integration %s metadata: %w", i.ID, err)
	}
	if r.CreatorID != nil {
		it.Creator = &Creator{ID: *r.CreatorID, Name: deref(r.CreatorName), Email: deref(r.CreatorEmail)}
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
	rows, err := integrationsdb.New(s.pool).ListIntegrations(ctx, integrationsdb.ListIntegrationsParams{
		OrgID: orgID, Viewer: viewer, IntegrationID: f.IntegrationID, Status: string(f.Status),
		BeforeAt: p.At, BeforeID: p.ID, MaxRows: int32(p.Limit + 1)})
	if err != nil {
		return nil, fmt.Errorf("list integrations: %w", err)
	}
	out := make([]Integration, len(rows))
	for i, r := range rows {
		if out[i], err = integrationOf(integrationsdb.LookupIntegrationRow(r)); err != nil {
			return nil, err
		}
	}
	return out, nil
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

// rowLock is the row lock get takes. Changing or deleting an integration
// takes lockUpdate; binding to it takes lockShare, which lets bindings
// proceed together but waits for (and blocks) a disconnect. Both are taken
// before any repo lock, so binds and disconnects cannot deadlock.
type rowLock int

const (
	lockNone rowLock = iota
	lockShare
	lockUpdate
)

func (s *Service) get(ctx context.Context, db querier, orgID, viewer, id string, lock rowLock) (Integration, error) {
	q := integrationsdb.New(db)
	var r integrationsdb.LookupIntegrationRow
	var err error
	switch lock {
	case lockShare:
		var x integrationsdb.VisibleIntegrationForShareRow
		x, err = q.VisibleIntegrationForShare(ctx, integrationsdb.VisibleIntegrationForShareParams{ID: id, OrgID: orgID, Viewer: viewer})
		r = integrationsdb.LookupIntegrationRow(x)
	case lockUpdate:
		var x integrationsdb.VisibleIntegrationForUpdateRow
		x, err = q.VisibleIntegrationForUpdate(ctx, integrationsdb.VisibleIntegrationForUpdateParams{ID: id, OrgID: orgID, Viewer: viewer})
		r = integrationsdb.LookupIntegrationRow(x)
	default:
		var x integrationsdb.VisibleIntegrationRow
		x, err = q.VisibleIntegration(ctx, integrationsdb.VisibleIntegrationParams{ID: id, OrgID: orgID, Viewer: viewer})
		r = integrationsdb.LookupIntegrationRow(x)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return Integration{}, ErrNotFound
	}
	var it Integration
	if err == nil {
		it, err = integrationOf(r)
	}
	if err != nil {
		return it, fmt.Errorf("get integration %s: %w", id, err)
	}
	return it, nil
}

// Lookup returns an integration of org regardless of visibility: for platform
// code acting for the org (runs, sessions, gateway), never for a person.
func (s *Service) Lookup(ctx context.Context, orgID, id string) (Integration, error) {
	r, err := integrationsdb.New(s.pool).LookupIntegration(ctx, integrationsdb.LookupIntegrationParams{ID: id, OrgID: orgID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Integration{}, ErrNotFound
	}
	var it Integration
	if err == nil {
		it, err = integrationOf(r)
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
	metadata, err := json.Marshal(r.Metadata)
	if err != nil {
		return Integration{}, false, fmt.Errorf("save integration: %w", err)
	}
	var id string
	var created bool
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		row, err := integrationsdb.New(tx).UpsertIntegration(ctx, integrationsdb.UpsertIntegrationParams{
			OrgID: r.OrgID, Provider: string(r.Provider), IntegrationID: r.IntegrationID, ConnectionID: r.ConnectionID,
			ProviderConfigKey: cfgKey, GithubInstallationID: instID, DisplayName: r.DisplayName, Scopes: r.Scopes,
			Status: string(r.Status), Visibility: string(r.Visibility), Metadata: metadata, CreatedBy: &r.UserID})
		if err != nil {
			return err
		}
		id, created = row.ID, row.Created
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
	if err := integrationsdb.New(tx).UpdateIntegration(ctx, integrationsdb.UpdateIntegrationParams{
		DisplayName: name, Visibility: string(vis), ID: id, OrgID: orgID}); err != nil {
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
	q := integrationsdb.New(s.pool)
	n, err := q.SetIntegrationStatus(ctx, integrationsdb.SetIntegrationStatusParams{
		Status: string(to), StatusReason: reason, ID: id, OrgID: orgID, Sources: sourcesOf(to)})
	if isUniqueViolation(err) { // reviving an installation another org now holds
		return ErrInstallationClaimed
	}
	if err != nil {
		return fmt.Errorf("set integration status: %w", err)
	}
	if n == 1 {
		return nil
	}
	st, err := q.IntegrationStatus(ctx, integrationsdb.IntegrationStatusParams{ID: id, OrgID: orgID})
	cur := Status(st)
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
	n, err := integrationsdb.New(s.pool).SetInstallationStatus(ctx, integrationsdb.SetInstallationStatusParams{
		Status: string(to), StatusReason: reason, InstallationID: &installationID, Sources: sourcesOf(to)})
	if err != nil {
		return 0, fmt.Errorf("set installation status: %w", err)
	}
	if s.github != nil && to != StatusActive {
		s.github.Forget(installationID)
	}
	return int(n), nil
}

// DeletePrivateForUser removes a person's private integrations in an org
// (nobody else can see or use them). Call it when a member leaves the org.
func (s *Service) DeletePrivateForUser(ctx context.Context, orgID, userID string) (int, error) {
	n, err := integrationsdb.New(s.pool).DeletePrivateIntegrations(ctx, integrationsdb.DeletePrivateIntegrationsParams{
		OrgID: orgID, UserID: &userID})
	if err != nil {
		return 0, fmt.Errorf("delete private integrations: %w", err)
	}
	return int(n), nil
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
	rq := reposdb.New(tx)
	if err := rq.LockIntegrationRepos(ctx, reposdb.LockIntegrationReposParams{OrgID: orgID, IntegrationID: id}); err != nil {
		return res, fmt.Errorf("lock bound repos: %w", err)
	}
	orphaned, err := rq.OrphanIntegrationRepos(ctx, reposdb.OrphanIntegrationReposParams{OrgID: orgID, IntegrationID: id})
	if err != nil {
		return res, fmt.Errorf("flag orphaned repos: %w", err)
	}
	res.OrphanedRepos = make([]OrphanedRepo, len(orphaned))
	for i, r := range orphaned {
		res.OrphanedRepos[i] = OrphanedRepo{ID: r.ID, GitHubRepoName: r.GithubRepoName}
	}
	if err := integrationsdb.New(tx).DeleteIntegration(ctx, integrationsdb.DeleteIntegrationParams{ID: id, OrgID: orgID}); err != nil {
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
