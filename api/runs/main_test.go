package runs_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	identityapi "github.com/proliferate/proliferate/api/identity"
	runsapi "github.com/proliferate/proliferate/api/runs"
	triggersapi "github.com/proliferate/proliferate/api/triggers"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/identity"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/query"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas/schemastest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var codec = schemastest.Codec()

// env is the API with the runs routes, the triggers routes (automations,
// Run Now: both packages serve /automations/:id/…) and the identity feature
// (whose verifier accepts service tokens, as in production).
type env struct {
	*apitest.Env
	// Service is a gateway service token; Sandbox a session sandbox token.
	Service, Sandbox string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := apitest.New(t, []func(*api.Server) error{runsapi.RegisterWith(runsapi.Options{Codec: codec}), identityapi.Register,
		triggersapi.RegisterWith(triggersapi.Options{Codec: codec})})
	svc, err := identity.IssueServiceToken(e.Deps.Cfg.ServiceToken, "gateway", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, sbx := e.SandboxToken(t, e.NewUser(t).OrgID)
	return &env{Env: e, Service: svc, Sandbox: sbx}
}

// org is an organization with an owner, an admin, two members and an
// automation with a webhook trigger.
type org struct {
	*apitest.Org
	Member2                 *apitest.User
	AutomationID, TriggerID string
}

func newOrg(t *testing.T, e *env) *org {
	t.Helper()
	o := &org{Org: e.NewOrg(t), Member2: e.NewUser(t)}
	e.AddMember(t, o.Member2, o.ID, auth.RoleMember)
	o.AutomationID = runstest.Automation(t, e.Deps.Pool, o.ID)
	o.TriggerID = runstest.NewTrigger(t, e.Deps.Pool, runstest.Trigger{OrgID: o.ID, AutomationID: o.AutomationID})
	return o
}

var eventSeq atomic.Int64

// enqueue queues n runs of the org's automation (a transaction each, so
// each has its own created_at) and returns their ids, oldest first.
func enqueue(t *testing.T, e *env, o *org, n int) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for range n {
		err := pgx.BeginFunc(ctx, e.Deps.Pool, func(tx pgx.Tx) error {
			k := eventSeq.Add(1)
			out, err := runs.Enqueue(ctx, tx, codec, runs.Source{OrgID: o.ID, TriggerID: o.TriggerID, AutomationID: o.AutomationID,
				TriggerType: "webhook"}, runs.Event{Provider: "github", EventType: "issue_opened", ProviderEventType: "issues:opened",
				OccurredAt: time.Now(), DedupKey: fmt.Sprintf("runs-api-test:%d:%d", k, time.Now().UnixNano()),
				Title: fmt.Sprintf("Issue %d", k), URL: fmt.Sprintf("https://github.com/acme/app/issues/%d", k),
				Context: map[string]any{"title": fmt.Sprintf("Issue %d", k)}})
			if err != nil {
				return err
			}
			ids = append(ids, out.RunID)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// path is the pipeline's way to each status from queued.
var path = map[string][]string{
	runs.StatusQueued:     nil,
	runs.StatusEnriching:  {runs.StatusEnriching},
	runs.StatusReady:      {runs.StatusEnriching, runs.StatusReady},
	runs.StatusRunning:    {runs.StatusEnriching, runs.StatusReady, runs.StatusRunning},
	runs.StatusSucceeded:  {runs.StatusEnriching, runs.StatusReady, runs.StatusRunning, runs.StatusSucceeded},
	runs.StatusNeedsHuman: {runs.StatusEnriching, runs.StatusReady, runs.StatusRunning, runs.StatusNeedsHuman},
	runs.StatusFailed:     {runs.StatusEnriching, runs.StatusReady, runs.StatusRunning, runs.StatusFailed},
	runs.StatusTimedOut:   {runs.StatusEnriching, runs.StatusReady, runs.StatusRunning, runs.StatusTimedOut},
}

// move walks a queued run to status with runs.Apply, as the stages do.
func move(t *testing.T, e *env, runID, status string) {
	t.Helper()
	ctx := context.Background()
	steps, ok := path[status]
	if !ok {
		t.Fatalf("no path to %s", status)
	}
	for _, to := range steps {
		err := pgx.BeginFunc(ctx, e.Deps.Pool, func(tx pgx.Tx) error {
			r, err := runs.Lock(ctx, tx, "", runID)
			if err != nil {
				return err
			}
			m := runs.Move{From: []string{r.Status}, To: to}
			if to == runs.StatusFailed {
				m.Reason, m.Stage, m.ErrorCode, m.ErrorMessage = "sandbox_dead", runs.StageFinalization, "sandbox_dead", "the sandbox died"
			}
			_, err = runs.Apply(ctx, tx, codec, r, m)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// run queues one run and moves it to status.
func run(t *testing.T, e *env, o *org, status string) string {
	t.Helper()
	id := enqueue(t, e, o, 1)[0]
	move(t, e, id, status)
	return id
}

// snapshot is what a refused write must leave unchanged.
func snapshot(t *testing.T, e *env, runID string) string {
	t.Helper()
	return apitest.Scalar[string](t, e.Env, `SELECT concat_ws('|', status, assigned_to, resolved_at, resolution_note, updated_at,
		(SELECT count(*) FROM automation_run_events WHERE run_id = $1), (SELECT count(*) FROM outbox WHERE key = $1::text))
		FROM automation_runs WHERE id = $1`, runID)
}

func getPage(t *testing.T, e *env, path, token string) api.Page[query.Summary] {
	t.Helper()
	var p api.Page[query.Summary]
	e.Do(t, http.MethodGet, path, token, nil).Expect(t, http.StatusOK, &p)
	return p
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
