package app

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/gateway"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/sessions"
)

// repoAccess gives sandboxes their repositories' git credentials and pull
// requests (gateway.RepoAccess): the session's configuration's repos, each
// with the active GitHub integration connected to it, and tokens narrowed
// to one repository.
type repoAccess struct{ a *App }

// cloneURL is the URL a repository is cloned from: github_url, else
// https://github.com/{name}.git.
func cloneURL(name, url string) string {
	switch {
	case url == "":
		return "https://github.com/" + name + ".git"
	case strings.HasPrefix(url, "https://github.com/") && !strings.HasSuffix(url, ".git"):
		return url + ".git"
	}
	return url
}

func (r repoAccess) SessionRepos(ctx context.Context, s sessions.Session) ([]gateway.SessionRepo, error) {
	if s.ConfigurationID == nil {
		return nil, nil
	}
	rows, err := r.a.Pool.Query(ctx, `SELECT r.github_repo_name, r.github_url, r.default_branch,
			COALESCE((SELECT rc.integration_id::text FROM repo_connections rc
				JOIN integrations i ON i.id = rc.integration_id AND i.org_id = rc.org_id
				WHERE rc.repo_id = r.id AND rc.org_id = r.org_id AND i.status = 'active'
				ORDER BY (i.provider = 'github-app') DESC, rc.created_at LIMIT 1), '')
		FROM configuration_repos cr JOIN repos r ON r.id = cr.repo_id AND r.org_id = cr.org_id
		WHERE cr.configuration_id = $1 AND cr.org_id = $2 ORDER BY cr.position`, *s.ConfigurationID, s.OrgID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (gateway.SessionRepo, error) {
		var x gateway.SessionRepo
		var url string
		err := row.Scan(&x.Name, &url, &x.DefaultBranch, &x.IntegrationID)
		x.CloneURL = cloneURL(x.Name, url)
		return x, err
	})
}

func (r repoAccess) RepoToken(ctx context.Context, orgID, integrationID, repo string) (integrations.Token, error) {
	svc, err := r.a.Integrations(ctx)
	if err != nil {
		return integrations.Token{}, err
	}
	return svc.TokenFor(ctx, orgID, integrationID, integrations.ForRepository(repo))
}
