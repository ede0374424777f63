package integrations_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/integrations/fakes"
)

type installResponse struct {
	integrations.Integration
	ReposImport *integrations.ImportResult `json:"repos_import"`
}

func (e *env) install(t *testing.T, u *apitest.User, inst int64, status int) installResponse {
	t.Helper()
	var out installResponse
	e.Do(t, http.MethodPost, "/integrations/github-app", u.Token, map[string]any{
		"installation_id": inst, "state": e.githubState(t, u),
	}).Expect(t, status, &out)
	return out
}

func (e *env) countRows(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := e.Deps.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Installing the app imports every repository of the installation (across
// GitHub's pages), bound to the integration; a repo added by hand before is
// adopted, not duplicated; re-authorizing imports nothing twice.
func TestGitHubAppInstallImportsRepos(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	inst := nextInstallation()
	owner := "acct" + apitest.Unique("")
	e.gh.AddInstallation(fakes.GitHubInstallation{ID: inst, Login: owner})
	for i := range 150 {
		e.gh.AddListedRepo(inst, owner, fmt.Sprintf("svc-%03d", i), i%2 == 0)
	}
	other := e.gh.AddListedRepo(nextInstallation(), "someone-else", "secret", true) // another installation's
	// A repo added by hand before the app was installed (different case).
	var handID string
	if err := e.Deps.Pool.QueryRow(context.Background(), `INSERT INTO repos (org_id, github_repo_name, is_orphaned) VALUES ($1, $2, true) RETURNING id::text`,
		tm.owner.OrgID, strings.ToUpper(owner)+"/SVC-007").Scan(&handID); err != nil {
		t.Fatal(err)
	}
	calls := e.gh.RepoListCalls()

	got := e.install(t, tm.admin, inst, http.StatusCreated)
	imp := got.ReposImport
	if got.ID == "" || imp == nil || len(imp.Imported) != 149 || len(imp.Updated) != 1 || imp.Updated[0] != handID ||
		imp.Total != 150 || imp.Truncated || imp.Error != "" || len(imp.Skipped) != 0 {
		t.Fatalf("install: %+v", imp)
	}
	if n := e.gh.RepoListCalls() - calls; n != 2 {
		t.Fatalf("listing took %d calls, want 2 pages of 100", n)
	}
	if n := e.countRows(t, `SELECT count(*) FROM repos WHERE org_id = $1`, tm.owner.OrgID); n != 150 {
		t.Fatalf("org has %d repos, want 150", n)
	}
	if n := e.countRows(t, `SELECT count(*) FROM repo_connections WHERE integration_id = $1 AND org_id = $2`, got.ID, tm.owner.OrgID); n != 150 {
		t.Fatalf("%d bindings, want 150", n)
	}
	if n := e.countRows(t, `SELECT count(*) FROM repos WHERE github_repo_id = $1`, fmt.Sprint(other.ID)); n != 0 {
		t.Fatal("another installation's repository was imported")
	}
	var name, url, branch, gid string
	var private, orphaned bool
	if err := e.Deps.Pool.QueryRow(context.Background(), `SELECT github_repo_name, github_url, default_branch, is_private, is_orphaned, github_repo_id
		FROM repos WHERE id = $1`, handID).Scan(&name, &url, &branch, &private, &orphaned, &gid); err != nil {
		t.Fatal(err)
	}
	want := e.gh.ListedRepos(inst)[7]
	if name != owner+"/svc-007" || url != want.CloneURL || branch != "main" || private != want.Private || orphaned || gid != fmt.Sprint(want.ID) {
		t.Fatalf("adopted repo: %s %s %s private=%v orphaned=%v id=%s", name, url, branch, private, orphaned, gid)
	}
	// The repos are visible through the bindings route.
	var page struct{ Items []integrations.RepoBinding }
	e.Do(t, http.MethodGet, "/integrations/"+got.ID+"/repos?limit=100", tm.member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 100 {
		t.Fatalf("bindings page has %d items", len(page.Items))
	}

	// Re-authorizing (same installation, new state) duplicates nothing.
	again := e.install(t, tm.owner, inst, http.StatusOK)
	if again.ID != got.ID || len(again.ReposImport.Imported) != 0 || len(again.ReposImport.Updated) != 150 {
		t.Fatalf("re-authorize: %+v", again.ReposImport)
	}
	if n := e.countRows(t, `SELECT count(*) FROM repos WHERE org_id = $1`, tm.owner.OrgID); n != 150 {
		t.Fatalf("org has %d repos after re-authorizing, want 150", n)
	}
	if n := e.countRows(t, `SELECT count(*) FROM repo_connections WHERE integration_id = $1`, got.ID); n != 150 {
		t.Fatalf("%d bindings after re-authorizing, want 150", n)
	}
}

// The import is bounded: an installation with more repositories than the cap
// gets the first MaxImportRepos and says it was truncated.
func TestGitHubAppInstallImportIsBounded(t *testing.T) {
	e := newEnv(t)
	u := e.NewUser(t)
	inst := nextInstallation()
	e.gh.AddInstallation(fakes.GitHubInstallation{ID: inst, Login: "big"})
	for i := range integrations.MaxImportRepos + 20 {
		e.gh.AddListedRepo(inst, "big", fmt.Sprintf("r%04d", i), false)
	}
	got := e.install(t, u, inst, http.StatusCreated)
	if imp := got.ReposImport; len(imp.Imported) != integrations.MaxImportRepos || !imp.Truncated || imp.Total != integrations.MaxImportRepos+20 {
		t.Fatalf("bounded import: imported=%d truncated=%v total=%d", len(imp.Imported), imp.Truncated, imp.Total)
	}
	if n := e.countRows(t, `SELECT count(*) FROM repos WHERE org_id = $1`, u.OrgID); n != integrations.MaxImportRepos {
		t.Fatalf("org has %d repos", n)
	}
}

// When GitHub fails while listing, the installation is still saved and the
// answer says the import failed; nothing is imported.
func TestGitHubAppInstallImportFailureKeepsIntegration(t *testing.T) {
	e := newEnv(t)
	u := e.NewUser(t)
	inst := nextInstallation()
	e.gh.AddInstallation(fakes.GitHubInstallation{ID: inst, Login: "flaky"})
	e.gh.AddListedRepo(inst, "flaky", "one", false)
	e.gh.FailRepoList(http.StatusBadGateway)
	got := e.install(t, u, inst, http.StatusCreated)
	if got.ReposImport == nil || got.ReposImport.Error == "" || !strings.Contains(got.ReposImport.Error, "github") {
		t.Fatalf("import failure not reported: %+v", got.ReposImport)
	}
	if n := e.countRows(t, `SELECT count(*) FROM repos WHERE org_id = $1`, u.OrgID); n != 0 {
		t.Fatalf("org has %d repos", n)
	}
	// Fixed upstream: importing by name works.
	e.gh.FailRepoList(0)
	var res integrations.ImportResult
	e.Do(t, http.MethodPost, "/repos/import", u.Token, map[string]any{"integration_id": got.ID, "full_names": []string{"FLAKY/one"}}).
		Expect(t, http.StatusOK, &res)
	if len(res.Imported) != 1 {
		t.Fatalf("import: %+v", res)
	}
	// A suspended installation imports nothing and is not an error.
	inst2 := nextInstallation()
	e.gh.AddInstallation(fakes.GitHubInstallation{ID: inst2, Login: "sleepy", Suspended: true})
	if got := e.install(t, u, inst2, http.StatusCreated); got.ReposImport != nil {
		t.Fatalf("suspended installation imported: %+v", got.ReposImport)
	}
}

type availablePage struct {
	Items []struct {
		ID       int64   `json:"id"`
		FullName string  `json:"full_name"`
		Private  bool    `json:"private"`
		CloneURL string  `json:"clone_url"`
		RepoID   *string `json:"repo_id"`
	} `json:"items"`
	Page      int  `json:"page"`
	PerPage   int  `json:"per_page"`
	Total     int  `json:"total_count"`
	HasMore   bool `json:"has_more"`
	Truncated bool `json:"truncated"`
}

// Available repos search the installation through its token, page, and mark
// what the org already has; POST /repos/import adds chosen ones.
func TestAvailableReposAndImport(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	it := e.githubIntegration(t, tm.admin, "org") // no repositories yet: nothing imported
	acct := *it.DisplayName
	inst := it.GitHubInstallationID
	var web []fakes.ListedRepo
	for i := range 45 {
		e.gh.AddListedRepo(inst, acct, fmt.Sprintf("svc-%02d", i), false)
	}
	for i := range 5 {
		web = append(web, e.gh.AddListedRepo(inst, acct, fmt.Sprintf("Web-%d", i), true))
	}
	path := "/integrations/" + it.ID + "/available-repos"

	var p availablePage
	e.Do(t, http.MethodGet, path+"?q=WEB", tm.member.Token, nil).Expect(t, http.StatusOK, &p)
	if p.Total != 5 || len(p.Items) != 5 || p.HasMore || p.Items[0].FullName != acct+"/Web-0" || !p.Items[0].Private || p.Items[0].RepoID != nil {
		t.Fatalf("search: %+v", p)
	}
	e.Do(t, http.MethodGet, path+"?per_page=20&page=2", tm.member.Token, nil).Expect(t, http.StatusOK, &p)
	if p.Total != 50 || len(p.Items) != 20 || !p.HasMore || p.Page != 2 || p.Items[0].FullName != acct+"/svc-20" {
		t.Fatalf("page 2: total=%d items=%d more=%v first=%v", p.Total, len(p.Items), p.HasMore, p.Items)
	}
	e.Do(t, http.MethodGet, path+"?per_page=20&page=3", tm.member.Token, nil).Expect(t, http.StatusOK, &p)
	if len(p.Items) != 10 || p.HasMore {
		t.Fatalf("page 3: items=%d more=%v", len(p.Items), p.HasMore)
	}
	e.Do(t, http.MethodGet, path+"?page=9", tm.member.Token, nil).Expect(t, http.StatusOK, &p)
	if len(p.Items) != 0 || p.Total != 50 {
		t.Fatalf("past the end: %+v", p)
	}

	var res integrations.ImportResult
	e.Do(t, http.MethodPost, "/repos/import", tm.admin.Token, map[string]any{
		"integration_id": it.ID, "full_names": []string{strings.ToLower(acct + "/web-1")}, "repo_ids": []int64{web[2].ID, web[1].ID},
	}).Expect(t, http.StatusOK, &res)
	if len(res.Imported) != 2 || len(res.Updated) != 0 {
		t.Fatalf("import: %+v", res)
	}
	e.Do(t, http.MethodGet, path+"?q=web", tm.member.Token, nil).Expect(t, http.StatusOK, &p)
	marked := 0
	for _, x := range p.Items {
		if x.RepoID != nil {
			marked++
		}
	}
	if marked != 2 {
		t.Fatalf("%d available repos marked imported, want 2: %+v", marked, p.Items)
	}
	// Again: nothing new.
	e.Do(t, http.MethodPost, "/repos/import", tm.owner.Token, map[string]any{"integration_id": it.ID, "repo_ids": []int64{web[1].ID}}).
		Expect(t, http.StatusOK, &res)
	if len(res.Imported) != 0 || len(res.Updated) != 1 {
		t.Fatalf("re-import: %+v", res)
	}
	count := func() int { return e.countRows(t, `SELECT count(*) FROM repos WHERE org_id = $1`, tm.owner.OrgID) }
	if count() != 2 {
		t.Fatalf("org has %d repos", count())
	}

	// Bad input: precise 4xx, nothing written.
	expectFields(t, e.Do(t, http.MethodPost, "/repos/import", tm.admin.Token, map[string]any{
		"integration_id": it.ID, "full_names": []string{acct + "/web-3", "someone/else"}}), "full_names[1]")
	expectFields(t, e.Do(t, http.MethodPost, "/repos/import", tm.admin.Token, map[string]any{"integration_id": it.ID}), "repo_ids")
	expectFields(t, e.Do(t, http.MethodPost, "/repos/import", tm.admin.Token, map[string]any{"integration_id": "nope", "repo_ids": []int64{1}}), "integration_id")
	e.Do(t, http.MethodPost, "/repos/import", tm.admin.Token, map[string]any{"integration_id": "00000000-0000-0000-0000-000000000000", "repo_ids": []int64{1}}).
		ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodPost, "/repos/import", tm.member.Token, map[string]any{"integration_id": it.ID, "repo_ids": []int64{web[3].ID}}).
		ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	expectFields(t, e.Do(t, http.MethodGet, path+"?page=0", tm.member.Token, nil), "page")
	expectFields(t, e.Do(t, http.MethodGet, path+"?per_page=101", tm.member.Token, nil), "per_page")
	expectFields(t, e.Do(t, http.MethodGet, path+"?q="+strings.Repeat("a", 201), tm.member.Token, nil), "q")
	e.Do(t, http.MethodGet, "/integrations/not-a-uuid/available-repos", tm.member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	// Another org sees nothing of this integration.
	stranger := e.NewUser(t)
	e.Do(t, http.MethodGet, path, stranger.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodPost, "/repos/import", stranger.Token, map[string]any{"integration_id": it.ID, "repo_ids": []int64{web[3].ID}}).
		ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	// A Nango integration has no installation to list.
	ng := e.nangoIntegration(t, tm.admin, "sentry", sentryToken)
	expectFields(t, e.Do(t, http.MethodGet, "/integrations/"+ng.ID+"/available-repos", tm.member.Token, nil), "integration_id")
	if count() != 2 {
		t.Fatalf("rejected requests wrote repos: %d", count())
	}

	// GitHub failing: 502 with the error shape, naming GitHub.
	e.gh.FailRepoList(http.StatusInternalServerError)
	body := e.Do(t, http.MethodGet, path, tm.member.Token, nil).ExpectError(t, http.StatusBadGateway, httpapi.CodeUnavailable)
	if !strings.Contains(body.Error.Message, "github") {
		t.Fatalf("502 message: %q", body.Error.Message)
	}
	e.Do(t, http.MethodPost, "/repos/import", tm.admin.Token, map[string]any{"integration_id": it.ID, "repo_ids": []int64{web[3].ID}}).
		ExpectError(t, http.StatusBadGateway, httpapi.CodeUnavailable)
	e.gh.FailRepoList(0)
	if count() != 2 {
		t.Fatalf("failed requests wrote repos: %d", count())
	}
}

type finalizeResponse struct {
	Configuration struct {
		ID             string `json:"id"`
		Name           string `json:"name"`
		SnapshotStatus string `json:"snapshot_status"`
		Repos          []struct {
			RepoID         string `json:"repo_id"`
			GitHubRepoName string `json:"github_repo_name"`
			WorkspacePath  string `json:"workspace_path"`
		} `json:"repos"`
	} `json:"configuration"`
	RepoIDs []string `json:"repo_ids"`
	IsNew   bool     `json:"is_new"`
}

// Onboarding's finalize step imports the picked repositories and creates the
// default configuration holding them (once: finalizing again returns it).
func TestOnboardingFinalize(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	it := e.githubIntegration(t, tm.admin, "org")
	acct := *it.DisplayName
	api1 := e.gh.AddListedRepo(it.GitHubInstallationID, acct, "api", true)
	e.gh.AddListedRepo(it.GitHubInstallationID, acct, "web", false)
	e.gh.AddListedRepo(it.GitHubInstallationID, acct, "unpicked", false)

	var one finalizeResponse
	e.Do(t, http.MethodPost, "/onboarding/finalize", tm.admin.Token, map[string]any{"integration_id": it.ID, "repo_ids": []int64{api1.ID}}).
		Expect(t, http.StatusCreated, &one)
	if !one.IsNew || one.Configuration.Name != "api" || len(one.Configuration.Repos) != 1 || one.Configuration.Repos[0].WorkspacePath != "." ||
		one.Configuration.SnapshotStatus != "none" {
		t.Fatalf("single-repo finalize: %+v", one)
	}
	var two finalizeResponse
	body := map[string]any{"integration_id": it.ID, "full_names": []string{acct + "/web", acct + "/api"}, "configuration_name": " Main app "}
	e.Do(t, http.MethodPost, "/onboarding/finalize", tm.owner.Token, body).Expect(t, http.StatusCreated, &two)
	if !two.IsNew || two.Configuration.Name != "Main app" || len(two.RepoIDs) != 2 || two.Configuration.ID == one.Configuration.ID {
		t.Fatalf("multi-repo finalize: %+v", two)
	}
	paths := map[string]bool{}
	for _, r := range two.Configuration.Repos {
		paths[r.WorkspacePath] = true
	}
	if !paths["api"] || !paths["web"] {
		t.Fatalf("workspace paths: %+v", two.Configuration.Repos)
	}
	// Again (another order): the same configuration, nothing new.
	var again finalizeResponse
	body["full_names"] = []string{acct + "/api", acct + "/web"}
	e.Do(t, http.MethodPost, "/onboarding/finalize", tm.owner.Token, body).Expect(t, http.StatusOK, &again)
	if again.IsNew || again.Configuration.ID != two.Configuration.ID {
		t.Fatalf("finalize again: %+v", again)
	}
	cfgs := func() int {
		return e.countRows(t, `SELECT count(*) FROM configurations WHERE org_id = $1`, tm.owner.OrgID)
	}
	if cfgs() != 2 || e.countRows(t, `SELECT count(*) FROM repos WHERE org_id = $1`, tm.owner.OrgID) != 2 {
		t.Fatalf("configurations=%d", cfgs())
	}
	// Bad input changes nothing.
	expectFields(t, e.Do(t, http.MethodPost, "/onboarding/finalize", tm.admin.Token, map[string]any{"integration_id": it.ID}), "repo_ids")
	expectFields(t, e.Do(t, http.MethodPost, "/onboarding/finalize", tm.admin.Token, map[string]any{"integration_id": it.ID,
		"repo_ids": []int64{api1.ID}, "configuration_name": "  "}), "configuration_name")
	expectFields(t, e.Do(t, http.MethodPost, "/onboarding/finalize", tm.admin.Token, map[string]any{"integration_id": it.ID,
		"repo_ids": []int64{api1.ID, 1}}), "repo_ids[1]")
	e.Do(t, http.MethodPost, "/onboarding/finalize", tm.member.Token, map[string]any{"integration_id": it.ID, "repo_ids": []int64{api1.ID}}).
		ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	e.gh.FailRepoList(http.StatusServiceUnavailable)
	e.Do(t, http.MethodPost, "/onboarding/finalize", tm.admin.Token, map[string]any{"integration_id": it.ID, "full_names": []string{acct + "/unpicked"}}).
		ExpectError(t, http.StatusBadGateway, httpapi.CodeUnavailable)
	e.gh.FailRepoList(0)
	if cfgs() != 2 || e.countRows(t, `SELECT count(*) FROM repos WHERE org_id = $1`, tm.owner.OrgID) != 2 {
		t.Fatal("rejected finalize requests wrote rows")
	}
}

// Concurrent imports of the same repositories (a double-clicked import
// button, an install callback racing a picker) create each repo once.
func TestConcurrentImportsDoNotDuplicate(t *testing.T) {
	e := newEnv(t)
	u := e.NewUser(t)
	it := e.githubIntegration(t, u, "org")
	var names []string
	for i := range 20 {
		r := e.gh.AddListedRepo(it.GitHubInstallationID, *it.DisplayName, fmt.Sprintf("c%02d", i), false)
		names = append(names, r.Owner+"/"+r.Name)
	}
	errs := make(chan error, 6)
	for range 6 {
		go func() {
			r := e.Do(t, http.MethodPost, "/repos/import", u.Token, map[string]any{"integration_id": it.ID, "full_names": names})
			if r.Status != http.StatusOK {
				errs <- fmt.Errorf("import answered %d: %s", r.Status, r.Body)
				return
			}
			errs <- nil
		}()
	}
	for range 6 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := e.countRows(t, `SELECT count(*) FROM repos WHERE org_id = $1`, u.OrgID); n != 20 {
		t.Fatalf("org has %d repos, want 20", n)
	}
	if n := e.countRows(t, `SELECT count(*) FROM repo_connections WHERE integration_id = $1`, it.ID); n != 20 {
		t.Fatalf("%d bindings, want 20", n)
	}
}
