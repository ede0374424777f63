package integrations

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/integrations/integrationsdb"
	"github.com/proliferate/proliferate/internal/repos"
	"github.com/proliferate/proliferate/internal/repos/reposdb"
)

// Bounds of what is read from an installation. GitHub lists 100 repositories
// per call, so an import reads at most MaxImportRepos/100 pages; an
// installation with more is imported partly (ImportResult.Truncated) and the
// rest can be added by name (POST /repos/import).
const (
	// MaxImportRepos caps the repositories imported when an installation
	// completes (and by one installation_repositories event).
	MaxImportRepos = 500
	// MaxAvailableRepos caps the repositories "available repos" searches.
	MaxAvailableRepos = 1000
	// MaxImportSelection caps the repositories one import request names.
	MaxImportSelection = 100
)

// ImportResult says what importing an installation's repositories did.
type ImportResult struct {
	// Imported are repos created; Updated existed (same GitHub id or name)
	// and were refreshed and bound; Skipped could not be stored (a name or URL
	// the platform refuses, or a clash with another repo of the org).
	Imported []string      `json:"imported_repo_ids"`
	Updated  []string      `json:"updated_repo_ids"`
	Skipped  []SkippedRepo `json:"skipped"`
	// Total is how many repositories GitHub says the installation has;
	// Truncated is set when more than the cap exist and only the first were
	// imported.
	Total     int  `json:"total_count"`
	Truncated bool `json:"truncated"`
	// Error is set when listing the installation's repositories failed (the
	// integration itself was saved; import again later).
	Error string `json:"error,omitempty"`
}

// SkippedRepo is a repository an import left out, and why.
type SkippedRepo struct {
	FullName string `json:"full_name"`
	Reason   string `json:"reason"`
}

// AvailableRepo is a repository of an installation, with whether the org
// already has it.
type AvailableRepo struct {
	GitHubRepository
	// RepoID is the org's repo for it, when imported.
	RepoID *string `json:"repo_id"`
}

// AvailablePage is one page of an installation's repositories matching a
// search.
type AvailablePage struct {
	Items   []AvailableRepo `json:"items"`
	Page    int             `json:"page"`
	PerPage int             `json:"per_page"`
	// Total matches the search (among the first MaxAvailableRepos of the
	// installation; Truncated says the installation has more).
	Total     int  `json:"total_count"`
	HasMore   bool `json:"has_more"`
	Truncated bool `json:"truncated"`
}

// githubIntegration resolves a GitHub App integration the viewer sees and
// that can mint tokens.
func (s *Service) githubIntegration(ctx context.Context, orgID, viewer, integrationID string) (Integration, error) {
	if s.github == nil {
		return Integration{}, ErrNotConfigured
	}
	it, err := s.get(ctx, s.pool, orgID, viewer, integrationID, lockNone)
	if err != nil {
		return it, err
	}
	if it.Provider != ProviderGitHubApp || it.GitHubInstallationID == 0 {
		return it, invalid("integration_id", "is not a GitHub App installation")
	}
	if it.Status != StatusActive {
		return it, ErrInactive
	}
	return it, nil
}

// ImportInstallationRepos lists an installation's repositories (every page,
// up to MaxImportRepos) and upserts them as repos of the org bound to the
// integration. Running it again changes nothing but refreshed metadata.
func (s *Service) ImportInstallationRepos(ctx context.Context, orgID, userID, integrationID string) (ImportResult, error) {
	it, err := s.githubIntegration(ctx, orgID, userID, integrationID)
	if err != nil {
		return ImportResult{}, err
	}
	list, total, truncated, err := s.github.AllInstallationRepositories(ctx, it.GitHubInstallationID, MaxImportRepos)
	if err != nil {
		return ImportResult{}, err
	}
	res, err := s.upsertRepos(ctx, orgID, userID, it.ID, list)
	res.Total, res.Truncated = total, truncated
	return res, err
}

// AvailableRepos searches an installation's repositories through its token:
// q matches full names case-insensitively (GitHub's listing has no search, so
// the first MaxAvailableRepos are read and filtered here); page is 1-based.
func (s *Service) AvailableRepos(ctx context.Context, orgID, viewer, integrationID, q string, page, perPage int) (AvailablePage, error) {
	it, err := s.githubIntegration(ctx, orgID, viewer, integrationID)
	if err != nil {
		return AvailablePage{}, err
	}
	list, _, truncated, err := s.github.AllInstallationRepositories(ctx, it.GitHubInstallationID, MaxAvailableRepos)
	if err != nil {
		return AvailablePage{}, err
	}
	q = strings.ToLower(strings.TrimSpace(q))
	var match []GitHubRepository
	for _, r := range list {
		if q == "" || strings.Contains(strings.ToLower(r.FullName), q) {
			match = append(match, r)
		}
	}
	slices.SortStableFunc(match, func(a, b GitHubRepository) int {
		return strings.Compare(strings.ToLower(a.FullName), strings.ToLower(b.FullName))
	})
	out := AvailablePage{Items: []AvailableRepo{}, Page: page, PerPage: perPage, Total: len(match), Truncated: truncated}
	start := (page - 1) * perPage
	if start >= len(match) {
		return out, nil
	}
	end := min(start+perPage, len(match))
	out.HasMore = end < len(match)
	ids := make([]string, 0, end-start)
	for _, r := range match[start:end] {
		ids = append(ids, strconv.FormatInt(r.ID, 10))
	}
	known := map[string]string{}
	rows, err := reposdb.New(s.pool).GitHubRepoIDsInOrg(ctx, reposdb.GitHubRepoIDsInOrgParams{OrgID: orgID, GithubRepoIds: ids})
	if err != nil {
		return AvailablePage{}, fmt.Errorf("available repos: %w", err)
	}
	for _, r := range rows {
		if r.GithubRepoID != nil {
			known[*r.GithubRepoID] = r.ID
		}
	}
	for _, r := range match[start:end] {
		a := AvailableRepo{GitHubRepository: r}
		if id, ok := known[strconv.FormatInt(r.ID, 10)]; ok {
			a.RepoID = &id
		}
		out.Items = append(out.Items, a)
	}
	return out, nil
}

// ImportRepos adds the chosen repositories of an installation (by GitHub id
// or full name) to the org, bound to the integration. A choice the
// installation cannot access is a validation error and nothing is imported.
func (s *Service) ImportRepos(ctx context.Context, orgID, userID, integrationID string, ids []int64, fullNames []string) (ImportResult, error) {
	if len(ids)+len(fullNames) == 0 {
		return ImportResult{}, invalid("repo_ids", "name at least one repository (repo_ids or full_names)")
	}
	if len(ids)+len(fullNames) > MaxImportSelection {
		return ImportResult{}, invalid("repo_ids", fmt.Sprintf("at most %d repositories per request", MaxImportSelection))
	}
	it, err := s.githubIntegration(ctx, orgID, userID, integrationID)
	if err != nil {
		return ImportResult{}, err
	}
	list, _, _, err := s.github.AllInstallationRepositories(ctx, it.GitHubInstallationID, MaxAvailableRepos)
	if err != nil {
		return ImportResult{}, err
	}
	byID := map[int64]GitHubRepository{}
	byName := map[string]GitHubRepository{}
	for _, r := range list {
		byID[r.ID] = r
		byName[strings.ToLower(r.FullName)] = r
	}
	var chosen []GitHubRepository
	seen := map[int64]bool{}
	var bad []FieldError
	add := func(r GitHubRepository) {
		if !seen[r.ID] {
			seen[r.ID] = true
			chosen = append(chosen, r)
		}
	}
	for i, id := range ids {
		r, ok := byID[id]
		if !ok {
			bad = append(bad, FieldError{fmt.Sprintf("repo_ids[%d]", i), "is not a repository this installation can access"})
			continue
		}
		add(r)
	}
	for i, n := range fullNames {
		r, ok := byName[strings.ToLower(strings.TrimSpace(n))]
		if !ok {
			bad = append(bad, FieldError{fmt.Sprintf("full_names[%d]", i), "is not a repository this installation can access"})
			continue
		}
		add(r)
	}
	if len(bad) > 0 {
		return ImportResult{}, &ValidationError{Fields: bad}
	}
	res, err := s.upsertRepos(ctx, orgID, userID, it.ID, chosen)
	res.Total = len(chosen)
	return res, err
}

// repoURL picks the URL a repo is cloned from: GitHub's clone_url, else its
// page.
func repoURL(r GitHubRepository) string {
	if r.CloneURL != "" {
		return r.CloneURL
	}
	return r.HTMLURL
}

// upsertRepos stores repositories as repos of the org bound to the
// integration, in one transaction serialized per org (two imports of the same
// installation cannot create the same repo twice). A repo matches an
// existing one by GitHub id, else by name (a repo added by hand before the
// installation); it is refreshed, un-orphaned and bound. Each repository is
// stored under a savepoint, so one clash skips that repository only.
func (s *Service) upsertRepos(ctx context.Context, orgID, userID, integrationID string, list []GitHubRepository) (ImportResult, error) {
	res := ImportResult{Imported: []string{}, Updated: []string{}, Skipped: []SkippedRepo{}}
	if len(list) == 0 {
		return res, nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := reposdb.New(tx).LockOrgReposImport(ctx, orgID); err != nil {
			return fmt.Errorf("lock org repos: %w", err)
		}
		// The integration must still be active and in the org (key-share lock
		// against a concurrent disconnect, as BindRepo does).
		st, err := integrationsdb.New(tx).IntegrationStatusForShare(ctx, integrationsdb.IntegrationStatusForShareParams{
			ID: integrationID, OrgID: orgID})
		status := Status(st)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("lock integration: %w", err)
		}
		if status != StatusActive {
			return ErrInactive
		}
		for _, r := range list {
			if why := checkGitHubRepo(r); why != "" {
				res.Skipped = append(res.Skipped, SkippedRepo{FullName: r.FullName, Reason: why})
				continue
			}
			id, created, err := upsertRepo(ctx, tx, orgID, userID, integrationID, r)
			if isUniqueViolation(err) {
				res.Skipped = append(res.Skipped, SkippedRepo{FullName: r.FullName, Reason: "clashes with another repo of the organization"})
				continue
			}
			if err != nil {
				return err
			}
			if created {
				res.Imported = append(res.Imported, id)
			} else {
				res.Updated = append(res.Updated, id)
			}
		}
		return nil
	})
	return res, err
}

func checkGitHubRepo(r GitHubRepository) string {
	if r.ID <= 0 {
		return "has no GitHub id"
	}
	if p := repos.CheckRepoName(r.FullName); p != "" {
		return "full_name " + p
	}
	if p := repos.CheckGitHubURL(repoURL(r)); p != "" {
		return "clone_url " + p
	}
	if r.DefaultBranch != "" {
		if p := repos.CheckBranch(r.DefaultBranch); p != "" {
			return "default_branch " + p
		}
	}
	return ""
}

func upsertRepo(ctx context.Context, outer pgx.Tx, orgID, userID, integrationID string, r GitHubRepository) (id string, created bool, err error) {
	err = pgx.BeginFunc(ctx, outer, func(tx pgx.Tx) error { // a savepoint
		gid := strconv.FormatInt(r.ID, 10)
		branch := r.DefaultBranch
		if branch == "" {
			branch = "main"
		}
		rq := reposdb.New(tx)
		var err error
		id, err = rq.ImportedRepoMatch(ctx, reposdb.ImportedRepoMatchParams{OrgID: orgID, GithubRepoID: &gid, GithubRepoName: r.FullName})
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			created = true
			id, err = rq.InsertImportedRepo(ctx, reposdb.InsertImportedRepoParams{OrgID: orgID, GithubRepoID: &gid,
				GithubRepoName: r.FullName, GithubUrl: repoURL(r), DefaultBranch: branch, IsPrivate: r.Private,
				AddedBy: nullableUser(userID)})
		case err == nil:
			err = rq.RefreshImportedRepo(ctx, reposdb.RefreshImportedRepoParams{ID: id, GithubRepoID: &gid,
				GithubRepoName: r.FullName, GithubUrl: repoURL(r), DefaultBranch: branch, IsPrivate: r.Private})
		}
		if err != nil {
			return err
		}
		_, err = integrationsdb.New(tx).BindRepo(ctx, integrationsdb.BindRepoParams{OrgID: orgID, RepoID: id,
			IntegrationID: integrationID, CreatedBy: nullableUser(userID)})
		return err
	})
	if err != nil && !isUniqueViolation(err) {
		err = fmt.Errorf("import repo %s: %w", r.FullName, err)
	}
	return id, created, err
}

func nullableUser(id string) *string {
	if id == "" {
		return nil
	}
	return &id
}

// SyncResult is what an installation_repositories event changed.
type SyncResult struct {
	// Integrations are the active integrations of the installation updated.
	Integrations int
	Imported     int
	Updated      int
	Skipped      int
	// Unbound repos lost this installation's connection; Orphaned of them
	// have no connection left (is_orphaned).
	Unbound  int
	Orphaned int
}

// SyncInstallationRepos applies GitHub's installation_repositories event:
// repositories added to the installation are imported into the org holding
// it (bound to its integration; metadata from the installation's listing,
// else from the event), removed ones lose the integration's connection and
// are flagged is_orphaned when no other connection is left (never deleted).
// Integrations that are not active are left alone. Applying the same event
// again changes nothing.
func (s *Service) SyncInstallationRepos(ctx context.Context, installationID int64, added []GitHubRepository, removed []int64) (SyncResult, error) {
	var res SyncResult
	refs, err := integrationsdb.New(s.pool).ActiveInstallationIntegrations(ctx, &installationID)
	if err != nil {
		return res, fmt.Errorf("find installation %d: %w", installationID, err)
	}
	if len(refs) == 0 {
		return res, nil
	}
	if len(added) > MaxImportRepos {
		added = added[:MaxImportRepos]
	}
	if len(added) > 0 && s.github != nil {
		// The event carries no clone URL or default branch: take them from
		// the installation's listing when it has the repository.
		list, _, _, err := s.github.AllInstallationRepositories(ctx, installationID, MaxAvailableRepos)
		if err != nil {
			return res, err
		}
		byID := map[int64]GitHubRepository{}
		for _, r := range list {
			byID[r.ID] = r
		}
		for i, a := range added {
			if r, ok := byID[a.ID]; ok {
				added[i] = r
			}
		}
	}
	for i, a := range added {
		if a.CloneURL == "" && a.HTMLURL == "" && a.FullName != "" {
			added[i].CloneURL = "https://github.com/" + a.FullName + ".git"
		}
	}
	removedIDs := make([]string, len(removed))
	for i, id := range removed {
		removedIDs[i] = strconv.FormatInt(id, 10)
	}
	for _, r := range refs {
		if len(added) > 0 {
			ir, err := s.upsertRepos(ctx, r.OrgID, "", r.ID, added)
			if errors.Is(err, ErrInactive) || errors.Is(err, ErrNotFound) {
				continue // disconnected meanwhile
			}
			if err != nil {
				return res, err
			}
			res.Imported += len(ir.Imported)
			res.Updated += len(ir.Updated)
			res.Skipped += len(ir.Skipped)
		}
		if len(removedIDs) > 0 {
			unbound, orphaned, err := s.unbindByGitHubID(ctx, r.OrgID, r.ID, removedIDs)
			if err != nil {
				return res, err
			}
			res.Unbound += unbound
			res.Orphaned += orphaned
		}
		res.Integrations++
	}
	return res, nil
}

// unbindByGitHubID removes the integration's connections of the org's repos
// with these GitHub ids and flags the repos left without any connection.
// Repos are locked first, as UnbindRepo does.
func (s *Service) unbindByGitHubID(ctx context.Context, orgID, integrationID string, githubIDs []string) (unbound, orphaned int, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rq := reposdb.New(tx)
		ids, err := rq.LockReposByGitHubID(ctx, reposdb.LockReposByGitHubIDParams{OrgID: orgID, GithubRepoIds: githubIDs})
		if err != nil {
			return fmt.Errorf("lock removed repos: %w", err)
		}
		if len(ids) == 0 {
			return nil
		}
		n, err := integrationsdb.New(tx).UnbindRepos(ctx, integrationsdb.UnbindReposParams{
			IntegrationID: integrationID, OrgID: orgID, RepoIds: ids})
		if err != nil {
			return fmt.Errorf("unbind removed repos: %w", err)
		}
		unbound = int(n)
		n, err = rq.OrphanUnboundRepos(ctx, reposdb.OrphanUnboundReposParams{OrgID: orgID, RepoIds: ids})
		if err != nil {
			return fmt.Errorf("flag orphaned repos: %w", err)
		}
		orphaned = int(n)
		return nil
	})
	return unbound, orphaned, err
}
