package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/consumers/runstages"
	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/internal/agent/prompts"
	"github.com/proliferate/proliferate/internal/prebuilds/prebuildsdb"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
)

// sessionPrompt is the system prompt of a session (hub.Deps.SystemPrompt):
// its custom system_prompt, when set, resolved with the mode-critical
// instructions (prompts.Resolve), naming the session's repositories, its
// configuration and, for a run, its automation.
func (a *App) sessionPrompt(ctx context.Context, s sessions.Session) (string, error) {
	pc, err := a.promptContext(ctx, s)
	if err != nil {
		return "", err
	}
	custom := ""
	if s.SystemPrompt != nil {
		custom = *s.SystemPrompt
	}
	return prompts.Resolve(custom, prompts.Mode(s.SessionType, s.ClientType), pc), nil
}

// promptContext reads what a session's prompt names, within its
// organization.
func (a *App) promptContext(ctx context.Context, s sessions.Session) (prompts.PromptContext, error) {
	var pc prompts.PromptContext
	if s.RunID != nil {
		pc.RunID = *s.RunID
		pc.CompletionID = runstages.CompletionID(*s.RunID)
	}
	if s.ConfigurationID != nil {
		q := prebuildsdb.New(a.Pool)
		name, err := q.ConfigurationNameInOrg(ctx, prebuildsdb.ConfigurationNameInOrgParams{ID: *s.ConfigurationID, OrgID: s.OrgID})
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return pc, fmt.Errorf("prompt: configuration: %w", err)
		}
		pc.ConfigurationName = name
		repos, err := q.ConfigurationRepoNames(ctx, prebuildsdb.ConfigurationRepoNamesParams{ConfigurationID: *s.ConfigurationID, OrgID: s.OrgID})
		if err != nil {
			return pc, fmt.Errorf("prompt: repositories: %w", err)
		}
		for _, r := range repos {
			pc.Repos = append(pc.Repos, r.WorkspacePath)
			pc.RepoNames = append(pc.RepoNames, r.GithubRepoName)
		}
	}
	if s.AutomationID != nil {
		name, err := triggersdb.New(a.Pool).AutomationName(ctx, triggersdb.AutomationNameParams{ID: *s.AutomationID, OrgID: s.OrgID})
		if err == nil {
			pc.AutomationName = name
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return pc, fmt.Errorf("prompt: automation: %w", err)
		}
	}
	return pc, nil
}

// gitFreshness is the hub's git freshness policy (SANDBOX_GIT_PULL_*).
func (a *App) gitFreshness() hub.GitFreshness {
	return hub.GitFreshness{PullOnRestore: a.Cfg.SandboxGitPullOnRestore,
		Cadence: time.Duration(a.Cfg.SandboxGitPullCadence) * time.Second}
}
