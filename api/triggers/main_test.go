package triggers_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	triggersapi "github.com/proliferate/proliferate/api/triggers"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/triggers/store"
	"github.com/proliferate/proliferate/schemas/schemastest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const ingestURL = "https://hooks.example.com"

var codec = schemastest.Codec()

func newEnv(t *testing.T) *apitest.Env {
	t.Helper()
	return apitest.New(t, []func(*api.Server) error{triggersapi.RegisterWith(triggersapi.Options{Codec: codec, IngestURL: ingestURL})})
}

func createAutomation(t *testing.T, env *apitest.Env, token string, body map[string]any) store.Automation {
	t.Helper()
	if body == nil {
		body = map[string]any{"name": "Fix bugs"}
	}
	var a store.Automation
	env.Do(t, http.MethodPost, "/automations", token, body).Expect(t, http.StatusCreated, &a)
	return a
}

func createTrigger(t *testing.T, env *apitest.Env, token, automationID string, body map[string]any) store.CreatedTrigger {
	t.Helper()
	var tr store.CreatedTrigger
	env.Do(t, http.MethodPost, "/automations/"+automationID+"/triggers", token, body).Expect(t, http.StatusCreated, &tr)
	return tr
}

func createSchedule(t *testing.T, env *apitest.Env, token, automationID string, body map[string]any) store.Schedule {
	t.Helper()
	var sc store.Schedule
	env.Do(t, http.MethodPost, "/automations/"+automationID+"/schedules", token, body).Expect(t, http.StatusCreated, &sc)
	return sc
}

// integration inserts an integration of kind (github, linear, sentry…) into
// org, visible to the whole org unless private (then only to createdBy).
func integration(t *testing.T, env *apitest.Env, orgID, kind string, private bool, createdBy string) string {
	t.Helper()
	vis := "org"
	if private {
		vis = "private"
	}
	var id string
	var err error
	if kind == "github" {
		err = env.Deps.Pool.QueryRow(context.Background(), `INSERT INTO integrations (org_id, provider, integration_id, connection_id,
				github_installation_id, visibility, created_by)
			VALUES ($1, 'github-app', 'github', $2, $3, $4, $5) RETURNING id::text`,
			orgID, apitest.Unique("github-app-"), rand.Int64N(1<<40)+1, vis, createdBy).Scan(&id)
	} else {
		err = env.Deps.Pool.QueryRow(context.Background(), `INSERT INTO integrations (org_id, provider, integration_id, connection_id,
				provider_config_key, visibility, created_by)
			VALUES ($1, 'nango', $2, $3, $2, $4, $5) RETURNING id::text`,
			orgID, kind, apitest.Unique("conn-"), vis, createdBy).Scan(&id)
	}
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func configuration(t *testing.T, env *apitest.Env, orgID string) string {
	t.Helper()
	var id string
	if err := env.Deps.Pool.QueryRow(context.Background(), `INSERT INTO configurations (org_id, name) VALUES ($1, 'Workspace')
		RETURNING id::text`, orgID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// source describes a trigger for runs.Enqueue and friends.
func source(t *testing.T, env *apitest.Env, triggerID string) runs.Source {
	t.Helper()
	var src runs.Source
	if err := env.Deps.Pool.QueryRow(context.Background(), `SELECT org_id::text, id::text, automation_id::text, trigger_type
		FROM triggers WHERE id = $1`, triggerID).Scan(&src.OrgID, &src.TriggerID, &src.AutomationID, &src.TriggerType); err != nil {
		t.Fatal(err)
	}
	return src
}

var eventSeq atomic.Int64

func event(provider string) runs.Event {
	n := eventSeq.Add(1)
	return runs.Event{Provider: provider, EventType: "issue_opened", ProviderEventType: "issues:opened", OccurredAt: time.Now(),
		DedupKey: fmt.Sprintf("test:%d:%d", n, rand.Int64()), Title: fmt.Sprintf("Event %d", n),
		URL: "https://example.com/1", Context: map[string]any{"n": n}}
}

// enqueue records events for a trigger the way the processor does: kind is
// queued, skipped or failed. It returns the trigger event ids.
func enqueue(t *testing.T, env *apitest.Env, triggerID, kind string, n int) []string {
	t.Helper()
	src := source(t, env, triggerID)
	ctx := context.Background()
	var ids []string
	for range n {
		err := pgx.BeginFunc(ctx, env.Deps.Pool, func(tx pgx.Tx) error {
			var out runs.Outcome
			var err error
			switch kind {
			case "queued":
				out, err = runs.Enqueue(ctx, tx, codec, src, event("github"))
			case "skipped":
				out, err = runs.RecordSkipped(ctx, tx, codec, src, event("github"), runs.SkipFilterMismatch)
			case "failed":
				out, err = runs.RecordFailed(ctx, tx, codec, src, event("github"), fmt.Errorf("not JSON"))
			}
			ids = append(ids, out.TriggerEventID)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// getPage fetches a list page into a fresh value.
func getPage[T any](t *testing.T, env *apitest.Env, path, token string) api.Page[T] {
	t.Helper()
	var p api.Page[T]
	env.Do(t, http.MethodGet, path, token, nil).Expect(t, http.StatusOK, &p)
	return p
}
