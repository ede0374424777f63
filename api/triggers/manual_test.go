package triggers_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/triggers/store"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestRunNowQueuesOneAttributedRun(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	auto := createAutomation(t, env, o.Admin.Token, nil)
	outboxBefore := env.CountRows(t, "outbox", "topic = $1", topics.RunsLifecycle)

	var run store.ManualRun
	env.Do(t, http.MethodPost, "/automations/"+auto.ID+"/run", o.Member.Token, map[string]any{"note": "please look"}).
		Expect(t, http.StatusCreated, &run)
	if run.RunID == "" || run.Status != "queued" || run.TriggerEventID == "" || run.TriggerID == "" {
		t.Fatalf("run %+v", run)
	}
	if n := env.CountRows(t, "automation_runs", "automation_id = $1", auto.ID); n != 1 {
		t.Fatalf("%d runs", n)
	}
	if n := env.CountRows(t, "automation_runs", "id = $1 AND status = 'queued' AND triggered_by = $2 AND trigger_id = $3 AND trigger_event_id = $4",
		run.RunID, o.Member.ID, run.TriggerID, run.TriggerEventID); n != 1 {
		t.Fatal("the run is not queued and attributed to the caller")
	}
	if n := env.CountRows(t, "triggers", "id = $1 AND trigger_type = 'manual' AND provider = 'manual' AND automation_id = $2", run.TriggerID, auto.ID); n != 1 {
		t.Fatal("no manual trigger")
	}
	if n := env.CountRows(t, "automation_run_events", "run_id = $1 AND to_status = 'queued'", run.RunID); n != 1 {
		t.Fatalf("%d run log rows", n)
	}
	var ev store.Event
	env.Do(t, http.MethodGet, "/trigger-events/"+run.TriggerEventID, o.Member.Token, nil).Expect(t, http.StatusOK, &ev)
	if ev.Status != "queued" || ev.Provider != "manual" || !strings.HasPrefix(ev.DedupKey, "manual:") || ev.ParsedContext["note"] != "please look" ||
		ev.ParsedContext["triggered_by"] != o.Member.ID || ev.TriggeredBy == nil || *ev.TriggeredBy != o.Member.ID || ev.TriggerType != "manual" {
		t.Fatalf("event %+v", ev)
	}
	var value []byte
	if err := env.Deps.Pool.QueryRow(context.Background(), `SELECT value FROM outbox WHERE topic = $1 AND key = $2`,
		topics.RunsLifecycle, run.RunID).Scan(&value); err != nil {
		t.Fatalf("runs.lifecycle outbox row: %v", err)
	}
	dec, err := codec.Decode(value)
	if err != nil {
		t.Fatal(err)
	}
	if life, ok := dec.Payload.(*schemas.RunLifecycle); !ok || life.ToStatus != schemas.RunQueued || life.RunID != run.RunID ||
		life.AutomationID != auto.ID || dec.OrgID != o.ID {
		t.Fatalf("lifecycle %+v", dec.Payload)
	}
	if n := env.CountRows(t, "outbox", "topic = $1", topics.RunsLifecycle); n != outboxBefore+1 {
		t.Fatalf("%d lifecycle rows written", n-outboxBefore)
	}

	// Without a body; concurrent Run Nows share the one manual trigger.
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			resp := env.Do(t, http.MethodPost, "/automations/"+auto.ID+"/run", o.Admin.Token, nil)
			if resp.Status != http.StatusCreated {
				t.Errorf("status %d: %s", resp.Status, resp.Body)
			}
		})
	}
	wg.Wait()
	if n := env.CountRows(t, "triggers", "automation_id = $1 AND trigger_type = 'manual'", auto.ID); n != 1 {
		t.Fatalf("%d manual triggers", n)
	}
	if n := env.CountRows(t, "automation_runs", "automation_id = $1 AND status = 'queued'", auto.ID); n != 6 {
		t.Fatalf("%d runs", n)
	}
	if n := env.CountRows(t, "automation_runs", "automation_id = $1 AND triggered_by = $2", auto.ID, o.Admin.ID); n != 5 {
		t.Fatalf("%d runs attributed to the admin", n)
	}
}

func TestRunNowRefusals(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	auto := createAutomation(t, env, o.Admin.Token, map[string]any{"name": "off", "enabled": false})
	path := "/automations/" + auto.ID + "/run"
	for _, tc := range []struct {
		body   any
		status int
		code   string
	}{
		{nil, http.StatusConflict, "automation_disabled"},
		{map[string]any{"note": strings.Repeat("n", 2001)}, 422, httpapi.CodeValidation},
		{map[string]any{"note": 1}, 422, httpapi.CodeValidation},
		{map[string]any{"note": "a\x00"}, 422, httpapi.CodeValidation},
		{map[string]any{"reason": "x"}, 422, httpapi.CodeValidation},
		{`{"note":`, 400, httpapi.CodeBadRequest},
	} {
		env.Do(t, http.MethodPost, path, o.Owner.Token, tc.body).ExpectError(t, tc.status, tc.code)
	}
	env.Do(t, http.MethodPost, "/automations/00000000-0000-0000-0000-000000000000/run", o.Owner.Token, nil).
		ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	if env.CountRows(t, "triggers", "automation_id = $1", auto.ID) != 0 || env.CountRows(t, "automation_runs", "automation_id = $1", auto.ID) != 0 {
		t.Fatal("a refused Run Now wrote")
	}
}
