package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/catalog"
	"github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/actions/mcp/mcptest"
	"github.com/proliferate/proliferate/internal/actions/providers"
	"github.com/proliferate/proliferate/internal/actions/providers/linearfake"
	"github.com/proliferate/proliferate/internal/actions/providers/sentryfake"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/integrations/fakes"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/secrets"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/slack/slackfake"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// world is one database with the real integrations service (Nango faked),
// provider fakes and a catalog over them.
type world struct {
	pool   *pgxpool.Pool
	box    *secretbox.Box
	svc    *integrations.Service
	nango  *fakes.Nango
	linear *linearfake.Server
	sentry *sentryfake.Server
	slack  *slackfake.Server
	logs   *testenv.LogBuffer
	cat    *catalog.Catalog
}

var seq atomic.Int64

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{pool: testenv.Postgres(t), logs: &testenv.LogBuffer{}}
	w.nango = fakes.NewNango(t, "nango-secret", map[string]string{"linear": "linear", "sentry": "sentry"}, nil)
	vars := map[string]string{"NANGO_URL": w.nango.URL, "NANGO_SECRET_KEY": "nango-secret"}
	cfg, err := config.LoadFrom(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if w.box, err = secretbox.New(cfg.EncryptionKeys); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w.svc, err = integrations.New(integrations.Options{Cfg: cfg, Pool: w.pool, Redis: testenv.Redis(t), Box: w.box, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	w.linear, w.sentry, w.slack = linearfake.New(t), sentryfake.New(t), slackfake.New(t)
	w.cat = catalog.New(catalog.Deps{
		Pool: w.pool, Integrations: w.svc, Secrets: catalog.OrgSecrets{Pool: w.pool, Box: w.box},
		Providers: providers.Config{LinearURL: w.linear.URL(), SentryURL: w.sentry.URL(), SlackURL: w.slack.URL(), Timeout: 5 * time.Second},
		MCP:       catalog.MCPOptions{ListTimeout: 5 * time.Second, CallTimeout: 5 * time.Second},
		Log:       log,
	})
	t.Cleanup(func() { _ = w.cat.Close() })
	return w
}

// org creates an organization with an owner.
func (w *world) org(t *testing.T) (orgID, userID string) {
	t.Helper()
	n := fmt.Sprintf("%d-%d", seq.Add(1), time.Now().UnixNano())
	err := w.pool.QueryRow(context.Background(), `WITH u AS (INSERT INTO users (email) VALUES ($1) RETURNING id),
		o AS (INSERT INTO organizations (name, slug) VALUES ('Org', $2) RETURNING id),
		m AS (INSERT INTO members (org_id, user_id, role) SELECT o.id, u.id, 'owner' FROM o, u)
		SELECT o.id::text, u.id::text FROM o, u`, "cat"+n+"@example.com", "cat-org-"+n).Scan(&orgID, &userID)
	if err != nil {
		t.Fatal(err)
	}
	return orgID, userID
}

func (w *world) session(t *testing.T, orgID, userID string) sessions.Session {
	t.Helper()
	id := sessionstest.New(t, w.pool, orgID, sessionstest.Options{CreatedBy: userID})
	return sessions.Session{ID: id, OrgID: orgID, CreatedBy: &userID}
}

// nangoIntegration stores an active Nango integration of preset whose
// token (held by the Nango fake) is token.
func (w *world) nangoIntegration(t *testing.T, orgID, userID, preset, token string) string {
	t.Helper()
	conn := fmt.Sprintf("%s-conn-%d", preset, seq.Add(1))
	w.nango.AddConnection(fakes.NangoConnection{ConnectionID: conn, ConfigKey: preset, Provider: preset, AccessToken: token})
	var id string
	err := w.pool.QueryRow(context.Background(), `INSERT INTO integrations (org_id, provider, integration_id, connection_id,
		provider_config_key, created_by) VALUES ($1, 'nango', $2, $3, $2, $4) RETURNING id::text`,
		orgID, preset, conn, userID).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (w *world) slackInstall(t *testing.T, orgID, team, token string) {
	t.Helper()
	sealed, err := w.box.Seal([]byte(token), []byte("slack:"+orgID+":"+team))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.pool.Exec(context.Background(), `INSERT INTO slack_installations (org_id, team_id, bot_user_id, encrypted_bot_token)
		VALUES ($1, $2, 'UBOT', $3)`, orgID, team, sealed); err != nil {
		t.Fatal(err)
	}
}

func (w *world) secret(t *testing.T, orgID, key, value string) secrets.Secret {
	t.Helper()
	s, err := secrets.Create(context.Background(), w.pool, w.box, secrets.CreateInput{OrgID: orgID, Key: key, Value: value})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (w *world) connector(t *testing.T, orgID, userID string, c integrations.Connector) integrations.Connector {
	t.Helper()
	if c.Name == "" {
		c.Name = fmt.Sprintf("docs-%d", seq.Add(1))
	}
	c.Enabled = true
	out, err := w.svc.CreateConnector(context.Background(), orgID, userID, c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// newMCPServer is a real MCP server requiring an API key header, with a
// read-only search tool and a delete tool.
func newMCPServer(t *testing.T, key string) *mcptest.Server {
	t.Helper()
	s := mcptest.New(t, key, nil)
	s.MCP.AddTool(&sdk.Tool{Name: "search_docs", Description: "Search the docs.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: mcptest.Schema(t, `{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`)},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var args struct{ Query string }
			_ = json.Unmarshal(req.Params.Arguments, &args)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "results for " + args.Query}}}, nil
		})
	s.MCP.AddTool(&sdk.Tool{Name: "delete_page", Description: "Delete a page.",
		InputSchema: mcptest.Schema(t, `{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`)},
		mcptest.Text("deleted"))
	return s
}

func ids(av []invocations.Available) []string {
	out := make([]string, len(av))
	for i, a := range av {
		out[i] = a.Integration
	}
	return out
}

func find(av []invocations.Available, id string) (invocations.Available, bool) {
	i := slices.IndexFunc(av, func(a invocations.Available) bool { return a.Integration == id })
	if i < 0 {
		return invocations.Available{}, false
	}
	return av[i], true
}

func def(t *testing.T, av []invocations.Available, source, action string) actions.Definition {
	t.Helper()
	a, ok := find(av, source)
	if !ok {
		t.Fatalf("no source %s in %v", source, ids(av))
	}
	i := slices.IndexFunc(a.Actions, func(d actions.Definition) bool { return d.ID == action })
	if i < 0 {
		t.Fatalf("source %s has no action %s", source, action)
	}
	return a.Actions[i]
}

func TestProvidersFromOrgIntegrationsAndSlack(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	orgID, userID := w.org(t)
	linID := w.nangoIntegration(t, orgID, userID, "linear", "lin_tok_A")
	sentryID := w.nangoIntegration(t, orgID, userID, "sentry", "sen_tok_A")
	if _, err := w.pool.Exec(ctx, `UPDATE integrations SET status = 'revoked' WHERE id = $1`, sentryID); err != nil {
		t.Fatal(err)
	}
	w.slackInstall(t, orgID, "T1", "xoxb-bot-A")
	w.linear.AddToken("lin_tok_A", "u1")
	w.linear.AddTeam(linearfake.Team{ID: "t1", Key: "ENG", Name: "Eng"})
	w.slack.AddToken("xoxb-bot-A", "T1")
	w.slack.AddChannel("T1", "C1")
	sess := w.session(t, orgID, userID)

	av, err := w.cat.List(ctx, sess)
	if err != nil {
		t.Fatal(err)
	}
	// The revoked Sentry integration yields no source.
	if got := ids(av); !slices.Equal(got, []string{"linear", "slack"}) {
		t.Fatalf("sources %v", got)
	}
	def(t, av, "linear", "create_issue")
	def(t, av, "slack", "send_message")

	src, ec, itID, err := w.cat.Get(ctx, sess, "linear")
	if err != nil {
		t.Fatal(err)
	}
	if ec.Token != "lin_tok_A" || ec.OrgID != orgID || ec.SessionID != sess.ID || itID == nil || *itID != linID {
		t.Fatalf("linear exec context org=%s session=%s integration=%v token-ok=%v", ec.OrgID, ec.SessionID, itID, ec.Token == "lin_tok_A")
	}
	if _, err := src.Execute(ctx, "create_issue", json.RawMessage(`{"teamId":"t1","title":"from the catalog"}`), ec); err != nil {
		t.Fatalf("linear execute: %v", err)
	}
	if w.linear.MutationCount() != 1 {
		t.Fatalf("linear mutations %d", w.linear.MutationCount())
	}

	// The token is resolved at call time: a rotated Nango token is used by
	// the next Get.
	conn := ""
	_ = w.pool.QueryRow(ctx, `SELECT connection_id FROM integrations WHERE id = $1`, linID).Scan(&conn)
	w.nango.Update(conn, "linear", func(c *fakes.NangoConnection) { c.AccessToken = "lin_tok_rotated" })
	if _, ec, _, err = w.cat.Get(ctx, sess, "linear"); err != nil || ec.Token != "lin_tok_rotated" {
		t.Fatalf("rotated linear token not picked up: %v", err)
	}

	src, ec, itID, err = w.cat.Get(ctx, sess, "slack")
	if err != nil || itID != nil || ec.Token != "xoxb-bot-A" {
		t.Fatalf("slack: integration %v, err %v, token-ok=%v", itID, err, ec.Token == "xoxb-bot-A")
	}
	if _, err := src.Execute(ctx, "send_message", json.RawMessage(`{"channel":"C1","text":"hello"}`), ec); err != nil {
		t.Fatalf("slack execute: %v", err)
	}

	// The broker is down: a remote failure naming the provider, not a
	// missing integration, and no token anywhere.
	w.nango.Fail(http.StatusServiceUnavailable)
	_, ec, _, err = w.cat.Get(ctx, sess, "linear")
	var ee *actions.ExecError
	if !errors.As(err, &ee) || errors.Is(err, invocations.ErrUnknownIntegration) || ec.Token != "" || !strings.Contains(ee.Message, "linear") {
		t.Fatalf("broker down: %v", err)
	}
	w.nango.Fail(0)
	if strings.Contains(w.logs.String(), "lin_tok") || strings.Contains(w.logs.String(), "xoxb-bot-A") {
		t.Fatal("a token was logged")
	}

	// Sentry is revoked: not available, whatever the agent asks.
	if _, _, _, err := w.cat.Get(ctx, sess, "sentry"); !errors.Is(err, invocations.ErrUnknownIntegration) {
		t.Fatalf("revoked sentry: %v", err)
	}
	// Drift is a connector matter.
	if d, err := w.cat.Drifted(ctx, sess, "linear", def(t, av, "linear", "create_issue")); err != nil || d.Drifted || d.Current != nil {
		t.Fatalf("provider drift %+v %v", d, err)
	}
}

func TestSessionBindingsAreTheWholeProviderSet(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	orgID, userID := w.org(t)
	w.nangoIntegration(t, orgID, userID, "linear", "lin_org")
	w.nangoIntegration(t, orgID, userID, "sentry", "sen_org")
	bound := w.nangoIntegration(t, orgID, userID, "linear", "lin_bound")
	sess := w.session(t, orgID, userID)
	if err := w.svc.BindSession(ctx, orgID, sess.ID, bound); err != nil {
		t.Fatal(err)
	}
	other := w.session(t, orgID, userID)

	av, err := w.cat.List(ctx, sess)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(av); !slices.Equal(got, []string{"linear"}) {
		t.Fatalf("bound session sources %v", got)
	}
	_, ec, itID, err := w.cat.Get(ctx, sess, "linear")
	if err != nil || itID == nil || *itID != bound || ec.Token != "lin_bound" {
		t.Fatalf("bound linear: %v %v", itID, err)
	}
	if _, _, _, err := w.cat.Get(ctx, sess, "sentry"); !errors.Is(err, invocations.ErrUnknownIntegration) {
		t.Fatalf("unbound sentry: %v", err)
	}

	// A session without bindings gets the org's (oldest) integrations.
	av, err = w.cat.List(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(av); !slices.Equal(got, []string{"linear", "sentry"}) {
		t.Fatalf("unbound session sources %v", got)
	}
	if _, ec, _, err := w.cat.Get(ctx, other, "linear"); err != nil || ec.Token != "lin_org" {
		t.Fatalf("org linear: %v", err)
	}

	// A private integration of someone else is not a fallback source.
	orgB, ownerB := w.org(t)
	var memberB string
	if err := w.pool.QueryRow(ctx, `WITH u AS (INSERT INTO users (email) VALUES ($1) RETURNING id)
		INSERT INTO members (org_id, user_id, role) SELECT $2, u.id, 'member' FROM u RETURNING user_id::text`,
		fmt.Sprintf("member-%d@example.com", time.Now().UnixNano()), orgB).Scan(&memberB); err != nil {
		t.Fatal(err)
	}
	priv := w.nangoIntegration(t, orgB, ownerB, "linear", "lin_private")
	if _, err := w.pool.Exec(ctx, `UPDATE integrations SET visibility = 'private' WHERE id = $1`, priv); err != nil {
		t.Fatal(err)
	}
	if av, err := w.cat.List(ctx, w.session(t, orgB, memberB)); err != nil || len(av) != 0 {
		t.Fatalf("member sees another's private integration: %v %v", ids(av), err)
	}
	if av, err := w.cat.List(ctx, w.session(t, orgB, ownerB)); err != nil || !slices.Equal(ids(av), []string{"linear"}) {
		t.Fatalf("owner misses their private integration: %v %v", ids(av), err)
	}
}

func TestConnectorSecretResolvedAtEveryCallAndNeverLeaks(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	orgID, userID := w.org(t)
	srv := newMCPServer(t, "key-one-6b1f")
	sec := w.secret(t, orgID, "DOCS_API_KEY", "key-one-6b1f")
	conn := w.connector(t, orgID, userID, integrations.Connector{URL: srv.URL,
		Auth: integrations.ConnectorAuth{Type: integrations.AuthHeader, SecretKey: "DOCS_API_KEY", HeaderName: "X-Api-Key"}})
	sess := w.session(t, orgID, userID)
	sourceID := "connector:" + conn.ID

	av, err := w.cat.List(ctx, sess)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(av); !slices.Equal(got, []string{sourceID}) {
		t.Fatalf("sources %v", got)
	}
	if d := def(t, av, sourceID, "search_docs"); d.Risk != actions.RiskRead {
		t.Fatalf("search_docs risk %s", d.Risk)
	}
	// No annotation: the connector's default mode (require_approval) as risk.
	if d := def(t, av, sourceID, "delete_page"); d.Risk != actions.RiskWrite {
		t.Fatalf("delete_page risk %s", d.Risk)
	}

	src, ec, itID, err := w.cat.Get(ctx, sess, sourceID)
	if err != nil {
		t.Fatal(err)
	}
	if itID != nil || ec.Token != "" || ec.OrgID != orgID || ec.SessionID != sess.ID {
		t.Fatalf("connector exec context: integration %v, token set %v", itID, ec.Token != "")
	}
	if fmt.Sprintf("%+v %#v", ec, ec) != fmt.Sprintf("%+v %#v", actions.ExecContext{OrgID: orgID, SessionID: sess.ID}, actions.ExecContext{OrgID: orgID, SessionID: sess.ID}) {
		t.Fatal("the exec context carries more than org and session")
	}
	out, err := src.Execute(ctx, "search_docs", json.RawMessage(`{"query":"kafka"}`), ec)
	if err != nil || !strings.Contains(string(out), "results for kafka") {
		t.Fatalf("execute: %s %v", out, err)
	}

	// Rotate: the server takes only the new key, the org secret is updated.
	// The very next call (same cached source, no edit of the connector)
	// sends the new value.
	srv.SetKey("key-two-9c2d")
	newVal := "key-two-9c2d"
	if _, err := secrets.Update(ctx, w.pool, w.box, orgID, sec.ID, secrets.UpdateInput{Value: &newVal}); err != nil {
		t.Fatal(err)
	}
	src2, ec, _, err := w.cat.Get(ctx, sess, sourceID)
	if err != nil {
		t.Fatal(err)
	}
	if src2 != src {
		t.Fatal("an unchanged connector was rebuilt")
	}
	if _, err := src2.Execute(ctx, "search_docs", json.RawMessage(`{"query":"rotated"}`), ec); err != nil {
		t.Fatalf("execute after rotation: %v", err)
	}
	keys := srv.KeysSeen()
	if keys[len(keys)-1] != "key-two-9c2d" {
		t.Fatalf("last request carried the old key")
	}

	// A secret that no longer matches: the failure names neither value.
	srv.SetKey("key-three-0000")
	_, err = src2.Execute(ctx, "search_docs", json.RawMessage(`{"query":"x"}`), ec)
	var ee *actions.ExecError
	if !errors.As(err, &ee) || ee.Status != http.StatusUnauthorized {
		t.Fatalf("wrong key: %v", err)
	}
	// A deleted secret: unresolvable, named by key only.
	if _, err := w.pool.Exec(ctx, `DELETE FROM secrets WHERE id = $1`, sec.ID); err != nil {
		t.Fatal(err)
	}
	srv.SetKey("key-two-9c2d")
	_, err2 := src2.Execute(ctx, "delete_page", json.RawMessage(`{"id":"p1"}`), ec)
	if err2 == nil {
		t.Fatal("a call without its secret succeeded")
	}
	for _, text := range []string{err.Error(), err2.Error(), w.logs.String()} {
		for _, v := range []string{"key-one-6b1f", "key-two-9c2d"} {
			if strings.Contains(text, v) {
				t.Fatalf("secret value leaked: %q", text)
			}
		}
	}
}

func TestTenantIsolation(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	orgA, userA := w.org(t)
	orgB, userB := w.org(t)
	srv := newMCPServer(t, "tenant-key")
	w.secret(t, orgA, "DOCS_API_KEY", "tenant-key")
	connA := w.connector(t, orgA, userA, integrations.Connector{URL: srv.URL,
		Auth:          integrations.ConnectorAuth{Type: integrations.AuthHeader, SecretKey: "DOCS_API_KEY", HeaderName: "X-Api-Key"},
		ToolOverrides: map[string]integrations.ToolOverride{"search_docs": {Mode: "allow", Hash: "sha256-anything"}}})
	itA := w.nangoIntegration(t, orgA, userA, "linear", "lin_A")
	w.slackInstall(t, orgA, "TA", "xoxb-A")
	sessB := w.session(t, orgB, userB)
	// Org B binds nothing and has nothing; it even tries to bind A's
	// integration to its session (refused by the service).
	if err := w.svc.BindSession(ctx, orgB, sessB.ID, itA); err == nil {
		t.Fatal("org B bound org A's integration")
	}

	av, err := w.cat.List(ctx, sessB)
	if err != nil || len(av) != 0 {
		t.Fatalf("org B lists %v %v", ids(av), err)
	}
	for _, id := range []string{"connector:" + connA.ID, "linear", "slack", "sentry", "github", "", "connector:",
		"connector:not-a-uuid", "connector:" + strings.ToUpper(connA.ID), "connector:{" + connA.ID + "}"} {
		src, ec, it, err := w.cat.Get(ctx, sessB, id)
		if !errors.Is(err, invocations.ErrUnknownIntegration) || src != nil || it != nil || ec.Token != "" {
			t.Fatalf("org B Get(%q): %v", id, err)
		}
		if strings.Contains(err.Error(), connA.Name) || strings.Contains(err.Error(), srv.URL) {
			t.Fatalf("error leaks org A's connector: %v", err)
		}
	}
	if _, err := w.cat.Drifted(ctx, sessB, "connector:"+connA.ID, actions.Definition{ID: "search_docs"}); !errors.Is(err, invocations.ErrUnknownIntegration) {
		t.Fatalf("org B drift on A's connector: %v", err)
	}
	if srv.Inits.Load() != 0 {
		t.Fatal("org B's requests reached org A's MCP server")
	}
	// Org A has them all.
	av, err = w.cat.List(ctx, w.session(t, orgA, userA))
	if err != nil || !slices.Equal(ids(av), []string{"linear", "slack", "connector:" + connA.ID}) {
		t.Fatalf("org A lists %v %v", ids(av), err)
	}
}

func TestUnreachableAndDisabledConnectorsLeftOut(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	orgID, userID := w.org(t)
	good := newMCPServer(t, "")
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	okConn := w.connector(t, orgID, userID, integrations.Connector{Name: "good", URL: good.URL})
	badConn := w.connector(t, orgID, userID, integrations.Connector{Name: "gone", URL: downURL})
	offConn := w.connector(t, orgID, userID, integrations.Connector{Name: "off", URL: good.URL})
	enabled := false
	if _, err := w.svc.UpdateConnector(ctx, orgID, offConn.ID, integrations.ConnectorPatch{Enabled: &enabled}); err != nil {
		t.Fatal(err)
	}
	sess := w.session(t, orgID, userID)
	av, err := w.cat.List(ctx, sess)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(av); !slices.Equal(got, []string{"connector:" + okConn.ID}) {
		t.Fatalf("sources %v", got)
	}
	if !strings.Contains(w.logs.String(), badConn.ID) {
		t.Fatalf("the unreachable connector was not logged:\n%s", w.logs.String())
	}
	if _, _, _, err := w.cat.Get(ctx, sess, "connector:"+offConn.ID); !errors.Is(err, invocations.ErrUnknownIntegration) {
		t.Fatalf("disabled connector: %v", err)
	}
	// The unreachable one is the session's, just not working: Get gives
	// the source, whose calls fail as remote errors.
	src, ec, _, err := w.cat.Get(ctx, sess, "connector:"+badConn.ID)
	if err != nil {
		t.Fatal(err)
	}
	var ee *actions.ExecError
	if _, err := src.Execute(ctx, "x", nil, ec); !errors.As(err, &ee) {
		t.Fatalf("unreachable execute: %v", err)
	}
}

func TestDrifted(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	orgID, userID := w.org(t)
	srv := newMCPServer(t, "")
	conn := w.connector(t, orgID, userID, integrations.Connector{URL: srv.URL})
	sess := w.session(t, orgID, userID)
	sourceID := "connector:" + conn.ID

	// The admin reviews the tools with the preflight and confirms modes
	// with the hashes it showed.
	diag := w.cat.ValidateConnector(ctx, conn)
	if !diag.OK || diag.ToolCount != 2 {
		t.Fatalf("validate: %+v", diag)
	}
	hash := map[string]string{}
	for _, td := range diag.Tools {
		hash[td.Name] = td.Hash
	}
	overrides := map[string]integrations.ToolOverride{
		"search_docs": {Mode: "allow", Hash: hash["search_docs"]},
		"delete_page": {Mode: "deny", Hash: hash["delete_page"]},
	}
	conn, err := w.svc.UpdateConnector(ctx, orgID, conn.ID, integrations.ConnectorPatch{ToolOverrides: &overrides})
	if err != nil {
		t.Fatal(err)
	}
	av, err := w.cat.List(ctx, sess)
	if err != nil {
		t.Fatal(err)
	}
	search, del := def(t, av, sourceID, "search_docs"), def(t, av, sourceID, "delete_page")
	// The modes reach the cascade as risks: allow → read, deny → danger.
	if search.Risk != actions.RiskRead || del.Risk != actions.RiskDanger {
		t.Fatalf("risks %s %s", search.Risk, del.Risk)
	}
	for _, d := range []actions.Definition{search, del} {
		// Reviewed under another mode (another risk level): not drift.
		dr, err := w.cat.Drifted(ctx, sess, sourceID, d)
		if err != nil || dr.Drifted || dr.ReviewedHash != hash[d.ID] || dr.Current == nil ||
			!actions.MatchesHash(*dr.Current, hash[d.ID]) || dr.Diff != nil {
			t.Fatalf("%s: %+v %v", d.ID, dr, err)
		}
	}
	// A description-only change on the server is not drift.
	srv.MCP.AddTool(&sdk.Tool{Name: "search_docs", Description: "Search every doc, now with more words.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: mcptest.Schema(t, `{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`)},
		mcptest.Text("ok"))
	if dr, err := w.cat.Drifted(ctx, sess, sourceID, search); err != nil || dr.Drifted {
		t.Fatalf("a description change counted as drift: %+v %v", dr, err)
	}
	// The server changes the schema: drifted, whatever the listed
	// definition says, with the diff from the reviewed definition (the
	// one the preflight showed) to the server's.
	srv.MCP.AddTool(&sdk.Tool{Name: "search_docs", Description: "Search the docs.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: mcptest.Schema(t, `{"type":"object","properties":{"query":{"type":"string"},"all":{"type":"boolean"}},"required":["query"]}`)},
		mcptest.Text("ok"))
	dr, err := w.cat.Drifted(ctx, sess, sourceID, search)
	if err != nil || !dr.Drifted || dr.Current == nil || dr.CurrentHash == hash["search_docs"] || dr.Diff == nil {
		t.Fatalf("changed schema: %+v %v", dr, err)
	}
	want := []actions.DefinitionChange{{Path: "params.properties.all", Change: "added", New: json.RawMessage(`{"type":"boolean"}`)}}
	if got, _ := json.Marshal(dr.Diff); !dr.Diff.ReviewedKnown || !reflect.DeepEqual(dr.Diff.Changes, want) {
		t.Fatalf("diff %s", got)
	}
	if res := actions.ResolveMode(actions.ModeInput{SourceID: sourceID, ActionID: "search_docs", Risk: search.Risk, Drifted: true}); res.Mode != actions.ModeRequireApproval {
		t.Fatalf("drifted allow resolves to %s", res.Mode)
	}
	// Removed from the server: drifted, the reviewed definition listed as removed.
	srv.MCP.RemoveTools("delete_page")
	if dr, err := w.cat.Drifted(ctx, sess, sourceID, del); err != nil || !dr.Drifted || dr.Current != nil ||
		dr.CurrentHash != "" || dr.Diff == nil || !dr.Diff.Removed || len(dr.Diff.Changes) != 2 {
		t.Fatalf("removed tool: %+v %v", dr, err)
	}
	// A tool never reviewed (no hash) is not drifted: its listed
	// definition is the one the call is made against, with no fetch.
	overrides["search_docs"] = integrations.ToolOverride{Mode: "allow"}
	if _, err := w.svc.UpdateConnector(ctx, orgID, conn.ID, integrations.ConnectorPatch{ToolOverrides: &overrides}); err != nil {
		t.Fatal(err)
	}
	lists := srv.Lists.Load()
	if dr, err := w.cat.Drifted(ctx, sess, sourceID, search); err != nil || dr.Drifted || dr.ReviewedHash != "" ||
		dr.CurrentHash != actions.DefinitionHash(search) {
		t.Fatalf("unreviewed tool %+v %v", dr, err)
	}
	if dr, err := w.cat.Drifted(ctx, sess, sourceID, actions.Definition{ID: "unknown_tool"}); err != nil || dr.Drifted {
		t.Fatalf("tool without override %+v %v", dr, err)
	}
	if n := srv.Lists.Load() - lists; n != 0 {
		t.Fatalf("unreviewed tools cost %d tools/list", n)
	}
}

func TestConnectorSourcesCachedRebuiltOnEditAndClosed(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	orgID, userID := w.org(t)
	srv := newMCPServer(t, "")
	conn := w.connector(t, orgID, userID, integrations.Connector{Name: "Docs", URL: srv.URL})
	sess, sess2 := w.session(t, orgID, userID), w.session(t, orgID, userID)
	sourceID := "connector:" + conn.ID

	for _, s := range []sessions.Session{sess, sess2, sess} {
		if _, err := w.cat.List(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// One MCP session, one tools/list across requests and sessions.
	if srv.Inits.Load() != 1 || srv.Lists.Load() != 1 {
		t.Fatalf("inits %d lists %d", srv.Inits.Load(), srv.Lists.Load())
	}
	src1, _, _, err := w.cat.Get(ctx, sess, sourceID)
	if err != nil {
		t.Fatal(err)
	}

	// An edit rebuilds the source and closes the old one (DELETE).
	name := "Docs v2"
	if _, err := w.svc.UpdateConnector(ctx, orgID, conn.ID, integrations.ConnectorPatch{Name: &name}); err != nil {
		t.Fatal(err)
	}
	av, err := w.cat.List(ctx, sess)
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := find(av, sourceID); a.DisplayName != "Docs v2" {
		t.Fatalf("display name %q after edit", a.DisplayName)
	}
	if srv.Inits.Load() != 2 || srv.Lists.Load() != 2 || srv.Deletes.Load() != 1 {
		t.Fatalf("after edit: inits %d lists %d deletes %d", srv.Inits.Load(), srv.Lists.Load(), srv.Deletes.Load())
	}
	src2, ec, _, err := w.cat.Get(ctx, sess, sourceID)
	if err != nil || src2 == src1 {
		t.Fatalf("edited connector served by the old source: %v", err)
	}
	if _, err := src1.Execute(ctx, "search_docs", json.RawMessage(`{"query":"x"}`), ec); err == nil {
		t.Fatal("the old source still works after the edit")
	}

	// Deleting the connector closes its source at the next listing.
	if err := w.svc.DeleteConnector(ctx, orgID, conn.ID); err != nil {
		t.Fatal(err)
	}
	if av, err := w.cat.List(ctx, sess); err != nil || len(av) != 0 {
		t.Fatalf("after delete %v %v", ids(av), err)
	}
	if srv.Deletes.Load() != 2 {
		t.Fatalf("deleted connector's source not closed: deletes %d", srv.Deletes.Load())
	}

	// Close closes every cached source.
	other := w.connector(t, orgID, userID, integrations.Connector{Name: "Other", URL: srv.URL})
	if _, err := w.cat.List(ctx, sess); err != nil {
		t.Fatal(err)
	}
	if err := w.cat.Close(); err != nil {
		t.Fatal(err)
	}
	if srv.Deletes.Load() != 3 {
		t.Fatalf("Close: deletes %d", srv.Deletes.Load())
	}
	if _, _, _, err := w.cat.Get(ctx, sess, "connector:"+other.ID); err == nil {
		t.Fatal("a closed catalog served a connector")
	}
}

func TestConnectorConfigMapsAuthAndModes(t *testing.T) {
	secret := func(context.Context) (string, error) { return "s", nil }
	base := integrations.Connector{ID: "c1", Name: "n", URL: "https://mcp.example.com/mcp", Transport: "remote_http",
		RiskPolicy: integrations.RiskPolicy{DefaultMode: "allow"},
		ToolOverrides: map[string]integrations.ToolOverride{
			"a": {Mode: "allow"}, "b": {Mode: "require_approval"}, "c": {Mode: "deny"}, "d": {Mode: "bogus"},
		}}
	bearer := base
	bearer.Auth = integrations.ConnectorAuth{Type: "bearer", SecretKey: "K"}
	cfg := catalog.ConnectorConfig(bearer, secret, catalog.MCPOptions{CallTimeout: time.Second})
	if cfg.Auth.Header != "Authorization" || cfg.Auth.Prefix != "Bearer" || cfg.Auth.Secret == nil || cfg.CallTimeout != time.Second {
		t.Fatalf("bearer: %+v", cfg.Auth)
	}
	if cfg.DefaultRisk != actions.RiskRead {
		t.Fatalf("default risk %s", cfg.DefaultRisk)
	}
	want := map[string]actions.RiskLevel{"a": actions.RiskRead, "b": actions.RiskWrite, "c": actions.RiskDanger, "d": actions.RiskDanger}
	for k, v := range want {
		if cfg.ToolRisk[k] != v {
			t.Errorf("tool %s risk %s, want %s", k, cfg.ToolRisk[k], v)
		}
		// The risk infers exactly the connector's mode (unknown: deny).
		if m := actions.InferMode(v); k != "d" && string(m) != base.ToolOverrides[k].Mode {
			t.Errorf("tool %s: mode %s infers %s", k, base.ToolOverrides[k].Mode, m)
		}
	}
	header := base
	header.Auth = integrations.ConnectorAuth{Type: "header", SecretKey: "K", HeaderName: "X-Api-Key"}
	header.RiskPolicy.DefaultMode = "weird"
	cfg = catalog.ConnectorConfig(header, secret, catalog.MCPOptions{})
	if cfg.Auth.Header != "X-Api-Key" || cfg.Auth.Prefix != "" || cfg.DefaultRisk != actions.RiskWrite {
		t.Fatalf("header: %+v default %s", cfg.Auth, cfg.DefaultRisk)
	}
	none := base
	none.Auth = integrations.ConnectorAuth{Type: "none"}
	if cfg = catalog.ConnectorConfig(none, secret, catalog.MCPOptions{}); cfg.Auth.Header != "" {
		t.Fatalf("none: %+v", cfg.Auth)
	}
}

// A reviewed connector tool changed on the server is held on the very next
// invocation, however fresh the 5-minute tool cache is: the
// drift check compares the server's current definition. An unchanged
// reviewed tool runs with exactly one tools/list per invocation; an
// unreviewed one with none beyond the cache.
func TestInvokeChecksDriftAgainstCurrentDefinition(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	orgID, userID := w.org(t)
	srv := newMCPServer(t, "")
	srv.MCP.AddTool(&sdk.Tool{Name: "list_pages", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: mcptest.Schema(t, `{"type":"object"}`)}, mcptest.Text("pages"))
	conn := w.connector(t, orgID, userID, integrations.Connector{URL: srv.URL})
	sess := w.session(t, orgID, userID)
	sourceID := "connector:" + conn.ID

	diag := w.cat.ValidateConnector(ctx, conn)
	if !diag.OK {
		t.Fatalf("validate: %+v", diag)
	}
	var hash string
	for _, td := range diag.Tools {
		if td.Name == "search_docs" {
			hash = td.Hash
		}
	}
	overrides := map[string]integrations.ToolOverride{"search_docs": {Mode: "allow", Hash: hash}}
	if _, err := w.svc.UpdateConnector(ctx, orgID, conn.ID, integrations.ConnectorPatch{ToolOverrides: &overrides}); err != nil {
		t.Fatal(err)
	}
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	svc := invocations.New(invocations.Deps{Pool: w.pool, Redis: testenv.Redis(t), Codec: codec, Sources: w.cat,
		Validator: actions.NewValidator(0)})
	invoke := func(action, params string) invocations.Invocation {
		t.Helper()
		out, err := svc.Invoke(ctx, sess, invocations.InvokeInput{Integration: sourceID, Action: action, Params: json.RawMessage(params)})
		if err != nil {
			t.Fatalf("invoke %s: %v", action, err)
		}
		return out.Invocation
	}

	// Reviewed and unchanged: runs; one tools/list per invocation (plus
	// the cache's own fill on the first, cold, call).
	for i := range 3 {
		lists := srv.Lists.Load()
		inv := invoke("search_docs", `{"query":"a"}`)
		if inv.Status != invocations.StatusCompleted || inv.Mode != string(actions.ModeAllow) || inv.Drifted {
			t.Fatalf("call %d: %+v", i, inv)
		}
		if n := srv.Lists.Load() - lists; (i == 0 && n != 2) || (i > 0 && n != 1) {
			t.Fatalf("call %d: %d tools/list", i, n)
		}
	}
	// Unreviewed: served from the cache, no tools/list.
	invoke("list_pages", `{}`)
	lists := srv.Lists.Load()
	invoke("list_pages", `{}`)
	if n := srv.Lists.Load() - lists; n != 0 {
		t.Fatalf("unreviewed tool: %d tools/list", n)
	}

	// The server changes the reviewed tool's input schema; the cache still
	// holds the old one. The very next invocation is held, not run.
	calls := srv.Calls.Load()
	srv.MCP.AddTool(&sdk.Tool{Name: "search_docs", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: mcptest.Schema(t, `{"type":"object","properties":{"query":{"type":"string"},"delete_all":{"type":"boolean"}}}`)},
		mcptest.Text("changed tool ran"))
	inv := invoke("search_docs", `{"query":"a"}`)
	if inv.Status != invocations.StatusPending || !inv.Drifted || inv.Mode != string(actions.ModeRequireApproval) {
		t.Fatalf("changed tool: %+v", inv)
	}
	if srv.Calls.Load() != calls {
		t.Fatal("the changed tool ran under its old review")
	}

	// A reviewed tool the server dropped is held too.
	srv.MCP.RemoveTools("search_docs")
	if inv := invoke("search_docs", `{"query":"a"}`); inv.Status != invocations.StatusPending || !inv.Drifted {
		t.Fatalf("removed tool: %+v", inv)
	}
	if srv.Calls.Load() != calls {
		t.Fatal("a removed reviewed tool was called")
	}
}
