package repos_test

import (
	"net/http"
	"testing"

	"github.com/proliferate/proliferate/internal/repos"
)

func TestEffectiveServiceCommands(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	web := createRepo(t, env, o.Admin.Token, "acme/web", nil)
	apiRepo := createRepo(t, env, o.Admin.Token, "acme/api", nil)
	docs := createRepo(t, env, o.Admin.Token, "acme/docs", nil)
	effective := func(cfgID string) repos.EffectiveServiceCommands {
		t.Helper()
		var out repos.EffectiveServiceCommands
		env.Do(t, http.MethodGet, "/configurations/"+cfgID+"/effective-service-commands", o.Member.Token, nil).Expect(t, http.StatusOK, &out)
		return out
	}
	type cmd struct{ name, command, workspace, cwd, resolved, repo string }
	check := func(t *testing.T, got repos.EffectiveServiceCommands, source string, workspaces []string, want ...cmd) {
		t.Helper()
		if got.Source != source || len(got.Commands) != len(want) || len(got.Workspaces) != len(workspaces) {
			t.Fatalf("got %+v, want source %s with %d commands, workspaces %v", got, source, len(want), workspaces)
		}
		for i, w := range workspaces {
			if got.Workspaces[i] != w {
				t.Fatalf("workspaces %v, want %v", got.Workspaces, workspaces)
			}
		}
		for i, w := range want {
			g := got.Commands[i]
			repo := ""
			if g.RepoID != nil {
				repo = *g.RepoID
			}
			if g.Name != w.name || g.Command != w.command || g.WorkspacePath != w.workspace || g.Cwd != w.cwd || g.ResolvedCwd != w.resolved || repo != w.repo {
				t.Fatalf("command %d: %+v, want %+v", i, g, w)
			}
		}
	}
	setRepoCmds := func(id string, cmds ...map[string]any) {
		t.Helper()
		env.Do(t, http.MethodPut, "/repos/"+id+"/service-commands", o.Admin.Token, map[string]any{"service_commands": cmds}).Expect(t, http.StatusOK, nil)
	}
	c := func(name, command string, kv ...string) map[string]any {
		m := map[string]any{"name": name, "command": command}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}

	multi := createConfig(t, env, o.Admin.Token, map[string]any{"name": "multi", "repos": []any{
		map[string]any{"repo_id": web.ID}, map[string]any{"repo_id": apiRepo.ID, "workspace_path": "services/api"}, map[string]any{"repo_id": docs.ID}}})
	ws := []string{"web", "services/api", "docs"}

	t.Run("none", func(t *testing.T) {
		got := effective(multi.ID)
		check(t, got, "none", ws)
		if len(got.Skipped) != 0 {
			t.Fatalf("skipped: %+v", got.Skipped)
		}
	})

	setRepoCmds(web.ID, c("dev", "pnpm dev", "cwd", "apps/site"), c("storybook", "pnpm storybook"))
	setRepoCmds(apiRepo.ID, c("dev", "go run ./cmd/api"))
	t.Run("repo defaults merged with workspace context", func(t *testing.T) {
		// "dev" exists in two repos: both are qualified so neither replaces the other.
		check(t, effective(multi.ID), "repo", ws,
			cmd{"dev (web)", "pnpm dev", "web", "apps/site", "web/apps/site", web.ID},
			cmd{"storybook", "pnpm storybook", "web", "", "web", web.ID},
			cmd{"dev (services/api)", "go run ./cmd/api", "services/api", "", "services/api", apiRepo.ID},
		)
	})

	t.Run("single repo at the root", func(t *testing.T) {
		single := createConfig(t, env, o.Admin.Token, map[string]any{"name": "web", "repos": refs(web.ID)})
		check(t, effective(single.ID), "repo", []string{"."},
			cmd{"dev", "pnpm dev", ".", "apps/site", "apps/site", web.ID},
			cmd{"storybook", "pnpm storybook", ".", "", ".", web.ID},
		)
		// Configuration commands without a workspace run in the only repo.
		env.Do(t, http.MethodPut, "/configurations/"+single.ID+"/service-commands", o.Admin.Token, map[string]any{"service_commands": []any{
			c("up", "make up", "cwd", "deploy/")}}).Expect(t, http.StatusOK, nil)
		check(t, effective(single.ID), "configuration", []string{"."}, cmd{"up", "make up", ".", "deploy", "deploy", web.ID})
		elsewhere := createConfig(t, env, o.Admin.Token, map[string]any{"name": "web", "repos": []any{map[string]any{"repo_id": web.ID, "workspace_path": "web"}},
			"service_commands": []any{c("up", "make up")}})
		check(t, effective(elsewhere.ID), "configuration", []string{"web"}, cmd{"up", "make up", "web", "", "web", web.ID})
	})

	t.Run("configuration commands win", func(t *testing.T) {
		env.Do(t, http.MethodPut, "/configurations/"+multi.ID+"/service-commands", o.Admin.Token, map[string]any{"service_commands": []any{
			c("compose", "docker compose up"),
			c("api", "make run", "workspace_path", "services/api", "cwd", "./cmd"),
			c("site", "pnpm dev", "workspace_path", "web/"),
			c("root", "ls", "workspace_path", "."),
		}}).Expect(t, http.StatusOK, nil)
		check(t, effective(multi.ID), "configuration", ws,
			cmd{"compose", "docker compose up", ".", "", ".", ""},
			cmd{"api", "make run", "services/api", "cmd", "services/api/cmd", apiRepo.ID},
			cmd{"site", "pnpm dev", "web", "", "web", web.ID},
			cmd{"root", "ls", ".", "", ".", ""},
		)
	})

	t.Run("commands of a removed workspace are skipped", func(t *testing.T) {
		env.Do(t, http.MethodPut, "/configurations/"+multi.ID+"/repos", o.Admin.Token, map[string]any{"repos": refs(web.ID, docs.ID)}).Expect(t, http.StatusOK, nil)
		got := effective(multi.ID)
		check(t, got, "configuration", []string{"web", "docs"},
			cmd{"compose", "docker compose up", ".", "", ".", ""},
			cmd{"site", "pnpm dev", "web", "", "web", web.ID},
			cmd{"root", "ls", ".", "", ".", ""},
		)
		if len(got.Skipped) != 1 || got.Skipped[0].Name != "api" || got.Skipped[0].WorkspacePath != "services/api" || got.Skipped[0].Reason == "" {
			t.Fatalf("skipped: %+v", got.Skipped)
		}
	})

	t.Run("clearing falls back to the repos", func(t *testing.T) {
		env.Do(t, http.MethodDelete, "/configurations/"+multi.ID+"/service-commands", o.Admin.Token, nil).Expect(t, http.StatusOK, nil)
		check(t, effective(multi.ID), "repo", []string{"web", "docs"},
			cmd{"dev", "pnpm dev", "web", "apps/site", "web/apps/site", web.ID},
			cmd{"storybook", "pnpm storybook", "web", "", "web", web.ID},
		)
	})
}
