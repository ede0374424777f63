package app

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
)

// The prompt the gateway gives a session's agent resolves the session's
// custom system_prompt (mode-critical instructions kept) and names its
// configuration, that configuration's repositories and its automation, read
// from the database within the session's organization.
func TestSessionPromptNamesReposConfigurationAndAutomation(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	a := &App{Pool: pool}
	var org, cfg, auto string
	slug := fmt.Sprintf("prompt-%d", time.Now().UnixNano())
	if err := pool.QueryRow(ctx, `INSERT INTO organizations (name, slug) VALUES ('Acme', $1) RETURNING id::text`, slug).Scan(&org); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO configurations (org_id, name) VALUES ($1, 'Acme stack') RETURNING id::text`, org).Scan(&cfg); err != nil {
		t.Fatal(err)
	}
	for i, r := range []struct{ name, path string }{{"acme/api", "api"}, {"acme/web", "apps/web"}} {
		if _, err := pool.Exec(ctx, `WITH r AS (INSERT INTO repos (org_id, github_repo_name) VALUES ($1, $2) RETURNING id)
			INSERT INTO configuration_repos (configuration_id, repo_id, org_id, workspace_path, position)
			SELECT $3, r.id, $1, $4, $5 FROM r`, org, r.name, cfg, r.path, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := pool.QueryRow(ctx, `INSERT INTO automations (org_id, name) VALUES ($1, 'Nightly triage') RETURNING id::text`, org).Scan(&auto); err != nil {
		t.Fatal(err)
	}
	custom, run := "Only fix typos.", "run-42"
	s := sessions.Session{ID: "s1", OrgID: org, SessionType: "automation", ClientType: "automation",
		ConfigurationID: &cfg, AutomationID: &auto, RunID: &run, SystemPrompt: &custom}
	got, err := a.sessionPrompt(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"`api` (acme/api)", "`apps/web` (acme/web)", `configuration "Acme stack"`,
		`automation "Nightly triage"`, "run_id: run-42", "automation_complete"} {
		if !strings.Contains(got, want) {
			t.Errorf("prompt lacks %q:\n%s", want, got)
		}
	}
	if !strings.HasPrefix(got, custom) {
		t.Errorf("the custom system prompt does not lead:\n%s", got)
	}
	// Without a custom prompt: the mode's own prompt, naming the same.
	s.SystemPrompt, s.SessionType, s.ClientType, s.AutomationID, s.RunID = nil, "coding", "web", nil, nil
	if got, err = a.sessionPrompt(ctx, s); err != nil || !strings.Contains(got, "`api` (acme/api)") ||
		!strings.Contains(got, `configuration "Acme stack"`) || strings.Contains(got, "automation_complete") {
		t.Fatalf("coding prompt (%v):\n%s", err, got)
	}
	// Another organization's session sees none of it.
	s.OrgID = "00000000-0000-0000-0000-000000000000"
	if got, err = a.sessionPrompt(ctx, s); err != nil || strings.Contains(got, "acme/") || strings.Contains(got, "Acme stack") {
		t.Fatalf("another organization's prompt (%v):\n%s", err, got)
	}
}

// The gateway's hub gives the agent the resolved prompt: a session created
// with a custom system_prompt boots a sandbox whose spec carries it,
// followed by the mode-critical instructions (the hub's SystemPrompt is
// a.sessionPrompt, as GatewayRole wires it).
func TestHubBootsTheSandboxWithTheCustomSystemPrompt(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	a := &App{Pool: pool}
	prov := agentsim.NewProvider(agentsim.Options{})
	t.Cleanup(prov.Close)
	m := hub.NewManager(hub.Deps{Sessions: &sessions.Store{Pool: pool, Codec: codec}, Provider: prov, Redis: testenv.Redis(t),
		InstanceID: "prompt-" + uuid.NewString(), GatewayURL: "http://127.0.0.1:1", SystemPrompt: a.sessionPrompt})
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	org := runstest.Org(t, pool)
	sid := sessionstest.New(t, pool, org, sessionstest.Options{SessionType: "automation", ClientType: "automation",
		SystemPrompt: "Only fix typos."})
	h, err := m.Hub(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.EnsureRuntimeReady(ctx); err != nil {
		t.Fatal(err)
	}
	specs := prov.Specs()
	if len(specs) != 1 || !strings.HasPrefix(specs[0].SystemPrompt, "Only fix typos.\n") ||
		!strings.Contains(specs[0].SystemPrompt, "automation_complete") {
		t.Fatalf("sandbox specs %+v", specs)
	}
}
