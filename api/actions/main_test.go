package actions_test

import (
	"context"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/proliferate/proliferate/internal/actions/mcp/mcptest"

	"github.com/proliferate/proliferate/api"
	actionsapi "github.com/proliferate/proliferate/api/actions"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/secrets"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func newEnv(t *testing.T) *apitest.Env {
	t.Helper()
	return apitest.New(t, []func(*api.Server) error{actionsapi.RegisterWith(actionsapi.Options{
		ConnectorTimeout: 3 * time.Second, ValidateTimeout: 5 * time.Second})})
}

// org is an organization with an owner, an admin, a member and an
// automation.
type org struct {
	*apitest.Org
	AutomationID string
}

func newOrg(t *testing.T, e *apitest.Env) *org {
	t.Helper()
	o := e.NewOrg(t)
	return &org{Org: o, AutomationID: runstest.Automation(t, e.Deps.Pool, o.ID)}
}

// session inserts a session of org with a title.
func session(t *testing.T, e *apitest.Env, orgID, title string) string {
	t.Helper()
	return apitest.Scalar[string](t, e, `INSERT INTO sessions (org_id, title) VALUES ($1, $2) RETURNING id::text`, orgID, title)
}

// invocation inserts an invocation of a session with a status, created at
// a distinct time (at) so the order is known.
func invocation(t *testing.T, e *apitest.Env, orgID, sessionID, status string, at time.Time) string {
	t.Helper()
	var expires *time.Time
	if status == "pending" {
		x := at.Add(time.Hour)
		expires = &x
	}
	return apitest.Scalar[string](t, e, `INSERT INTO action_invocations (org_id, session_id, integration, action, risk_level, mode,
			mode_source, params, status, expires_at, created_at)
		VALUES ($1, $2, 'linear', 'create_issue', 'write', 'require_approval', 'inferred_default', '{"title":"x"}', $3, $4, $5)
		RETURNING id::text`, orgID, sessionID, status, expires, at)
}

// connector inserts an MCP connector of org.
func connector(t *testing.T, e *apitest.Env, orgID, name, url string, authJSON string, enabled bool) string {
	t.Helper()
	if authJSON == "" {
		authJSON = `{"type":"none"}`
	}
	return apitest.Scalar[string](t, e, `INSERT INTO org_connectors (org_id, name, url, auth, enabled) VALUES ($1, $2, $3, $4, $5)
		RETURNING id::text`, orgID, name, url, authJSON, enabled)
}

// secret stores an org-wide secret.
func secret(t *testing.T, e *apitest.Env, orgID, key, value string) {
	t.Helper()
	if _, err := secrets.Create(context.Background(), e.Deps.Pool, e.Deps.Box, secrets.CreateInput{OrgID: orgID, Key: key,
		Value: value}); err != nil {
		t.Fatal(err)
	}
}

func boolPtr(b bool) *bool { return &b }

// newMCPServer is a real MCP server demanding "X-Api-Key: <key>" with a
// read-only, a destructive and an unannotated tool.
func newMCPServer(t *testing.T, key string) *mcptest.Server {
	t.Helper()
	s := mcptest.New(t, key, nil)
	ok := mcptest.Text("ok")
	s.MCP.AddTool(&sdk.Tool{Name: "search_docs", Description: "Search the docs.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: mcptest.Schema(t, `{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`)}, ok)
	s.MCP.AddTool(&sdk.Tool{Name: "delete_page", Description: "Delete a page.", Annotations: &sdk.ToolAnnotations{DestructiveHint: boolPtr(true)},
		InputSchema: mcptest.Schema(t, `{"type":"object","properties":{"id":{"type":"string"}}}`)}, ok)
	s.MCP.AddTool(&sdk.Tool{Name: "create_page", InputSchema: mcptest.Schema(t, `{"type":"object"}`)}, ok)
	return s
}

// assertField checks a validation error names field.
func assertField(t *testing.T, body httpapi.ErrorBody, field string) {
	t.Helper()
	fes, _ := body.Error.Details.([]any)
	for _, fe := range fes {
		if m, ok := fe.(map[string]any); ok && m["field"] == field {
			return
		}
	}
	t.Fatalf("error does not name field %q: %+v", field, body.Error)
}
