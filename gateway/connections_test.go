package gateway_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/gateway"
	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/gateway/client/runsessions"
	"github.com/proliferate/proliferate/internal/actions/catalog"
	"github.com/proliferate/proliferate/internal/actions/providers"
	"github.com/proliferate/proliferate/internal/actions/providers/linearfake"
	"github.com/proliferate/proliferate/internal/actions/providers/sentryfake"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/integrations/fakes"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/slack/slackfake"
	"github.com/proliferate/proliferate/internal/testenv"
)

// queuedRun queues a run of automation auto (as a trigger does).
func queuedRun(t *testing.T, w *world, orgID, auto string) string {
	t.Helper()
	ctx := context.Background()
	trig := runstest.NewTrigger(t, w.api.Deps.Pool, runstest.Trigger{OrgID: orgID, AutomationID: auto})
	var runID string
	err := pgx.BeginFunc(ctx, w.api.Deps.Pool, func(tx pgx.Tx) error {
		out, err := runs.Enqueue(ctx, tx, w.codec, runs.Source{OrgID: orgID, TriggerID: trig, AutomationID: auto, TriggerType: "webhook",
			WebhookEventID: "wh-" + auto}, runs.Event{Provider: "github", EventType: "issue_opened", ProviderEventType: "issues:opened",
			OccurredAt: time.Now(), DedupKey: "d-" + auto, Title: "Bug", URL: "https://github.com/a/b/issues/1"})
		runID = out.RunID
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return runID
}

// A run's session gets its automation's connections as its bindings when
// the run pipeline creates it through the gateway (runsessions.Sessions, a
// service token), in the session's creating transaction and once however
// often the creation is retried: an automation scoped to Linear offers and
// runs Linear actions only, and the sandbox's Sentry call is the unknown
// integration 404 that reaches nothing; a run of an automation without
// connections keeps the organization's integrations (the catalog's
// fallback).
func TestRunSessionsActWithTheirAutomationsConnections(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	pool := w.api.Deps.Pool
	nango := fakes.NewNango(t, "nango-secret", map[string]string{"linear": "linear", "sentry": "sentry"}, nil)
	vars := map[string]string{"NANGO_URL": nango.URL, "NANGO_SECRET_KEY": "nango-secret"}
	cfg, err := config.LoadFrom(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	box, err := secretbox.New(cfg.EncryptionKeys)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(w.logs, nil))
	svc, err := integrations.New(integrations.Options{Cfg: cfg, Pool: pool, Redis: w.api.Deps.Redis, Box: box, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	lin, sen, slk := linearfake.New(t), sentryfake.New(t), slackfake.New(t)
	cat := catalog.New(catalog.Deps{Pool: pool, Integrations: svc, Secrets: catalog.OrgSecrets{Pool: pool, Box: box},
		Providers: providers.Config{LinearURL: lin.URL(), SentryURL: sen.URL(), SlackURL: slk.URL(), Timeout: 5 * time.Second},
		MCP:       catalog.MCPOptions{ListTimeout: 5 * time.Second, CallTimeout: 5 * time.Second}, Log: log})
	t.Cleanup(func() { _ = cat.Close() })
	g := w.startActionsGW(t, actionsGWOptions{Instance: "a", Sources: cat})

	owner := w.api.NewUser(t)
	lin.AddUser(linearfake.User{ID: "user-ada", Name: "Ada", Email: "ada@example.com"})
	lin.AddToken("lin-tok", "user-ada")
	integration := func(preset, token string) string {
		conn := preset + "-conn-" + owner.OrgID
		nango.AddConnection(fakes.NangoConnection{ConnectionID: conn, ConfigKey: preset, Provider: preset, AccessToken: token})
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO integrations (org_id, provider, integration_id, connection_id, provider_config_key, created_by)
			VALUES ($1, 'nango', $2, $3, $2, $4) RETURNING id::text`, owner.OrgID, preset, conn, owner.ID).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	linearID := integration("linear", "lin-tok")
	integration("sentry", "sen-tok")
	scoped := runstest.Automation(t, pool, owner.OrgID)
	if err := svc.BindAutomation(ctx, owner.OrgID, scoped, linearID); err != nil {
		t.Fatal(err)
	}
	unscoped := runstest.Automation(t, pool, owner.OrgID)

	rs := runsessions.New(client.New(g.url, w.serviceToken(t)))
	runSession := func(auto string) string {
		runID := queuedRun(t, w, owner.OrgID, auto)
		req := runs.SessionRequest{IdempotencyKey: "run:" + runID + ":session", OrgID: owner.OrgID, RunID: runID, AutomationID: auto}
		sid, err := rs.CreateSession(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		// The pipeline retries the creation after a crash: same session.
		if again, err := rs.CreateSession(ctx, req); err != nil || again != sid {
			t.Fatalf("retried creation: %s %v, want %s", again, err, sid)
		}
		return sid
	}
	available := func(sid string) []string {
		testenv.Eventually(t, 20*time.Second, "the run's session running", func() bool {
			s, err := w.store.Get(ctx, "", sid)
			return err == nil && s.Status == "running"
		})
		st, body := call(t, "GET", actionsURL(g, sid, "available"), w.sandboxToken(sid), nil, nil)
		var av gateway.AvailableResponse
		if err := json.Unmarshal(body, &av); err != nil || st != http.StatusOK {
			t.Fatalf("available: %d %s", st, body)
		}
		var ids []string
		for _, it := range av.Integrations {
			ids = append(ids, it.Integration)
		}
		slices.Sort(ids)
		return ids
	}

	sid := runSession(scoped)
	var bound []string
	rows, _ := pool.Query(ctx, `SELECT integration_id::text FROM session_connections WHERE session_id = $1`, sid)
	if bound, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || !slices.Equal(bound, []string{linearID}) {
		t.Fatalf("session bindings %v %v, want the automation's [%s]", bound, err, linearID)
	}
	if got := available(sid); !slices.Equal(got, []string{"linear"}) {
		t.Fatalf("the Linear-scoped run's session offers %v", got)
	}
	sentryBefore := len(sen.Requests())
	st, body := call(t, "POST", actionsURL(g, sid, "invoke"), w.sandboxToken(sid),
		map[string]any{"integration": "sentry", "action": "list_issues", "params": map[string]any{"organization_slug": "acme", "project_slug": "web"}}, nil)
	if st != http.StatusNotFound || errorCode(t, body) != httpapi.CodeNotFound || len(sen.Requests()) != sentryBefore {
		t.Fatalf("Sentry from a Linear-scoped run: %d %s (Sentry saw %d requests)", st, body, len(sen.Requests())-sentryBefore)
	}
	st, body = call(t, "POST", actionsURL(g, sid, "invoke"), w.sandboxToken(sid),
		map[string]any{"integration": "linear", "action": "list_issues", "params": map[string]any{}}, nil)
	if st != http.StatusOK {
		t.Fatalf("Linear from the Linear-scoped run: %d %s", st, body)
	}

	open := runSession(unscoped)
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM session_connections WHERE session_id = $1`, open).Scan(&n); err != nil || n != 0 {
		t.Fatalf("an automation without connections bound %d integrations (%v)", n, err)
	}
	if got := available(open); !slices.Equal(got, []string{"linear", "sentry"}) {
		t.Fatalf("the unscoped run's session offers %v, want the organization's", got)
	}
}
