package app

import (
	"context"
	"strings"

	"github.com/proliferate/proliferate/gateway"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/prebuilds/prebuildsdb"
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
	list, err := prebuildsdb.New(r.a.Pool).ConfigurationRepoAccess(ctx, prebuildsdb.ConfigurationRepoAccessParams{
		ConfigurationID: *s.ConfigurationID, OrgID: s.OrgID})
	if err != nil {
		return nil, err
	}
	out := make([]gateway.SessionRepo, 0, len(list))
	for _, x := range list {
		out = append(out, gateway.SessionRepo{Name: x.GithubRepoName, CloneURL: cloneURL(x.GithubRepoName, x.GithubUrl),
			DefaultBranch: x.DefaultBranch, IntegrationID: x.IntegrationID})
	}
	return out, nil
}

func (r repoAccess) RepoToken(ctx context.Context, orgID, integrationID, repo string) (integrations.Token, error) {
	svc, err := r.a.Integrations(ctx)
	if err != nil {
		return integrations.Token{}, err
	}
	return svc.TokenFor(ctx, orgID, integrationID, integrations.ForRepository(repo))
}
