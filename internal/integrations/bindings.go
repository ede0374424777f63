package integrations

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

const bindingCols = `rc.id::text, rc.repo_id::text, rc.integration_id::text, r.github_repo_name, r.is_orphaned, rc.created_at`

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
	tag, err := tx.Exec(ctx, `INSERT INTO repo_connections (org_id, repo_id, integration_id, created_by)
		VALUES ($1, $2, $3, $4) ON CONFLICT (repo_id, integration_id) DO NOTHING`, orgID, repoID, integrationID, viewer)
	if err != nil {
		return RepoBinding{}, false, fmt.Errorf("bind repo: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE repos SET is_orphaned = false, updated_at = now()
		WHERE id = $1 AND org_id = $2 AND is_orphaned`, repoID, orgID); err != nil {
		return RepoBinding{}, false, fmt.Errorf("un-orphan repo: %w", err)
	}
	var b RepoBinding
	err = tx.QueryRow(ctx, `SELECT `+bindingCols+` FROM repo_connections rc JOIN repos r ON r.id = rc.repo_id
		WHERE rc.repo_id = $1 AND rc.integration_id = $2 AND rc.org_id = $3`, repoID, integrationID, orgID).
		Scan(&b.ID, &b.RepoID, &b.IntegrationID, &b.GitHubRepoName, &b.IsOrphaned, &b.CreatedAt)
	if err != nil {
		return b, false, fmt.Errorf("read binding: %w", err)
	}
	return b, tag.RowsAffected() == 1, tx.Commit(ctx)
}

// lockRepo checks the repo is in org and locks it against a concurrent
// orphan check (see Disconnect).
func lockRepo(ctx context.Context, tx pgx.Tx, orgID, repoID string) error {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM repos WHERE id = $1 AND org_id = $2 FOR UPDATE`, repoID, orgID).Scan(&one)
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
	tag, err := tx.Exec(ctx, `DELETE FROM repo_connections WHERE repo_id = $1 AND integration_id = $2 AND org_id = $3`,
		repoID, integrationID, orgID)
	if err != nil {
		return false, fmt.Errorf("unbind repo: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return false, ErrBindingNotFound
	}
	tag, err = tx.Exec(ctx, `UPDATE repos SET is_orphaned = true, updated_at = now()
		WHERE id = $1 AND org_id = $2 AND NOT EXISTS (SELECT 1 FROM repo_connections WHERE repo_id = $1)`, repoID, orgID)
	if err != nil {
		return false, fmt.Errorf("flag orphaned repo: %w", err)
	}
	return tag.RowsAffected() == 1, tx.Commit(ctx)
}

// IntegrationRepos lists the repos bound to an integration the viewer sees.
func (s *Service) IntegrationRepos(ctx context.Context, orgID, viewer, integrationID string, p Page) ([]RepoBinding, error) {
	if _, err := s.Get(ctx, orgID, viewer, integrationID); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+bindingCols+` FROM repo_connections rc JOIN repos r ON r.id = rc.repo_id
		WHERE rc.integration_id = $1 AND rc.org_id = $2 AND (rc.created_at, rc.id) < ($3, $4::uuid)
		ORDER BY rc.created_at DESC, rc.id DESC LIMIT $5`, integrationID, orgID, p.At, p.ID, p.Limit+1)
	if err != nil {
		return nil, fmt.Errorf("list integration repos: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[RepoBinding])
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
	var one int
	err := s.pool.QueryRow(ctx, `SELECT 1 FROM repos WHERE id = $1 AND org_id = $2`, repoID, orgID).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrRepoNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("find repo: %w", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT rc.id::text, rc.created_at, `+integrationCols+`
		FROM repo_connections rc JOIN integrations i ON i.id = rc.integration_id
		LEFT JOIN users u ON u.id = i.created_by
		WHERE rc.repo_id = $3 AND rc.org_id = $1 AND i.org_id = $1 AND `+visibleTo+`
		  AND (rc.created_at, rc.id) < ($4, $5::uuid)
		ORDER BY rc.created_at DESC, rc.id DESC LIMIT $6`, orgID, viewer, repoID, p.At, p.ID, p.Limit+1)
	if err != nil {
		return nil, fmt.Errorf("list repo connections: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RepoConnection, error) {
		var rc RepoConnection
		var creatorID, creatorName, creatorEmail *string
		it := &rc.Integration
		err := r.Scan(&rc.ID, &rc.BoundAt, &it.ID, &it.OrgID, &it.Provider, &it.IntegrationID, &it.ConnectionID,
			&it.ProviderConfigKey, &it.GitHubInstallationID, &it.DisplayName, &it.Scopes,
			&it.Status, &it.StatusReason, &it.Visibility, &it.Metadata, &it.CreatedBy, &it.CreatedAt, &it.UpdatedAt,
			&creatorID, &creatorName, &creatorEmail)
		if creatorID != nil {
			it.Creator = &Creator{ID: *creatorID, Name: deref(creatorName), Email: deref(creatorEmail)}
		}
		if it.Scopes == nil {
			it.Scopes = []string{}
		}
		return rc, err
	})
}

// --- automations and sessions -------------------------------------------------
//
// The automations and sessions tables do not exist yet, so their ids are not
// checked here (their migrations add the foreign keys). The integration must
// belong to the same org, which the composite foreign key also enforces.

// BindAutomation binds an integration of org to an automation (idempotent).
func (s *Service) BindAutomation(ctx context.Context, orgID, automationID, integrationID string) error {
	return s.bindOwner(ctx, "automation_connections", "automation_id", orgID, automationID, integrationID)
}

// UnbindAutomation removes the binding (ErrBindingNotFound if absent).
func (s *Service) UnbindAutomation(ctx context.Context, orgID, automationID, integrationID string) error {
	return s.unbindOwner(ctx, "automation_connections", "automation_id", orgID, automationID, integrationID)
}

// AutomationIntegrations lists the integrations bound to an automation.
func (s *Service) AutomationIntegrations(ctx context.Context, orgID, automationID string) ([]Integration, error) {
	return s.ownerIntegrations(ctx, "automation_connections", "automation_id", orgID, automationID)
}

// BindSession binds an integration of org to a session (idempotent).
func (s *Service) BindSession(ctx context.Context, orgID, sessionID, integrationID string) error {
	return s.bindOwner(ctx, "session_connections", "session_id", orgID, sessionID, integrationID)
}

// UnbindSession removes the binding (ErrBindingNotFound if absent).
func (s *Service) UnbindSession(ctx context.Context, orgID, sessionID, integrationID string) error {
	return s.unbindOwner(ctx, "session_connections", "session_id", orgID, sessionID, integrationID)
}

// SessionIntegrations lists the integrations bound to a session.
func (s *Service) SessionIntegrations(ctx context.Context, orgID, sessionID string) ([]Integration, error) {
	return s.ownerIntegrations(ctx, "session_connections", "session_id", orgID, sessionID)
}

// table and column are constants of this file, never input.
func (s *Service) bindOwner(ctx context.Context, table, column, orgID, ownerID, integrationID string) error {
	if _, err := s.Lookup(ctx, orgID, integrationID); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO `+table+` (org_id, `+column+`, integration_id) VALUES ($1, $2, $3)
		ON CONFLICT (`+column+`, integration_id) DO NOTHING`, orgID, ownerID, integrationID)
	if err != nil {
		return fmt.Errorf("bind %s: %w", column, err)
	}
	return nil
}

func (s *Service) unbindOwner(ctx context.Context, table, column, orgID, ownerID, integrationID string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM `+table+` WHERE org_id = $1 AND `+column+` = $2 AND integration_id = $3`,
		orgID, ownerID, integrationID)
	if err != nil {
		return fmt.Errorf("unbind %s: %w", column, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrBindingNotFound
	}
	return nil
}

func (s *Service) ownerIntegrations(ctx context.Context, table, column, orgID, ownerID string) ([]Integration, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+integrationCols+` FROM `+table+` b
		JOIN integrations i ON i.id = b.integration_id LEFT JOIN users u ON u.id = i.created_by
		WHERE b.org_id = $1 AND i.org_id = $1 AND b.`+column+` = $2 ORDER BY b.created_at, b.id`, orgID, ownerID)
	if err != nil {
		return nil, fmt.Errorf("list %s integrations: %w", column, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Integration, error) { return scanIntegration(r) })
}
