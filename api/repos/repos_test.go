package repos_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/api"
	reposapi "github.com/proliferate/proliferate/api/repos"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/repos"
)

func TestRepoLifecycle(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)

	// Defaults: URL from the name, branch main, and the single-repo
	// configuration the original always creates.
	var created reposapi.CreatedRepo
	env.Do(t, http.MethodPost, "/repos", o.Admin.Token, map[string]any{"github_repo_name": "Acme/Web-App", "github_repo_id": "12345"}).
		Expect(t, http.StatusCreated, &created)
	if created.GitHubURL != "https://github.com/Acme/Web-App" || created.DefaultBranch != "main" || created.IsPrivate ||
		created.GitHubRepoID == nil || *created.GitHubRepoID != "12345" || created.OrgID != o.ID ||
		created.AddedBy == nil || *created.AddedBy != o.Admin.ID || len(created.ServiceCommands) != 0 {
		t.Fatalf("created repo: %+v", created)
	}
	if created.ConfigurationID == nil {
		t.Fatal("no configuration created with the repo")
	}
	var cfg repos.Configuration
	env.Do(t, http.MethodGet, "/configurations/"+*created.ConfigurationID, o.Member.Token, nil).Expect(t, http.StatusOK, &cfg)
	if cfg.Name != "Web-App" || len(cfg.Repos) != 1 || cfg.Repos[0].RepoID != created.ID || cfg.Repos[0].WorkspacePath != "." ||
		cfg.SnapshotStatus != repos.SnapshotNone || cfg.CreatedBy == nil || *cfg.CreatedBy != o.Admin.ID {
		t.Fatalf("auto configuration: %+v", cfg)
	}

	// Explicit values; no configuration when asked not to.
	var other reposapi.CreatedRepo
	env.Do(t, http.MethodPost, "/repos", o.Owner.Token, map[string]any{"github_repo_name": "acme/api",
		"github_url": "https://ghe.example.com/acme/api", "default_branch": "release/v2", "is_private": true, "create_configuration": false}).
		Expect(t, http.StatusCreated, &other)
	if other.GitHubURL != "https://ghe.example.com/acme/api" || other.DefaultBranch != "release/v2" || !other.IsPrivate ||
		other.ConfigurationID != nil || other.GitHubRepoID != nil {
		t.Fatalf("explicit repo: %+v", other)
	}

	var got repos.Repo
	env.Do(t, http.MethodGet, "/repos/"+created.ID, o.Member.Token, nil).Expect(t, http.StatusOK, &got)
	if got.ID != created.ID || got.GitHubRepoName != "Acme/Web-App" {
		t.Fatalf("get: %+v", got)
	}
	// Ids are case-insensitive UUIDs.
	env.Do(t, http.MethodGet, "/repos/"+strings.ToUpper(created.ID), o.Member.Token, nil).Expect(t, http.StatusOK, nil)

	var patched repos.Repo
	env.Do(t, http.MethodPatch, "/repos/"+created.ID, o.Admin.Token, map[string]any{"default_branch": "develop", "is_private": true}).
		Expect(t, http.StatusOK, &patched)
	if patched.DefaultBranch != "develop" || !patched.IsPrivate || patched.GitHubRepoName != "Acme/Web-App" ||
		patched.GitHubURL != created.GitHubURL || !patched.UpdatedAt.After(created.UpdatedAt) {
		t.Fatalf("patched: %+v", patched)
	}
	env.Do(t, http.MethodPatch, "/repos/"+created.ID, o.Admin.Token, map[string]any{"github_repo_name": "acme/web"}).Expect(t, http.StatusOK, &patched)
	if patched.GitHubRepoName != "acme/web" {
		t.Fatalf("renamed: %+v", patched)
	}

	// Repo-level service commands.
	var withCmds repos.Repo
	env.Do(t, http.MethodPut, "/repos/"+created.ID+"/service-commands", o.Admin.Token, map[string]any{"service_commands": []map[string]any{
		{"name": " dev ", "command": "pnpm dev", "cwd": "./apps/web/"}, {"name": "db", "command": "docker compose up db"}}}).
		Expect(t, http.StatusOK, &withCmds)
	want := []repos.RepoServiceCommand{{Name: "dev", Command: "pnpm dev", Cwd: "apps/web"}, {Name: "db", Command: "docker compose up db"}}
	if len(withCmds.ServiceCommands) != 2 || withCmds.ServiceCommands[0] != want[0] || withCmds.ServiceCommands[1] != want[1] ||
		withCmds.ServiceCommandsUpdatedBy == nil || *withCmds.ServiceCommandsUpdatedBy != o.Admin.ID || withCmds.ServiceCommandsUpdatedAt == nil {
		t.Fatalf("service commands: %+v", withCmds)
	}
	env.Do(t, http.MethodDelete, "/repos/"+created.ID+"/service-commands", o.Owner.Token, nil).Expect(t, http.StatusOK, &withCmds)
	if len(withCmds.ServiceCommands) != 0 || *withCmds.ServiceCommandsUpdatedBy != o.Owner.ID {
		t.Fatalf("cleared: %+v", withCmds)
	}

	var page api.Page[repos.Repo]
	env.Do(t, http.MethodGet, "/repos", o.Member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 2 || page.Items[0].ID != other.ID || page.Items[1].ID != created.ID || page.NextCursor != "" {
		t.Fatalf("list: %+v", page)
	}

	// Deleting the repo deletes its single-repo configuration.
	var res repos.DeleteRepoResult
	env.Do(t, http.MethodDelete, "/repos/"+created.ID, o.Admin.Token, nil).Expect(t, http.StatusOK, &res)
	if len(res.DeletedConfigurations) != 1 || res.DeletedConfigurations[0] != *created.ConfigurationID || len(res.UpdatedConfigurations) != 0 {
		t.Fatalf("delete result: %+v", res)
	}
	env.Do(t, http.MethodGet, "/repos/"+created.ID, o.Admin.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodDelete, "/repos/"+created.ID, o.Admin.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	if n := env.CountRows(t, "configurations", "id = $1", *created.ConfigurationID); n != 0 {
		t.Fatal("configuration survived its only repo")
	}
}

func TestRepoDuplicates(t *testing.T) {
	env := newEnv(t)
	a, b := env.NewOrg(t), env.NewOrg(t)
	first := createRepo(t, env, a.Admin.Token, "acme/app", map[string]any{"github_repo_id": "777"})
	second := createRepo(t, env, a.Admin.Token, "acme/lib", nil)
	before := env.CountRows(t, "repos", "org_id = $1", a.ID)

	for name, body := range map[string]map[string]any{
		"same name":                {"github_repo_name": "acme/app"},
		"same name, another case":  {"github_repo_name": "ACME/App"},
		"same GitHub id":           {"github_repo_name": "acme/renamed", "github_repo_id": "777"},
		"same name with auto conf": {"github_repo_name": "acme/app", "create_configuration": true},
	} {
		t.Run(name, func(t *testing.T) {
			env.Do(t, http.MethodPost, "/repos", a.Admin.Token, body).ExpectError(t, http.StatusConflict, "repo_exists")
		})
	}
	if n := env.CountRows(t, "repos", "org_id = $1", a.ID); n != before {
		t.Fatalf("repos %d, want %d", n, before)
	}
	if n := env.CountRows(t, "configurations", "org_id = $1", a.ID); n != 0 {
		t.Fatal("a rejected create left a configuration behind")
	}
	// Renaming onto another repo's name or id conflicts too, and changes nothing.
	row := rowJSON(t, env, "repos", second.ID)
	env.Do(t, http.MethodPatch, "/repos/"+second.ID, a.Admin.Token, map[string]any{"github_repo_name": "Acme/APP"}).
		ExpectError(t, http.StatusConflict, "repo_exists")
	env.Do(t, http.MethodPatch, "/repos/"+second.ID, a.Admin.Token, map[string]any{"github_repo_id": "777"}).
		ExpectError(t, http.StatusConflict, "repo_exists")
	if rowJSON(t, env, "repos", second.ID) != row {
		t.Fatal("a conflicting patch changed the repo")
	}
	// Another organization may add the same repository.
	createRepo(t, env, b.Admin.Token, "acme/app", map[string]any{"github_repo_id": "777"})
	_ = first
}

func TestRepoSearchIsLiteral(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	other := env.NewOrg(t)
	for _, n := range []string{"acme/my_app", "acme/myxapp", "acme/Web-App", "acme/web.site", "acme/100-percent"} {
		createRepo(t, env, o.Admin.Token, n, nil)
	}
	createRepo(t, env, other.Admin.Token, "acme/my_app_elsewhere", nil)

	search := func(q string) []string {
		t.Helper()
		var page api.Page[repos.Repo]
		env.Do(t, http.MethodGet, "/repos?q="+url.QueryEscape(q), o.Member.Token, nil).Expect(t, http.StatusOK, &page)
		var names []string
		for _, r := range page.Items {
			names = append(names, r.GitHubRepoName)
		}
		return names
	}
	for q, want := range map[string]string{
		"_":       "acme/my_app", // "_" is not "any character"
		"my_":     "acme/my_app",
		"%":       "", // nor is "%" "anything"
		"100%":    "",
		"WEB-":    "acme/Web-App", // case-insensitive
		"web":     "acme/web.site,acme/Web-App",
		".":       "acme/web.site",
		`\`:       "",
		`\_`:      "",
		"acme/my": "acme/myxapp,acme/my_app",
		"zzz":     "",
		"":        "acme/100-percent,acme/web.site,acme/Web-App,acme/myxapp,acme/my_app",
	} {
		if got := strings.Join(search(q), ","); got != want {
			t.Errorf("q=%q: %q, want %q", q, got, want)
		}
	}
	expectInvalid(t, env.Do(t, http.MethodGet, "/repos?q="+strings.Repeat("a", 201), o.Member.Token, nil), "q")
	expectInvalid(t, env.Do(t, http.MethodGet, "/repos?q=%00", o.Member.Token, nil), "q")
}

func TestRepoPagination(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	var ids []string
	for i := range 5 {
		ids = append([]string{createRepo(t, env, o.Admin.Token, "acme/r"+string(rune('a'+i)), nil).ID}, ids...)
	}
	var seen []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatal("too many pages")
		}
		var page api.Page[repos.Repo]
		env.Do(t, http.MethodGet, "/repos?limit=2&cursor="+cursor, o.Member.Token, nil).Expect(t, http.StatusOK, &page)
		for _, r := range page.Items {
			seen = append(seen, r.ID)
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if strings.Join(seen, ",") != strings.Join(ids, ",") {
		t.Fatalf("pages %v, want %v", seen, ids)
	}
	expectInvalid(t, env.Do(t, http.MethodGet, "/repos?limit=0", o.Member.Token, nil), "limit")
	expectInvalid(t, env.Do(t, http.MethodGet, "/repos?limit=101", o.Member.Token, nil), "limit")
	expectInvalid(t, env.Do(t, http.MethodGet, "/repos?cursor=garbage", o.Member.Token, nil), "cursor")
	// A well-formed cursor whose id is not a UUID is refused, not a 500.
	expectInvalid(t, env.Do(t, http.MethodGet, "/repos?cursor=eyJ0IjoiMjAyNi0wMS0wMVQwMDowMDowMFoiLCJpIjoieCJ9", o.Member.Token, nil), "cursor")
}

func TestRepoIsolation(t *testing.T) {
	env := newEnv(t)
	a, b := env.NewOrg(t), env.NewOrg(t)
	theirs := createRepo(t, env, b.Admin.Token, "acme/secret-project", map[string]any{"create_configuration": true})
	mine := createRepo(t, env, a.Admin.Token, "acme/mine", nil)
	row := rowJSON(t, env, "repos", theirs.ID)

	for _, tok := range []string{a.Owner.Token, a.Admin.Token, a.Member.Token} {
		env.Do(t, http.MethodGet, "/repos/"+theirs.ID, tok, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	}
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{http.MethodPatch, "/repos/" + theirs.ID, map[string]any{"default_branch": "pwned"}},
		{http.MethodDelete, "/repos/" + theirs.ID, nil},
		{http.MethodPut, "/repos/" + theirs.ID + "/service-commands", map[string]any{"service_commands": []map[string]any{{"name": "x", "command": "curl evil"}}}},
		{http.MethodDelete, "/repos/" + theirs.ID + "/service-commands", nil},
	} {
		env.Do(t, c.method, c.path, a.Owner.Token, c.body).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	}
	if rowJSON(t, env, "repos", theirs.ID) != row {
		t.Fatal("another organization's write changed the repo")
	}
	if n := env.CountRows(t, "configurations", "id = $1", *theirs.ConfigurationID); n != 1 {
		t.Fatal("another organization's delete touched the configuration")
	}
	var page api.Page[repos.Repo]
	env.Do(t, http.MethodGet, "/repos?q=acme", a.Owner.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 1 || page.Items[0].ID != mine.ID {
		t.Fatalf("list leaks: %+v", page.Items)
	}
	// Malformed and unknown ids are 404 as well.
	for _, id := range []string{"not-a-uuid", missingID, "' OR 1=1 --"} {
		env.Do(t, http.MethodGet, "/repos/"+url.PathEscape(id), a.Owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	}
	// A user without an active organization cannot list anything.
	loner := env.NewUser(t)
	env.Exec(t, `UPDATE users SET active_org_id = NULL WHERE id = $1`, loner.ID)
	env.Do(t, http.MethodGet, "/repos", loner.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
}

func TestRepoRoleMatrix(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	target := createRepo(t, env, o.Owner.Token, "acme/target", nil)

	type call struct {
		name, method, path string
		body               any
		status             int
	}
	n := 0
	calls := func() []call {
		n++
		return []call{
			{"create", http.MethodPost, "/repos", map[string]any{"github_repo_name": "acme/new-" + string(rune('a'+n)), "create_configuration": false}, http.StatusCreated},
			{"patch", http.MethodPatch, "/repos/" + target.ID, map[string]any{"default_branch": "b" + string(rune('a'+n))}, http.StatusOK},
			{"put commands", http.MethodPut, "/repos/" + target.ID + "/service-commands", map[string]any{"service_commands": []map[string]any{{"name": "dev", "command": "make dev"}}}, http.StatusOK},
			{"clear commands", http.MethodDelete, "/repos/" + target.ID + "/service-commands", nil, http.StatusOK},
			{"list", http.MethodGet, "/repos", nil, http.StatusOK},
			{"get", http.MethodGet, "/repos/" + target.ID, nil, http.StatusOK},
		}
	}
	for _, c := range calls() {
		before := rowJSON(t, env, "repos", target.ID)
		count := env.CountRows(t, "repos", "org_id = $1", o.ID)
		resp := env.Do(t, c.method, c.path, o.Member.Token, c.body)
		if c.method == http.MethodGet {
			resp.Expect(t, http.StatusOK, nil)
			continue
		}
		resp.ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
		if rowJSON(t, env, "repos", target.ID) != before || env.CountRows(t, "repos", "org_id = $1", o.ID) != count {
			t.Fatalf("member %s wrote something", c.name)
		}
	}
	for _, u := range []string{o.Admin.Token, o.Owner.Token} {
		for _, c := range calls() {
			env.Do(t, c.method, c.path, u, c.body).Expect(t, c.status, nil)
		}
	}
	// Delete: member no, admin yes, owner yes.
	env.Do(t, http.MethodDelete, "/repos/"+target.ID, o.Member.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	env.Do(t, http.MethodDelete, "/repos/"+target.ID, o.Admin.Token, nil).Expect(t, http.StatusOK, nil)
	other := createRepo(t, env, o.Admin.Token, "acme/other", nil)
	env.Do(t, http.MethodDelete, "/repos/"+other.ID, o.Owner.Token, nil).Expect(t, http.StatusOK, nil)
	// A demoted admin loses write access at once.
	env.AddMember(t, o.Admin, o.ID, auth.RoleMember)
	env.Do(t, http.MethodPost, "/repos", o.Admin.Token, map[string]any{"github_repo_name": "acme/late"}).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
}

func TestRepoInvalidInput(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	target := createRepo(t, env, o.Admin.Token, "acme/target", nil)
	long := func(n int) string { return strings.Repeat("a", n) }
	cmd := func(kv ...string) map[string]any {
		m := map[string]any{"name": "dev", "command": "make dev"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cmds := func(n int) []map[string]any {
		out := make([]map[string]any, n)
		for i := range out {
			out[i] = map[string]any{"name": "svc" + string(rune('a'+i)), "command": "run"}
		}
		return out
	}

	type tc struct {
		name   string
		body   any
		fields []string // 422 with these fields
		status int      // other 4xx
		code   string
	}
	run := func(t *testing.T, method, path string, cases []tc) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				repos := env.CountRows(t, "repos", "org_id = $1", o.ID)
				cfgs := env.CountRows(t, "configurations", "org_id = $1", o.ID)
				row := rowJSON(t, env, "repos", target.ID)
				resp := env.Do(t, method, path, o.Admin.Token, c.body)
				if c.fields != nil {
					expectInvalid(t, resp, c.fields...)
				} else {
					resp.ExpectError(t, c.status, c.code)
				}
				if env.CountRows(t, "repos", "org_id = $1", o.ID) != repos || env.CountRows(t, "configurations", "org_id = $1", o.ID) != cfgs ||
					rowJSON(t, env, "repos", target.ID) != row {
					t.Fatal("a rejected request wrote something")
				}
			})
		}
	}
	common := []tc{
		{name: "malformed JSON", body: `{"github_repo_name": `, status: 400, code: httpapi.CodeBadRequest},
		{name: "empty body", body: ``, status: 400, code: httpapi.CodeBadRequest},
		{name: "array body", body: `[]`, fields: []string{"(body)"}},
		{name: "trailing data", body: `{"github_repo_name": "acme/x"} {}`, status: 400, code: httpapi.CodeBadRequest},
		{name: "unknown field", body: `{"github_repo_name": "acme/x", "owner": "me"}`, fields: []string{"owner"}},
		{name: "wrong type", body: `{"github_repo_name": 42}`, fields: []string{"github_repo_name"}},
	}
	t.Run("POST /repos", func(t *testing.T) {
		run(t, http.MethodPost, "/repos", append(common, []tc{
			{name: "missing name", body: map[string]any{}, fields: []string{"github_repo_name"}},
			{name: "name without owner", body: map[string]any{"github_repo_name": "app"}, fields: []string{"github_repo_name"}},
			{name: "name with slash", body: map[string]any{"github_repo_name": "a/b/c"}, fields: []string{"github_repo_name"}},
			{name: "name with space", body: map[string]any{"github_repo_name": "acme/my app"}, fields: []string{"github_repo_name"}},
			{name: "name dotdot", body: map[string]any{"github_repo_name": "acme/.."}, fields: []string{"github_repo_name"}},
			{name: "name percent", body: map[string]any{"github_repo_name": "acme/100%"}, fields: []string{"github_repo_name"}},
			{name: "owner too long", body: map[string]any{"github_repo_name": long(40) + "/x"}, fields: []string{"github_repo_name"}},
			{name: "name too long", body: map[string]any{"github_repo_name": "a/" + long(139)}, fields: []string{"github_repo_name"}},
			{name: "url not http", body: map[string]any{"github_repo_name": "acme/x", "github_url": "ftp://github.com/acme/x"}, fields: []string{"github_url"}},
			{name: "url relative", body: map[string]any{"github_repo_name": "acme/x", "github_url": "/acme/x"}, fields: []string{"github_url"}},
			{name: "url empty", body: map[string]any{"github_repo_name": "acme/x", "github_url": ""}, fields: []string{"github_url"}},
			{name: "url with credentials", body: map[string]any{"github_repo_name": "acme/x", "github_url": "https://x:ghp_token@github.com/acme/x"}, fields: []string{"github_url"}},
			{name: "url too long", body: map[string]any{"github_repo_name": "acme/x", "github_url": "https://github.com/" + long(490)}, fields: []string{"github_url"}},
			{name: "branch with space", body: map[string]any{"github_repo_name": "acme/x", "default_branch": "my branch"}, fields: []string{"default_branch"}},
			{name: "branch dotdot", body: map[string]any{"github_repo_name": "acme/x", "default_branch": "a..b"}, fields: []string{"default_branch"}},
			{name: "branch lock", body: map[string]any{"github_repo_name": "acme/x", "default_branch": "main.lock"}, fields: []string{"default_branch"}},
			{name: "branch empty", body: map[string]any{"github_repo_name": "acme/x", "default_branch": ""}, fields: []string{"default_branch"}},
			{name: "branch too long", body: map[string]any{"github_repo_name": "acme/x", "default_branch": long(256)}, fields: []string{"default_branch"}},
			{name: "github id not numeric", body: map[string]any{"github_repo_name": "acme/x", "github_repo_id": "abc"}, fields: []string{"github_repo_id"}},
			{name: "github id as number", body: `{"github_repo_name": "acme/x", "github_repo_id": 42}`, fields: []string{"github_repo_id"}},
			{name: "is_private as string", body: `{"github_repo_name": "acme/x", "is_private": "yes"}`, fields: []string{"is_private"}},
			{name: "several at once", body: map[string]any{"github_repo_name": "bad", "github_url": "nope", "default_branch": "-x", "github_repo_id": "x"},
				fields: []string{"github_repo_name", "github_url", "default_branch", "github_repo_id"}},
			{name: "NUL in name", body: "{\"github_repo_name\": \"acme/x\\u0000\"}", fields: []string{"github_repo_name"}},
		}...))
		// Not JSON at all.
		resp := env.DoWith(t, http.MethodPost, "/repos", o.Admin.Token, `github_repo_name=acme/x`, map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
		resp.ExpectError(t, http.StatusUnsupportedMediaType, httpapi.CodeUnsupportedMedia)
	})
	t.Run("PATCH /repos/:id", func(t *testing.T) {
		run(t, http.MethodPatch, "/repos/"+target.ID, append(common, []tc{
			{name: "no fields", body: map[string]any{}, fields: []string{"(body)"}},
			{name: "only nulls", body: `{"default_branch": null}`, fields: []string{"(body)"}},
			{name: "bad name", body: map[string]any{"github_repo_name": "nope"}, fields: []string{"github_repo_name"}},
			{name: "bad branch", body: map[string]any{"default_branch": "a b"}, fields: []string{"default_branch"}},
			{name: "bad url", body: map[string]any{"github_url": "javascript:alert(1)"}, fields: []string{"github_url"}},
			{name: "bad id", body: map[string]any{"github_repo_id": "-1"}, fields: []string{"github_repo_id"}},
			{name: "unknown field", body: map[string]any{"service_commands": []any{}}, fields: []string{"service_commands"}},
		}...))
	})
	t.Run("PUT /repos/:id/service-commands", func(t *testing.T) {
		run(t, http.MethodPut, "/repos/"+target.ID+"/service-commands", []tc{
			{name: "malformed JSON", body: `{"service_commands": [`, status: 400, code: httpapi.CodeBadRequest},
			{name: "missing list", body: map[string]any{}, fields: []string{"service_commands"}},
			{name: "null list", body: `{"service_commands": null}`, fields: []string{"service_commands"}},
			{name: "empty list", body: map[string]any{"service_commands": []any{}}, fields: []string{"service_commands"}},
			{name: "eleven", body: map[string]any{"service_commands": cmds(11)}, fields: []string{"service_commands"}},
			{name: "not a list", body: `{"service_commands": {"name": "x"}}`, fields: []string{"service_commands"}},
			{name: "missing command", body: map[string]any{"service_commands": []any{cmd(), map[string]any{"name": "x"}}}, fields: []string{"service_commands[1].command"}},
			{name: "blank name", body: map[string]any{"service_commands": []any{cmd("name", "   ")}}, fields: []string{"service_commands[0].name"}},
			{name: "name too long", body: map[string]any{"service_commands": []any{cmd("name", long(101))}}, fields: []string{"service_commands[0].name"}},
			{name: "name is a path", body: map[string]any{"service_commands": []any{cmd("name", "../../etc/x")}}, fields: []string{"service_commands[0].name"}},
			{name: "duplicate names", body: map[string]any{"service_commands": []any{cmd(), cmd("command", "other")}}, fields: []string{"service_commands[1].name"}},
			{name: "command too long", body: map[string]any{"service_commands": []any{cmd(), cmd("name", "b"), cmd("name", "c", "command", long(1001))}}, fields: []string{"service_commands[2].command"}},
			{name: "cwd absolute", body: map[string]any{"service_commands": []any{cmd("cwd", "/etc")}}, fields: []string{"service_commands[0].cwd"}},
			{name: "cwd escapes", body: map[string]any{"service_commands": []any{cmd("cwd", "apps/../../..")}}, fields: []string{"service_commands[0].cwd"}},
			{name: "cwd home", body: map[string]any{"service_commands": []any{cmd("cwd", "~/x")}}, fields: []string{"service_commands[0].cwd"}},
			{name: "cwd backslash", body: map[string]any{"service_commands": []any{cmd("cwd", `..\x`)}}, fields: []string{"service_commands[0].cwd"}},
			{name: "cwd too long", body: map[string]any{"service_commands": []any{cmd("cwd", long(501))}}, fields: []string{"service_commands[0].cwd"}},
			{name: "workspace_path is configuration-only", body: map[string]any{"service_commands": []any{cmd("workspace_path", "x")}}, fields: []string{"workspace_path"}},
			{name: "wrong item type", body: `{"service_commands": [{"name": "a", "command": ["x"]}]}`, fields: []string{"service_commands.command"}},
		})
	})
}

func TestPersonRoutesRefuseOtherCredentials(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	repo := createRepo(t, env, o.Admin.Token, "acme/x", map[string]any{"create_configuration": true})
	cfg := *repo.ConfigurationID
	_, sandbox := env.SandboxToken(t, o.ID)
	routes := []struct{ method, path string }{
		{http.MethodPost, "/repos"}, {http.MethodGet, "/repos"}, {http.MethodGet, "/repos/" + repo.ID},
		{http.MethodPatch, "/repos/" + repo.ID}, {http.MethodDelete, "/repos/" + repo.ID},
		{http.MethodPut, "/repos/" + repo.ID + "/service-commands"}, {http.MethodDelete, "/repos/" + repo.ID + "/service-commands"},
		{http.MethodPost, "/configurations"}, {http.MethodGet, "/configurations"}, {http.MethodGet, "/configurations/" + cfg},
		{http.MethodPatch, "/configurations/" + cfg}, {http.MethodDelete, "/configurations/" + cfg},
		{http.MethodPut, "/configurations/" + cfg + "/repos"}, {http.MethodPut, "/configurations/" + cfg + "/service-commands"},
		{http.MethodDelete, "/configurations/" + cfg + "/service-commands"},
		{http.MethodGet, "/configurations/" + cfg + "/effective-service-commands"},
	}
	row := rowJSON(t, env, "repos", repo.ID)
	for _, r := range routes {
		for _, tok := range []string{sandbox, builderToken} {
			env.Do(t, r.method, r.path, tok, map[string]any{}).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
		}
		env.Do(t, r.method, r.path, "", map[string]any{}).ExpectError(t, http.StatusUnauthorized, httpapi.CodeUnauthenticated)
		env.Do(t, r.method, r.path, "sbx_forged.0000", map[string]any{}).ExpectError(t, http.StatusUnauthorized, httpapi.CodeUnauthenticated)
	}
	// The builder's route refuses people (even owners) and sandboxes.
	for _, tok := range []string{o.Owner.Token, sandbox} {
		env.Do(t, http.MethodPatch, "/configurations/"+cfg+"/snapshot", tok, map[string]any{"status": "building"}).
			ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	}
	env.Do(t, http.MethodPatch, "/configurations/"+cfg+"/snapshot", "", map[string]any{"status": "building"}).
		ExpectError(t, http.StatusUnauthorized, httpapi.CodeUnauthenticated)
	if rowJSON(t, env, "repos", repo.ID) != row || env.CountRows(t, "configurations", "id = $1 AND snapshot_status = 'none'", cfg) != 1 {
		t.Fatal("a refused credential changed something")
	}
}

func TestOpenAPIDocumentsRoutes(t *testing.T) {
	env := newEnv(t)
	var doc struct {
		Paths map[string]map[string]struct {
			Tags        []string `json:"tags"`
			Description string   `json:"description"`
		} `json:"paths"`
	}
	env.Do(t, http.MethodGet, "/openapi.json", "", nil).Expect(t, http.StatusOK, &doc)
	for path, methods := range map[string]map[string]string{
		"/api/v1/repos":                                          {"get": "repos", "post": "repos"},
		"/api/v1/repos/{id}":                                     {"get": "repos", "patch": "repos", "delete": "repos"},
		"/api/v1/repos/{id}/service-commands":                    {"put": "repos", "delete": "repos"},
		"/api/v1/configurations":                                 {"get": "configurations", "post": "configurations"},
		"/api/v1/configurations/{id}":                            {"get": "configurations", "patch": "configurations", "delete": "configurations"},
		"/api/v1/configurations/{id}/repos":                      {"put": "configurations"},
		"/api/v1/configurations/{id}/snapshot":                   {"patch": "configurations"},
		"/api/v1/configurations/{id}/service-commands":           {"put": "configurations", "delete": "configurations"},
		"/api/v1/configurations/{id}/effective-service-commands": {"get": "configurations"},
	} {
		for m, tag := range methods {
			op, ok := doc.Paths[path][m]
			if !ok || len(op.Tags) != 1 || op.Tags[0] != tag {
				t.Errorf("%s %s: %+v", m, path, op)
			}
		}
	}
	if d := doc.Paths["/api/v1/configurations/{id}/snapshot"]["patch"].Description; !strings.Contains(d, "service") {
		t.Errorf("snapshot route access: %q", d)
	}
}
