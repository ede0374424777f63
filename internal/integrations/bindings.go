package integrations

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/proliferate/proliferate/internal/integrations/integrationsdb"
	"github.com/proliferate/proliferate/internal/repos/reposdb"
)

// ErrRepoNotFound: no such repo in the organization.
var ErrRepoNotFound = fmt.Errorf("repo %w", ErrNotFound)

// ErrBindingNotFound: the repo is not bound to the integration.
var ErrBindingNotFound = fmt.Errorf("connection %w", ErrNotFound)

func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// RepoBinding is a repo bound to an integration.
type RepoBinding struct {
	ID             string    `json:"id"`
	RepoID         string    `json:"repo_id"`
	IntegrationID  string    `json:"integration_id"`
	GitHubRepoName string    `json:"github_repo_name"`
	IsOrphaned     bool      `json:"is_orphaned"`
	CreatedAt      time.Time `json:"created_at"`
}

func repoBinding(r integrationsdb.RepoBindingRow) RepoBinding {
	return RepoBinding{ID: r.ID, RepoID: r.RepoID, IntegrationID: r.IntegrationID, GitHubRepoName: r.GithubRepoName,
		IsOrphaned: r.IsOrphaned, CreatedAt: r.CreatedAt}
}

// BindRepo binds a repo to an integration the viewer can see; both must be
// in org (the table's foreign keys enforce it too). The repo stops being
// orphaned. created=false when the binding already existed.
func (s *Service) BindRepo(ctx context.Context, orgID, viewer, integrationID, repoID string) (RepoBinding, bool, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return RepoBinding{}, false, err
	}
	defer tx.Rollback(ctx)
	it, err := s.get(ctx, tx, orgID, viewer, integrationID, lockShare)
	if err != nil {
		return RepoBinding{}, false, err
	}
	if err := lockRepo(ctx, tx, orgID, repoID); err != nil {
		return RepoBinding{}, false, err
	}
	if it.Status != StatusActive {
		return RepoBinding{}, false, ErrInactive
	}
	q := integrationsdb.New(tx)
	n, err := q.BindRepo(ctx, integrationsdb.BindRepoParams{OrgID: orgID, RepoID: repoID, IntegrationID: integrationID, CreatedBy: &viewer})
	if err != nil {
		return RepoBinding{}, false, fmt.Errorf("bind repo: %w", err)
	}
	if err := reposdb.New(tx).UnorphanRepo(ctx, reposdb.UnorphanRepoParams{ID: repoID, OrgID: orgID}); err != nil {
		return RepoBinding{}, false, fmt.Errorf("un-orphan repo: %w", err)
	}
	r, err := q.RepoBinding(ctx, integrationsdb.RepoBindingParams{RepoID: repoID, IntegrationID: integrationID, OrgID: orgID})
	if err != nil {
		return RepoBinding{}, false, fmt.Errorf("read binding: %w", err)
	}
	return repoBinding(r), n == 1, tx.Commit(ctx)
}

// lockRepo checks the repo is in org and locks it against a concurrent
// orphan check (see Disconnect).
func lockRepo(ctx context.Context, tx pgx.Tx, orgID, repoID string) error {
	_, err := reposdb.New(tx).LockRepoInOrg(ctx, reposdb.LockRepoInOrgParams{ID: repoID, OrgID: orgID})
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrRepoNotFound
	}
	if err != nil {
		return fmt.Errorf("lock repo: %w", err)
	}
	return nil
}

// UnbindRepo removes a binding; orphaned reports that the repo thereby lost
// its last connection (it is then flagged is_orphaned).
func (s *Service) UnbindRepo(ctx context.Context, orgID, viewer, integrationID, repoID string) (bool, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	if _, err := s.get(ctx, tx, orgID, viewer, integrationID, lockShare); err != nil {
		return false, err
	}
	if err := lockRepo(ctx, tx, orgID, repoID); err != nil {
		return false, err
	}
	n, err := integrationsdb.New(tx).UnbindRepo(ctx, integrationsdb.UnbindRepoParams{RepoID: repoID, IntegrationID: integrationID, OrgID: orgID})
	if err != nil {
		return false, fmt.Errorf("unbind repo: %w", err)
	}
	if n == 0 {
		return false, ErrBindingNotFound
	}
	n, err = reposdb.New(tx).OrphanRepoIfUnbound(ctx, reposdb.OrphanRepoIfUnboundParams{ID: repoID, OrgID: orgID})
	if err != nil {
		return false, fmt.Errorf("flag orphaned repo: %w", err)
	}
	return n == 1, tx.Commit(ctx)
}

// IntegrationRepos lists the repos bound to an integration the viewer sees.
func (s *Service) IntegrationRepos(ctx context.Context, orgID, viewer, integrationID string, p Page) ([]RepoBinding, error) {
	if _, err := s.Get(ctx, orgID, viewer, integrationID); err != nil {
		return nil, err
	}
	rows, err := integrationsdb.New(s.pool).IntegrationRepoBindings(ctx, integrationsdb.IntegrationRepoBindingsParams{
		IntegrationID: integrationID, OrgID: orgID, BeforeAt: p.At, BeforeID: p.ID, MaxRows: int32(p.Limit + 1)})
	if err != nil {
		return nil, fmt.Errorf("list integration repos: %w", err)
	}
	out := make([]RepoBinding, len(rows))
	for i, r := range rows {
		out[i] = repoBinding(integrationsdb.RepoBindingRow(r))
	}
	return out, nil
}

// RepoConnection is an integration bound to a repo.
type RepoConnection struct {
	ID          string      `json:"id"`
	BoundAt     time.Time   `json:"bound_at"`
	Integration Integration `json:"integration"`
}

// RepoConnections lists the integrations bound to a repo of org that the
// viewer can see (another member's private integrations stay hidden).
func (s *Service) RepoConnections(ctx context.Context, orgID, viewer, repoID string, p Page) ([]RepoConnection, error) {
	_, err := reposdb.New(s.pool).RepoOfOrg(ctx, reposdb.RepoOfOrgParams{ID: repoID, OrgID: orgID})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrRepoNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("find repo: %w", err)
	}
	rows, err := integrationsdb.New(s.pool).RepoIntegrations(ctx, integrationsdb.RepoIntegrationsParams{
		RepoID: repoID, OrgID: orgID, Viewer: viewer, BeforeAt: p.At, BeforeID: p.ID, MaxRows: int32(p.Limit + 1)})
	if err != nil {
		return nil, fmt.Errorf("list repo connections: %w", err)
	}
	out := make([]RepoConnection, len(rows))
	for i, r := range rows {
		it, err := integrationOf(integrationsdb.LookupIntegrationRow{Integration: r.Integration,
			CreatorID: r.CreatorID, CreatorName: r.CreatorName, CreatorEmail: r.CreatorEmail})
		if err != nil {
			return nil, err
		}
		out[i] = RepoConnection{ID: r.BindingID, BoundAt: r.BoundAt, Integration: it}
	}
	return out, nil
}

// --- automations and sessions -------------------------------------------------
//
// The automations and sessions tables do not exist yet, so their ids are not
// checked here (their migrations add the foreign keys). The integration must
// belong to the same org, which the composite foreign key also enforces.

// BindAutomation binds an integration of org to an automation (idempotent).
func (s *Service) BindAutomation(ctx context.Context, orgID, automationID, integrationID string) error {
	return s.bindOwner(ctx, "automation_id", orgID, integrationID, func(q *integrationsdb.Queries) error {
		return q.BindAutomation(ctx, integrationsdb.BindAutomationParams{OrgID: orgID, AutomationID: automationID, IntegrationID: integrationID})
	})
}

// UnbindAutomation removes the binding (ErrBindingNotFound if absent).
func (s *Service) UnbindAutomation(ctx context.Context, orgID, automationID, integrationID string) error {
	n, err := integrationsdb.New(s.pool).UnbindAutomation(ctx, integrationsdb.UnbindAutomationParams{
		OrgID: orgID, AutomationID: automationID, IntegrationID: integrationID})
	return unbound("automation_id", n, err)
}

// AutomationIntegrations lists the integrations bound to an automation.
func (s *Service) AutomationIntegrations(ctx context.Context, orgID, automationID string) ([]Integration, error) {
	rows, err := integrationsdb.New(s.pool).AutomationIntegrations(ctx, integrationsdb.AutomationIntegrationsParams{
		OrgID: orgID, AutomationID: automationID})
	if err != nil {
		return nil, fmt.Errorf("list automation_id integrations: %w", err)
	}
	out := make([]Integration, len(rows))
	for i, r := range rows {
		if out[i], err = integrationOf(integrationsdb.LookupIntegrationRow(r)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// BindSession binds an integration of org to a session (idempotent).
func (s *Service) BindSession(ctx context.Context, orgID, sessionID, integrationID string) error {
	return s.bindOwner(ctx, "session_id", orgID, integrationID, func(q *integrationsdb.Queries) error {
		return q.BindSession(ctx, integrationsdb.BindSessionParams{OrgID: orgID, SessionID: sessionID, IntegrationID: integrationID})
	})
}

// UnbindSession removes the binding (ErrBindingNotFound if absent).
func (s *Service) UnbindSession(ctx context.Context, orgID, sessionID, integrationID string) error {
	n, err := integrationsdb.New(s.pool).UnbindSession(ctx, integrationsdb.UnbindSessionParams{
		OrgID: orgID, SessionID: sessionID, IntegrationID: integrationID})
	return unbound("session_id", n, err)
}

// SessionIntegrations lists the integrations bound to a session.
func (s *Service) SessionIntegrations(ctx context.Context, orgID, sessionID string) ([]Integration, error) {
	rows, err := integrationsdb.New(s.pool).SessionIntegrations(ctx, integrationsdb.SessionIntegrationsParams{
		OrgID: orgID, SessionID: sessionID})
	if err != nil {
		return nil, fmt.Errorf("list session_id integrations: %w", err)
	}
	out := make([]Integration, len(rows))
	for i, r := range rows {
		if out[i], err = integrationOf(integrationsdb.LookupIntegrationRow(r)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// bindOwner checks the integration is in org, then binds it; column names
// the owner in errors.
func (s *Service) bindOwner(ctx context.Context, column, orgID, integrationID string, bind func(*integrationsdb.Queries) error) error {
	if _, err := s.Lookup(ctx, orgID, integrationID); err != nil {
		return err
	}
	if err := bind(integrationsdb.New(s.pool)); err != nil {
		return fmt.Errorf("bind %s: %w", column, err)
	}
	return nil
}

// unbound is the outcome of removing a binding that deleted n rows.
func unbound(column string, n int64, err error) error {
	if err != nil {
		return fmt.Errorf("unbind %s: %w", column, err)
	}
	if n == 0 {
		return ErrBindingNotFound
	}
	return nil
}
