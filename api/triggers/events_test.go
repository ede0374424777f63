package triggers_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/triggers/store"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestEventListFiltersAndPagination(t *testing.T) {
	env := newEnv(t)
	o, other := env.NewOrg(t), env.NewOrg(t)
	auto := createAutomation(t, env, o.Admin.Token, nil)
	t1 := createTrigger(t, env, o.Admin.Token, auto.ID, map[string]any{"trigger_type": "webhook", "provider": "custom"})
	t2 := createTrigger(t, env, o.Admin.Token, auto.ID, map[string]any{"trigger_type": "webhook", "provider": "custom"})
	start := apitest.Scalar[time.Time](t, env, `SELECT now()`)
	q1 := enqueue(t, env, t1.ID, "queued", 3)
	mid := apitest.Scalar[time.Time](t, env, `SELECT clock_timestamp()`)
	enqueue(t, env, t1.ID, "skipped", 2)
	enqueue(t, env, t2.ID, "failed", 1)
	env.Exec(t, `UPDATE trigger_events SET provider = 'linear' WHERE id = $1`, q1[0])
	otherAuto := createAutomation(t, env, other.Admin.Token, nil)
	otherTr := createTrigger(t, env, other.Admin.Token, otherAuto.ID, map[string]any{"trigger_type": "webhook", "provider": "custom"})
	enqueue(t, env, otherTr.ID, "queued", 2)

	var page api.Page[store.Event]
	for q, want := range map[string]int{
		"":                                   6,
		"trigger_id=" + t1.ID:                5,
		"trigger_id=" + t2.ID:                1,
		"trigger_id=" + otherTr.ID:           0,
		"automation_id=" + auto.ID:           6,
		"automation_id=" + otherAuto.ID:      0,
		"status=queued":                      3,
		"status=skipped&trigger_id=" + t1.ID: 2,
		"status=failed":                      1,
		"provider=linear":                    1,
		"provider=github":                    5,
		"since=" + url.QueryEscape(mid.Format(time.RFC3339Nano)): 3,
		"until=" + url.QueryEscape(mid.Format(time.RFC3339Nano)): 3,
		"since=" + url.QueryEscape(start.Add(-time.Hour).Format(time.RFC3339Nano)) + "&until=" + url.QueryEscape(start.Add(time.Hour).Format(time.RFC3339Nano)): 6,
	} {
		page = getPage[store.Event](t, env, "/trigger-events?"+q, o.Member.Token)
		if len(page.Items) != want {
			t.Fatalf("%q: %d events, want %d", q, len(page.Items), want)
		}
		for _, ev := range page.Items {
			if ev.AutomationID != auto.ID {
				t.Fatalf("%q: event of another org or automation: %+v", q, ev)
			}
		}
	}
	for _, q := range []string{"trigger_id=nope", "status=done", "since=yesterday", "until=2025-13-01T00:00:00Z", "provider=%20x",
		"since=2025-01-02T00:00:00Z&until=2025-01-01T00:00:00Z", "limit=101", "automation_id=1"} {
		env.Do(t, http.MethodGet, "/trigger-events?"+q, o.Member.Token, nil).ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
	}

	// Pages of two walk all six, newest first, without repeats.
	seen := map[string]bool{}
	cursor := ""
	var last time.Time
	for range 3 {
		page = api.Page[store.Event]{}
		page = getPage[store.Event](t, env, "/trigger-events?limit=2&cursor="+cursor, o.Member.Token)
		if len(page.Items) != 2 {
			t.Fatalf("page of %d", len(page.Items))
		}
		for _, ev := range page.Items {
			if seen[ev.ID] || (!last.IsZero() && ev.CreatedAt.After(last)) {
				t.Fatalf("page order broken at %s", ev.ID)
			}
			seen[ev.ID], last = true, ev.CreatedAt
		}
		cursor = page.NextCursor
	}
	if cursor != "" || len(seen) != 6 {
		t.Fatalf("cursor %q after %d events", cursor, len(seen))
	}

	// One event, with its run and parsed context; another org's is 404.
	var ev store.Event
	env.Do(t, http.MethodGet, "/trigger-events/"+q1[1], o.Member.Token, nil).Expect(t, http.StatusOK, &ev)
	if ev.ID != q1[1] || ev.Status != "queued" || ev.RunID == nil || ev.RunStatus == nil || *ev.RunStatus != "queued" ||
		ev.ParsedContext == nil || ev.ParsedContext["n"] == nil || ev.TriggerID != t1.ID || ev.DedupKey == "" || ev.TriggerType != "webhook" {
		t.Fatalf("event %+v", ev)
	}
	env.Do(t, http.MethodGet, "/trigger-events/"+q1[1], other.Member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodGet, "/trigger-events/x", o.Member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
}

func TestSkipQueuedEvent(t *testing.T) {
	env := newEnv(t)
	o, other := env.NewOrg(t), env.NewOrg(t)
	auto := createAutomation(t, env, o.Admin.Token, nil)
	tr := createTrigger(t, env, o.Admin.Token, auto.ID, map[string]any{"trigger_type": "webhook", "provider": "custom"})
	ids := enqueue(t, env, tr.ID, "queued", 3)
	skippedID := enqueue(t, env, tr.ID, "skipped", 1)[0]
	runOf := func(eventID string) (id, status string) {
		t.Helper()
		if err := env.Deps.Pool.QueryRow(context.Background(), `SELECT id::text, status FROM automation_runs WHERE trigger_event_id = $1`,
			eventID).Scan(&id, &status); err != nil {
			t.Fatal(err)
		}
		return id, status
	}
	outboxBefore := env.CountRows(t, "outbox", "true")
	auditBefore := env.CountRows(t, "outbox", "topic = $1 AND key = $2", topics.AuditEvents, o.ID)

	// Members cannot; another org gets 404; neither changes anything.
	env.Do(t, http.MethodPost, "/trigger-events/"+ids[0]+"/skip", o.Member.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	env.Do(t, http.MethodPost, "/trigger-events/"+ids[0]+"/skip", other.Owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	if _, st := runOf(ids[0]); st != "queued" || env.CountRows(t, "trigger_events", "id = $1 AND status = 'queued'", ids[0]) != 1 ||
		env.CountRows(t, "outbox", "true") != outboxBefore {
		t.Fatal("a refused skip changed something")
	}

	var ev store.Event
	env.Do(t, http.MethodPost, "/trigger-events/"+ids[0]+"/skip", o.Admin.Token, nil).Expect(t, http.StatusOK, &ev)
	runID, st := runOf(ids[0])
	if ev.Status != "skipped" || ev.SkipReason == nil || *ev.SkipReason != "manual" || ev.RunID == nil || *ev.RunID != runID ||
		ev.RunStatus == nil || *ev.RunStatus != "canceled" || st != "canceled" {
		t.Fatalf("skipped event %+v, run %s", ev, st)
	}
	if n := env.CountRows(t, "automation_run_events", "run_id = $1 AND from_status = 'queued' AND to_status = 'canceled'", runID); n != 1 {
		t.Fatalf("%d run log rows", n)
	}
	// runs.lifecycle for the run, triggers.events for the event, in the outbox.
	var value []byte
	if err := env.Deps.Pool.QueryRow(context.Background(), `SELECT value FROM outbox WHERE topic = $1 AND key = $2 ORDER BY id DESC LIMIT 1`,
		topics.RunsLifecycle, runID).Scan(&value); err != nil {
		t.Fatal(err)
	}
	dec, err := codec.Decode(value)
	if err != nil {
		t.Fatal(err)
	}
	life, ok := dec.Payload.(*schemas.RunLifecycle)
	if !ok || dec.OrgID != o.ID || life.RunID != runID || life.FromStatus == nil || *life.FromStatus != schemas.RunQueued ||
		life.ToStatus != schemas.RunCanceled || life.StatusReason == nil || *life.StatusReason != "manual_skip" ||
		life.TriggerEventID != ids[0] {
		t.Fatalf("lifecycle %+v", dec.Payload)
	}
	if err := env.Deps.Pool.QueryRow(context.Background(), `SELECT value FROM outbox WHERE topic = $1 AND key = $2 ORDER BY id DESC LIMIT 1`,
		topics.TriggersEvents, tr.ID).Scan(&value); err != nil {
		t.Fatal(err)
	}
	if dec, err = codec.Decode(value); err != nil {
		t.Fatal(err)
	}
	if te, ok := dec.Payload.(*schemas.TriggerEvent); !ok || te.TriggerEventID != ids[0] || te.Status != schemas.TriggerEventSkipped ||
		te.SkipReason == nil || *te.SkipReason != "manual" {
		t.Fatalf("triggers.events %+v", dec.Payload)
	}
	if n := env.CountRows(t, "outbox", "true"); n != outboxBefore+3 {
		t.Fatalf("%d outbox rows written, want 3 (the run's lifecycle, the event's and the audit trail's)", n-outboxBefore)
	}
	if n := env.CountRows(t, "outbox", "topic = $1 AND key = $2", topics.AuditEvents, o.ID); n != auditBefore+1 {
		t.Fatalf("%d audit events of the skip, want 1", n-auditBefore)
	}

	// Anything but a queued event with a queued run is an invalid transition.
	env.Exec(t, `UPDATE automation_runs SET status = 'enriching' WHERE trigger_event_id = $1`, ids[1])
	env.Exec(t, `UPDATE trigger_events SET status = 'completed' WHERE id = $1`, ids[2])
	for _, id := range []string{ids[0], ids[1], ids[2], skippedID} {
		outbox := env.CountRows(t, "outbox", "true")
		env.Do(t, http.MethodPost, "/trigger-events/"+id+"/skip", o.Owner.Token, nil).ExpectError(t, http.StatusConflict, "invalid_transition")
		if env.CountRows(t, "outbox", "true") != outbox {
			t.Fatal("a refused skip wrote to the outbox")
		}
	}
	if _, st := runOf(ids[1]); st != "enriching" || env.CountRows(t, "trigger_events", "id = $1 AND status = 'queued'", ids[1]) != 1 {
		t.Fatal("a refused skip changed the event or its run")
	}
	var tdet store.TriggerDetail
	env.Do(t, http.MethodGet, "/triggers/"+tr.ID, o.Member.Token, nil).Expect(t, http.StatusOK, &tdet)
	if tdet.StatusCounts != (store.StatusCounts{Queued: 1, Completed: 1, Skipped: 2}) {
		t.Fatalf("counts after skip %+v", tdet.StatusCounts)
	}
	if n := env.CountRows(t, "audit_log", "org_id = $1 AND action = 'trigger_event.skip' AND target_id = $2", o.ID, ids[0]); n != 1 {
		t.Fatalf("%d audit rows", n)
	}
	env.Do(t, http.MethodPost, "/trigger-events/00000000-0000-0000-0000-000000000000/skip", o.Owner.Token, nil).
		ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
}
