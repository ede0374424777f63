package target_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/runs/target"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type world struct {
	pool *pgxpool.Pool
	org  string
	// repos by short name, configurations by name.
	repo, config map[string]string
	otherOrg     string
	otherRepo    string // a repo of otherOrg, in otherConfig
	otherConfig  string
}

func mustExec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func newRepo(t *testing.T, pool *pgxpool.Pool, org, name string) string {
	t.Helper()
	var id string
	if err := pool.QueryRow(context.Background(), `INSERT INTO repos (org_id, github_repo_name, github_url)
		VALUES ($1, $2, 'https://github.com/' || $2) RETURNING id::text`, org, name).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func newConfig(t *testing.T, pool *pgxpool.Pool, org, name string, repoIDs ...string) string {
	t.Helper()
	var id string
	if err := pool.QueryRow(context.Background(), `INSERT INTO configurations (org_id, name) VALUES ($1, $2) RETURNING id::text`,
		org, name).Scan(&id); err != nil {
		t.Fatal(err)
	}
	for i, r := range repoIDs {
		mustExec(t, pool, `INSERT INTO configuration_repos (configuration_id, repo_id, org_id, workspace_path, position)
			VALUES ($1, $2, $3, $4, $5)`, id, r, org, fmt.Sprintf("repo%d", i), i)
	}
	return id
}

// setup builds an org with repos api, web, docs, lonely and configurations:
//
//	web-only   {web}
//	api-a      {api}
//	api-b      {api, web}
//	outsider   {docs}     (never in allowlists below that expect docs)
//	default    {}
//	fallback   {}
//
// plus another org whose repo "acme/api" lives in its own configuration.
func setup(t *testing.T) world {
	pool := testenv.Postgres(t)
	w := world{pool: pool, org: runstest.Org(t, pool), repo: map[string]string{}, config: map[string]string{}}
	for _, r := range []string{"api", "web", "docs", "lonely"} {
		w.repo[r] = newRepo(t, pool, w.org, "acme/"+r)
	}
	w.config["web-only"] = newConfig(t, pool, w.org, "web-only", w.repo["web"])
	w.config["api-a"] = newConfig(t, pool, w.org, "api-a", w.repo["api"])
	w.config["api-b"] = newConfig(t, pool, w.org, "api-b", w.repo["api"], w.repo["web"])
	w.config["outsider"] = newConfig(t, pool, w.org, "outsider", w.repo["docs"])
	w.config["default"] = newConfig(t, pool, w.org, "default")
	w.config["fallback"] = newConfig(t, pool, w.org, "fallback")
	w.otherOrg = runstest.Org(t, pool)
	w.otherRepo = newRepo(t, pool, w.otherOrg, "acme/api")
	w.otherConfig = newConfig(t, pool, w.otherOrg, "theirs", w.otherRepo)
	return w
}

func p(s string) *string { return &s }

func TestResolveDecisionTree(t *testing.T) {
	w := setup(t)
	look := target.PG(w.pool)
	c, r := w.config, w.repo
	allowAll := []string{c["web-only"], c["api-a"], c["api-b"]}
	unknown := uuid.NewString()

	cases := []struct {
		name      string
		a         target.Automation
		suggested *string
		want      target.Target
		wantErr   error
	}{
		{
			name:      "fixed uses the default even with a suggestion",
			a:         target.Automation{Strategy: "fixed", DefaultConfigurationID: p(c["default"]), FallbackConfigurationID: p(c["fallback"]), AllowedConfigurationIDs: allowAll},
			suggested: p(r["api"]),
			want:      target.Target{Type: target.Default, ConfigurationID: p(c["default"]), Reason: "selection_disabled", SuggestedRepoID: p(r["api"])},
		},
		{
			name: "empty strategy is fixed",
			a:    target.Automation{DefaultConfigurationID: p(c["default"])},
			want: target.Target{Type: target.Default, ConfigurationID: p(c["default"]), Reason: "selection_disabled"},
		},
		{
			name: "fixed without a default starts a scratch session",
			a:    target.Automation{Strategy: "fixed"},
			want: target.Target{Type: target.Default, Reason: "no_configuration_scratch"},
		},
		{
			name: "agent_decide without a suggestion uses the fallback",
			a:    target.Automation{Strategy: "agent_decide", DefaultConfigurationID: p(c["default"]), FallbackConfigurationID: p(c["fallback"]), AllowedConfigurationIDs: allowAll},
			want: target.Target{Type: target.Fallback, ConfigurationID: p(c["fallback"]), Reason: "no_suggestion"},
		},
		{
			name:      "an empty suggestion is no suggestion",
			a:         target.Automation{Strategy: "agent_decide", DefaultConfigurationID: p(c["default"]), AllowedConfigurationIDs: allowAll},
			suggested: p(""),
			want:      target.Target{Type: target.Fallback, ConfigurationID: p(c["default"]), Reason: "no_suggestion"},
		},
		{
			name:      "another org's repo is not found and its configuration is never picked",
			a:         target.Automation{Strategy: "agent_decide", DefaultConfigurationID: p(c["default"]), FallbackConfigurationID: p(c["fallback"]), AllowedConfigurationIDs: []string{w.otherConfig, c["api-a"]}},
			suggested: p(w.otherRepo),
			want:      target.Target{Type: target.Fallback, ConfigurationID: p(c["fallback"]), Reason: "repo_not_found_or_wrong_org", SuggestedRepoID: p(w.otherRepo)},
		},
		{
			name:      "an unknown repo id is not found",
			a:         target.Automation{Strategy: "agent_decide", DefaultConfigurationID: p(c["default"]), AllowedConfigurationIDs: allowAll},
			suggested: p(unknown),
			want:      target.Target{Type: target.Fallback, ConfigurationID: p(c["default"]), Reason: "repo_not_found_or_wrong_org", SuggestedRepoID: p(unknown)},
		},
		{
			name:      "a malformed repo id is not found",
			a:         target.Automation{Strategy: "agent_decide", DefaultConfigurationID: p(c["default"]), AllowedConfigurationIDs: allowAll},
			suggested: p("not-a-uuid"),
			want:      target.Target{Type: target.Fallback, ConfigurationID: p(c["default"]), Reason: "repo_not_found_or_wrong_org", SuggestedRepoID: p("not-a-uuid")},
		},
		{
			name:      "the first allowed configuration holding the repo is selected",
			a:         target.Automation{Strategy: "agent_decide", DefaultConfigurationID: p(c["default"]), FallbackConfigurationID: p(c["fallback"]), AllowedConfigurationIDs: []string{c["web-only"], c["api-b"], c["api-a"]}},
			suggested: p(r["api"]),
			want:      target.Target{Type: target.Selected, ConfigurationID: p(c["api-b"]), Reason: "enrichment_suggestion_reused", SuggestedRepoID: p(r["api"])},
		},
		{
			name:      "allowlist order decides, not creation order",
			a:         target.Automation{Strategy: "agent_decide", FallbackConfigurationID: p(c["fallback"]), AllowedConfigurationIDs: []string{c["api-a"], c["api-b"]}},
			suggested: p(r["api"]),
			want:      target.Target{Type: target.Selected, ConfigurationID: p(c["api-a"]), Reason: "enrichment_suggestion_reused", SuggestedRepoID: p(r["api"])},
		},
		{
			name:      "malformed and foreign allowlist entries are skipped",
			a:         target.Automation{Strategy: "agent_decide", FallbackConfigurationID: p(c["fallback"]), AllowedConfigurationIDs: []string{"junk", w.otherConfig, uuid.NewString(), c["web-only"]}},
			suggested: p(r["web"]),
			want:      target.Target{Type: target.Selected, ConfigurationID: p(c["web-only"]), Reason: "enrichment_suggestion_reused", SuggestedRepoID: p(r["web"])},
		},
		{
			name:      "a configuration outside the allowlist holding the repo is not picked",
			a:         target.Automation{Strategy: "agent_decide", DefaultConfigurationID: p(c["default"]), FallbackConfigurationID: p(c["fallback"]), AllowedConfigurationIDs: allowAll},
			suggested: p(r["docs"]),
			want:      target.Target{Type: target.Fallback, ConfigurationID: p(c["fallback"]), Reason: "no_allowed_configuration_with_repo", SuggestedRepoID: p(r["docs"])},
		},
		{
			name:      "a repo in no configuration falls back to the default without a fallback",
			a:         target.Automation{Strategy: "agent_decide", DefaultConfigurationID: p(c["default"]), AllowedConfigurationIDs: allowAll},
			suggested: p(r["lonely"]),
			want:      target.Target{Type: target.Fallback, ConfigurationID: p(c["default"]), Reason: "no_allowed_configuration_with_repo", SuggestedRepoID: p(r["lonely"])},
		},
		{
			name:      "an empty allowlist never selects",
			a:         target.Automation{Strategy: "agent_decide", DefaultConfigurationID: p(c["default"])},
			suggested: p(r["api"]),
			want:      target.Target{Type: target.Fallback, ConfigurationID: p(c["default"]), Reason: "no_allowed_configuration_with_repo", SuggestedRepoID: p(r["api"])},
		},
		{
			name:      "agent_decide with a match needs no fallback",
			a:         target.Automation{Strategy: "agent_decide", AllowedConfigurationIDs: allowAll},
			suggested: p(r["web"]),
			want:      target.Target{Type: target.Selected, ConfigurationID: p(c["web-only"]), Reason: "enrichment_suggestion_reused", SuggestedRepoID: p(r["web"])},
		},
		{
			name:    "agent_decide without suggestion, fallback or default has no target",
			a:       target.Automation{Strategy: "agent_decide", AllowedConfigurationIDs: allowAll},
			want:    target.Target{Type: target.Fallback, Reason: "no_suggestion"},
			wantErr: target.ErrNoTarget,
		},
		{
			name:      "agent_decide without a match, fallback or default has no target",
			a:         target.Automation{Strategy: "agent_decide", AllowedConfigurationIDs: allowAll},
			suggested: p(r["docs"]),
			want:      target.Target{Type: target.Fallback, Reason: "no_allowed_configuration_with_repo", SuggestedRepoID: p(r["docs"])},
			wantErr:   target.ErrNoTarget,
		},
		{
			name:    "an unknown strategy is an error",
			a:       target.Automation{Strategy: "llm_magic", DefaultConfigurationID: p(c["default"])},
			wantErr: target.ErrUnknownStrategy,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := target.Resolve(context.Background(), look, w.org, tc.a, tc.suggested)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if show(got) != show(tc.want) {
				t.Fatalf("got  %s\nwant %s", show(got), show(tc.want))
			}
		})
	}
}

func show(t target.Target) string {
	s := func(p *string) string {
		if p == nil {
			return "<nil>"
		}
		return *p
	}
	return fmt.Sprintf("{type=%s config=%s reason=%s suggested=%s}", t.Type, s(t.ConfigurationID), t.Reason, s(t.SuggestedRepoID))
}

// The Postgres lookup answers within the org only, keeps the given order and
// accepts a transaction as its querier.
func TestPGLookup(t *testing.T) {
	w := setup(t)
	ctx := context.Background()
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	look := target.PG(tx)

	for _, tc := range []struct {
		org, repo string
		want      bool
	}{
		{w.org, w.repo["api"], true},
		{w.org, w.otherRepo, false},
		{w.otherOrg, w.repo["api"], false},
		{w.otherOrg, w.otherRepo, true},
		{w.org, "nope", false},
		{"nope", w.repo["api"], false},
	} {
		got, err := look.RepoInOrg(ctx, tc.org, tc.repo)
		if err != nil || got != tc.want {
			t.Errorf("RepoInOrg(%s, %s) = %v, %v; want %v", tc.org, tc.repo, got, err, tc.want)
		}
	}

	c := w.config
	among := []string{c["api-b"], c["outsider"], c["api-b"], w.otherConfig, c["web-only"], c["api-a"]}
	got, err := look.ConfigurationsWithRepo(ctx, w.org, w.repo["api"], among)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{c["api-b"], c["api-a"]}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ConfigurationsWithRepo = %v, want %v", got, want)
	}
	// The other org's view of its own repo through our configuration ids: nothing.
	got, err = look.ConfigurationsWithRepo(ctx, w.otherOrg, w.otherRepo, among[:3])
	if err != nil || len(got) != 0 {
		t.Fatalf("foreign ConfigurationsWithRepo = %v, %v; want none", got, err)
	}
	got, err = look.ConfigurationsWithRepo(ctx, w.org, w.repo["api"], nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("empty among = %v, %v", got, err)
	}
}

// A lookup failure is returned (the executor retries), never turned into a
// fallback.
func TestResolveLookupErrorIsReturned(t *testing.T) {
	w := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	def := w.config["default"]
	_, err := target.Resolve(ctx, target.PG(w.pool), w.org,
		target.Automation{Strategy: "agent_decide", DefaultConfigurationID: &def, AllowedConfigurationIDs: []string{w.config["api-a"]}}, p(w.repo["api"]))
	if err == nil || errors.Is(err, target.ErrNoTarget) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want a wrapped context.Canceled", err)
	}
}
