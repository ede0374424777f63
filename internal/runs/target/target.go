// Package target resolves which configuration an automation run's session
// starts from: the combination of the original system's target resolution
// and its configuration selection strategy.
// Our automations point at configurations (the original's
// prebuilds), and target resolution never creates one.
//
// Decision tree (Resolve):
//
//	fixed (or empty strategy):
//	    default_configuration_id set     → Default,  "selection_disabled"
//	    no default configuration         → Default,  "no_configuration_scratch",
//	                                       ConfigurationID nil: the session
//	                                       starts a scratch workspace
//	agent_decide:
//	    no suggested repo                → fallback, "no_suggestion"
//	    suggested repo not in the org    → fallback, "repo_not_found_or_wrong_org"
//	    an allowed configuration holds   → Selected, "enrichment_suggestion_reused"
//	    the repo                           (the first in allowlist order)
//	    otherwise                        → fallback, "no_allowed_configuration_with_repo"
//
// "fallback" is fallback_configuration_id, else default_configuration_id
// (Type Fallback). When an agent_decide automation needs the fallback and
// has neither, Resolve returns an error wrapping ErrNoTarget (with the
// Target carrying the branch's reason): the executor fails the run with
// error_code missing_configuration (the original's missing_prebuild). A
// scratch session is only chosen deliberately, by a fixed automation without
// a default configuration; agent_decide exists to pick a repository, so
// silently running it without one would hide a misconfiguration.
//
// Only configurations of the run's organization that are in the allowlist
// are ever selected: a configuration outside the allowlist that holds the
// repo, and any id of another organization, are ignored.
package target

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/internal/prebuilds/prebuildsdb"
	"github.com/proliferate/proliferate/internal/repos/reposdb"
)

// Target types.
const (
	Default  = "default"
	Selected = "selected"
	Fallback = "fallback"
)

// Strategies (automations.config_selection_strategy).
const (
	StrategyFixed       = "fixed"
	StrategyAgentDecide = "agent_decide"
)

// Reasons (Target.Reason), recorded in the run's event log.
const (
	ReasonSelectionDisabled       = "selection_disabled"
	ReasonNoConfigurationScratch  = "no_configuration_scratch"
	ReasonNoSuggestion            = "no_suggestion"
	ReasonRepoNotFound            = "repo_not_found_or_wrong_org"
	ReasonSuggestionReused        = "enrichment_suggestion_reused"
	ReasonNoAllowedConfigWithRepo = "no_allowed_configuration_with_repo"
)

// Automation is the part of an automation target resolution reads.
type Automation struct {
	// Strategy is fixed (the default when empty) or agent_decide.
	Strategy                                        string
	DefaultConfigurationID, FallbackConfigurationID *string
	// AllowedConfigurationIDs is the agent_decide allowlist, in preference
	// order.
	AllowedConfigurationIDs []string
}

// Target is the resolution result.
type Target struct {
	// Type is Default, Selected or Fallback.
	Type string
	// ConfigurationID is the configuration the session starts from; nil
	// means a scratch workspace (fixed automations without a default).
	ConfigurationID *string
	// Reason is one of the Reason* constants.
	Reason string
	// SuggestedRepoID is the enrichment's suggestion, passed through.
	SuggestedRepoID *string
}

// ErrNoTarget means an agent_decide automation needed its fallback and has
// neither a fallback nor a default configuration; the run fails with
// error_code missing_configuration.
var ErrNoTarget = errors.New("no configuration to run in")

// ErrUnknownStrategy wraps a strategy Resolve does not know (the database
// check constraint makes it unreachable for stored automations).
var ErrUnknownStrategy = errors.New("unknown configuration selection strategy")

// Lookup is what Resolve asks the database.
type Lookup interface {
	// RepoInOrg reports whether repoID is a repository of orgID (false for a
	// malformed id).
	RepoInOrg(ctx context.Context, orgID, repoID string) (bool, error)
	// ConfigurationsWithRepo returns which of the given configuration ids
	// (all of org) contain the repo, in the order given.
	ConfigurationsWithRepo(ctx context.Context, orgID, repoID string, among []string) ([]string, error)
}

// Resolve picks the configuration of a run of automation a in orgID, given
// the enrichment's suggested repository (nil or "" for none). Lookup
// errors are returned wrapped (retryable); ErrNoTarget and
// ErrUnknownStrategy are permanent.
func Resolve(ctx context.Context, look Lookup, orgID string, a Automation, suggestedRepoID *string) (Target, error) {
	if suggestedRepoID != nil && *suggestedRepoID == "" {
		suggestedRepoID = nil
	}
	switch a.Strategy {
	case "", StrategyFixed:
		if a.DefaultConfigurationID == nil {
			return Target{Type: Default, Reason: ReasonNoConfigurationScratch, SuggestedRepoID: suggestedRepoID}, nil
		}
		return Target{Type: Default, ConfigurationID: clone(a.DefaultConfigurationID), Reason: ReasonSelectionDisabled, SuggestedRepoID: suggestedRepoID}, nil
	case StrategyAgentDecide:
	default:
		return Target{}, fmt.Errorf("resolve target: %w %q", ErrUnknownStrategy, a.Strategy)
	}

	fallback := func(reason string) (Target, error) {
		t := Target{Type: Fallback, Reason: reason, SuggestedRepoID: suggestedRepoID}
		switch {
		case a.FallbackConfigurationID != nil:
			t.ConfigurationID = clone(a.FallbackConfigurationID)
		case a.DefaultConfigurationID != nil:
			t.ConfigurationID = clone(a.DefaultConfigurationID)
		default:
			return t, fmt.Errorf("resolve target (%s): %w: agent_decide automation has no fallback or default configuration", reason, ErrNoTarget)
		}
		return t, nil
	}
	if suggestedRepoID == nil {
		return fallback(ReasonNoSuggestion)
	}
	repo := *suggestedRepoID
	ok, err := look.RepoInOrg(ctx, orgID, repo)
	if err != nil {
		return Target{}, fmt.Errorf("resolve target: look up repo: %w", err)
	}
	if !ok {
		return fallback(ReasonRepoNotFound)
	}
	if len(a.AllowedConfigurationIDs) > 0 {
		found, err := look.ConfigurationsWithRepo(ctx, orgID, repo, a.AllowedConfigurationIDs)
		if err != nil {
			return Target{}, fmt.Errorf("resolve target: look up configurations: %w", err)
		}
		if len(found) > 0 {
			id := found[0]
			return Target{Type: Selected, ConfigurationID: &id, Reason: ReasonSuggestionReused, SuggestedRepoID: suggestedRepoID}, nil
		}
	}
	return fallback(ReasonNoAllowedConfigWithRepo)
}

func clone(s *string) *string {
	v := *s
	return &v
}

// Querier is a pool, a connection or a transaction.
type Querier interface {
	reposdb.DBTX
	prebuildsdb.DBTX
}

// PG is the Postgres Lookup over repos, configurations and
// configuration_repos.
func PG(q Querier) Lookup { return pgLookup{q: q} }

type pgLookup struct{ q Querier }

func (l pgLookup) RepoInOrg(ctx context.Context, orgID, repoID string) (bool, error) {
	if !isUUID(orgID) || !isUUID(repoID) {
		return false, nil
	}
	ok, err := reposdb.New(l.q).RepoInOrg(ctx, reposdb.RepoInOrgParams{ID: repoID, OrgID: orgID})
	if err != nil {
		return false, fmt.Errorf("repo in org: %w", err)
	}
	return ok, nil
}

func (l pgLookup) ConfigurationsWithRepo(ctx context.Context, orgID, repoID string, among []string) ([]string, error) {
	if !isUUID(orgID) || !isUUID(repoID) {
		return nil, nil
	}
	ids := make([]string, 0, len(among))
	for _, id := range among {
		if isUUID(id) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	// The allowlist's order is kept; a duplicate id keeps its first
	// position.
	found, err := prebuildsdb.New(l.q).ConfigurationsWithRepo(ctx, prebuildsdb.ConfigurationsWithRepoParams{
		OrgID: orgID, RepoID: repoID, Among: ids})
	if err != nil {
		return nil, fmt.Errorf("configurations with repo: %w", err)
	}
	return found, nil
}

func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}
