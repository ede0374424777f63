package triggers_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/triggers/schedule"
	"github.com/proliferate/proliferate/internal/triggers/store"
)

// nextBetween checks next is the schedule's first tick after some moment in
// [from, to] (the request ran in between).
func nextBetween(t *testing.T, expr, tz string, next *time.Time, from, to time.Time) {
	t.Helper()
	spec, err := schedule.Parse(expr, tz)
	if err != nil {
		t.Fatal(err)
	}
	if next == nil {
		t.Fatal("no next_run_at")
	}
	lo, hi := spec.Next(from.Add(-time.Second)), spec.Next(to)
	if next.Before(lo) || next.After(hi) || !next.After(from.Add(-time.Second)) {
		t.Fatalf("next_run_at %s not in [%s, %s]", next, lo, hi)
	}
}

func TestScheduleLifecycle(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	auto := createAutomation(t, env, o.Admin.Token, nil)
	before := time.Now()
	sc := createSchedule(t, env, o.Admin.Token, auto.ID, map[string]any{"name": " Nightly ", "cron_expression": " 30 2 * * 1-5 ",
		"timezone": "America/New_York"})
	after := time.Now()
	if sc.Name != "Nightly" || sc.CronExpression != "30 2 * * 1-5" || sc.Timezone != "America/New_York" || !sc.Enabled ||
		sc.AutomationID != auto.ID || sc.LastRunAt != nil || sc.CreatedBy == nil || *sc.CreatedBy != o.Admin.ID {
		t.Fatalf("created %+v", sc)
	}
	nextBetween(t, "30 2 * * 1-5", "America/New_York", sc.NextRunAt, before, after)
	if got := apitest.Scalar[string](t, env, `SELECT trigger_type || ':' || provider || ':' || enabled::text || ':' || automation_id::text
		FROM triggers WHERE id = $1`, sc.TriggerID); got != "scheduled:scheduled:true:"+auto.ID {
		t.Fatalf("schedule trigger %s", got)
	}
	// Timezone defaults to UTC.
	utc := createSchedule(t, env, o.Owner.Token, auto.ID, map[string]any{"cron_expression": "@hourly"})
	if utc.Timezone != "UTC" || utc.NextRunAt == nil || utc.NextRunAt.Minute() != 0 {
		t.Fatalf("utc schedule %+v", utc)
	}

	var got store.Schedule
	env.Do(t, http.MethodGet, "/schedules/"+sc.ID, o.Member.Token, nil).Expect(t, http.StatusOK, &got)
	if got.ID != sc.ID || got.NextRunAt == nil || !got.NextRunAt.Equal(*sc.NextRunAt) {
		t.Fatalf("get %+v", got)
	}
	page := getPage[store.Schedule](t, env, "/schedules?automation_id="+auto.ID+"&limit=1", o.Member.Token)
	if len(page.Items) != 1 || page.Items[0].ID != utc.ID || page.NextCursor == "" {
		t.Fatalf("page %+v", page)
	}

	// Changing the expression recomputes next_run_at; disabling clears it and
	// disables the trigger; enabling brings both back.
	before = time.Now()
	env.Do(t, http.MethodPatch, "/schedules/"+sc.ID, o.Admin.Token, map[string]any{"cron_expression": "*/10 * * * *", "timezone": "Asia/Kolkata"}).
		Expect(t, http.StatusOK, &got)
	nextBetween(t, "*/10 * * * *", "Asia/Kolkata", got.NextRunAt, before, time.Now())
	if got.Name != "Nightly" || got.Timezone != "Asia/Kolkata" {
		t.Fatalf("patched %+v", got)
	}
	env.Do(t, http.MethodPatch, "/schedules/"+sc.ID, o.Admin.Token, map[string]any{"enabled": false}).Expect(t, http.StatusOK, &got)
	if got.Enabled || got.NextRunAt != nil || env.CountRows(t, "triggers", "id = $1 AND NOT enabled", sc.TriggerID) != 1 {
		t.Fatalf("disabled %+v", got)
	}
	before = time.Now()
	env.Do(t, http.MethodPatch, "/schedules/"+sc.ID, o.Owner.Token, map[string]any{"enabled": true}).Expect(t, http.StatusOK, &got)
	nextBetween(t, "*/10 * * * *", "Asia/Kolkata", got.NextRunAt, before, time.Now())
	if env.CountRows(t, "triggers", "id = $1 AND enabled", sc.TriggerID) != 1 {
		t.Fatal("trigger not re-enabled")
	}
	// A disabled schedule is created without a next run and with a disabled trigger.
	off := createSchedule(t, env, o.Admin.Token, auto.ID, map[string]any{"cron_expression": "@daily", "enabled": false})
	if off.NextRunAt != nil || env.CountRows(t, "triggers", "id = $1 AND NOT enabled", off.TriggerID) != 1 {
		t.Fatalf("disabled schedule %+v", off)
	}

	// Deleting the schedule deletes its trigger (and the trigger's events).
	enqueue(t, env, sc.TriggerID, "queued", 1)
	env.Do(t, http.MethodDelete, "/schedules/"+sc.ID, o.Admin.Token, nil).Expect(t, http.StatusNoContent, nil)
	env.Do(t, http.MethodGet, "/schedules/"+sc.ID, o.Admin.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	if env.CountRows(t, "triggers", "id = $1", sc.TriggerID) != 0 || env.CountRows(t, "trigger_events", "trigger_id = $1", sc.TriggerID) != 0 {
		t.Fatal("the schedule's trigger or its events survived")
	}
}

func TestScheduleInvalidInput(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	auto := createAutomation(t, env, o.Admin.Token, nil)
	sc := createSchedule(t, env, o.Admin.Token, auto.ID, map[string]any{"cron_expression": "0 9 * * *", "timezone": "Europe/Paris"})
	create := "/automations/" + auto.ID + "/schedules"
	patch := "/schedules/" + sc.ID
	parseErr := func(expr, tz string) string {
		_, err := schedule.Parse(expr, tz)
		if err == nil {
			t.Fatalf("%q %q parses", expr, tz)
		}
		return err.(*schedule.Error).Problem
	}
	cases := []struct {
		name, method, path string
		body               any
		status             int
		code, field, msg   string
	}{
		{"missing cron", "POST", create, map[string]any{"name": "x"}, 422, httpapi.CodeValidation, "cron_expression", ""},
		{"six fields", "POST", create, map[string]any{"cron_expression": "0 0 9 * * *"}, 422, httpapi.CodeValidation, "cron_expression", parseErr("0 0 9 * * *", "UTC")},
		{"bad minute", "POST", create, map[string]any{"cron_expression": "61 * * * *"}, 422, httpapi.CodeValidation, "cron_expression", parseErr("61 * * * *", "UTC")},
		{"never", "POST", create, map[string]any{"cron_expression": "0 0 30 2 *"}, 422, httpapi.CodeValidation, "cron_expression", parseErr("0 0 30 2 *", "UTC")},
		{"bad timezone", "POST", create, map[string]any{"cron_expression": "@daily", "timezone": "Mars/Olympus"}, 422, httpapi.CodeValidation, "timezone", parseErr("@daily", "Mars/Olympus")},
		{"long cron", "POST", create, map[string]any{"cron_expression": strings.Repeat("*", 201)}, 422, httpapi.CodeValidation, "cron_expression", ""},
		{"long name", "POST", create, map[string]any{"cron_expression": "@daily", "name": strings.Repeat("n", 201)}, 422, httpapi.CodeValidation, "name", ""},
		{"NUL timezone", "POST", create, map[string]any{"cron_expression": "@daily", "timezone": "UTC\x00"}, 422, httpapi.CodeValidation, "timezone", ""},
		{"cron type", "POST", create, map[string]any{"cron_expression": 5}, 422, httpapi.CodeValidation, "cron_expression", ""},
		{"unknown field", "POST", create, map[string]any{"cron_expression": "@daily", "next_run_at": "now"}, 422, httpapi.CodeValidation, "next_run_at", ""},
		{"malformed", "POST", create, `{"cron_expression": "@daily"`, 400, httpapi.CodeBadRequest, "", ""},
		{"other org's automation", "POST", "/automations/00000000-0000-0000-0000-000000000000/schedules", map[string]any{"cron_expression": "@daily"}, 404, httpapi.CodeNotFound, "", ""},
		{"patch nothing", "PATCH", patch, map[string]any{}, 422, httpapi.CodeValidation, "(body)", ""},
		{"patch bad cron", "PATCH", patch, map[string]any{"cron_expression": "every day"}, 422, httpapi.CodeValidation, "cron_expression", parseErr("every day", "UTC")},
		{"patch bad timezone", "PATCH", patch, map[string]any{"timezone": "Europe/Pariss"}, 422, httpapi.CodeValidation, "timezone", parseErr("0 9 * * *", "Europe/Pariss")},
		{"patch enabled type", "PATCH", patch, map[string]any{"enabled": "yes"}, 422, httpapi.CodeValidation, "enabled", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			schedules, triggers := env.CountRows(t, "schedules", "org_id = $1", o.ID), env.CountRows(t, "triggers", "org_id = $1", o.ID)
			body := env.Do(t, tc.method, tc.path, o.Admin.Token, tc.body).ExpectError(t, tc.status, tc.code)
			if tc.field != "" {
				assertField(t, body, tc.field)
			}
			if tc.msg != "" && body.Error.Message != tc.field+": "+tc.msg {
				t.Fatalf("message %q, want the parser's %q", body.Error.Message, tc.msg)
			}
			if env.CountRows(t, "schedules", "org_id = $1", o.ID) != schedules || env.CountRows(t, "triggers", "org_id = $1", o.ID) != triggers {
				t.Fatal("a rejected request wrote")
			}
		})
	}
	var got store.Schedule
	env.Do(t, http.MethodGet, patch, o.Admin.Token, nil).Expect(t, http.StatusOK, &got)
	if got.CronExpression != "0 9 * * *" || got.Timezone != "Europe/Paris" || !got.UpdatedAt.Equal(sc.UpdatedAt) {
		t.Fatalf("rejected patches changed the schedule: %+v", got)
	}
}

func TestScheduleIsolationAndRoles(t *testing.T) {
	env := newEnv(t)
	a, b := env.NewOrg(t), env.NewOrg(t)
	autoA := createAutomation(t, env, a.Admin.Token, nil)
	autoB := createAutomation(t, env, b.Admin.Token, nil)
	sc := createSchedule(t, env, a.Admin.Token, autoA.ID, map[string]any{"cron_expression": "@daily"})
	createSchedule(t, env, b.Admin.Token, autoB.ID, map[string]any{"cron_expression": "@weekly"})

	env.Do(t, http.MethodPost, "/automations/"+autoA.ID+"/schedules", b.Owner.Token, map[string]any{"cron_expression": "@daily"}).
		ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodGet, "/schedules/"+sc.ID, b.Member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodPatch, "/schedules/"+sc.ID, b.Owner.Token, map[string]any{"enabled": false}).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodDelete, "/schedules/"+sc.ID, b.Owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	if env.CountRows(t, "schedules", "id = $1 AND enabled AND automation_id = $2", sc.ID, autoA.ID) != 1 ||
		env.CountRows(t, "schedules", "automation_id = $1", autoA.ID) != 1 {
		t.Fatal("another org changed A's schedules")
	}
	page := getPage[store.Schedule](t, env, "/schedules", b.Member.Token)
	if len(page.Items) != 1 || page.Items[0].CronExpression != "@weekly" {
		t.Fatalf("list leaks %+v", page.Items)
	}
	env.Do(t, http.MethodGet, "/schedules?automation_id=bad", b.Member.Token, nil).ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)

	// Roles: members read only.
	env.Do(t, http.MethodPost, "/automations/"+autoA.ID+"/schedules", a.Member.Token, map[string]any{"cron_expression": "@daily"}).
		ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	env.Do(t, http.MethodPatch, "/schedules/"+sc.ID, a.Member.Token, map[string]any{"enabled": false}).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	env.Do(t, http.MethodDelete, "/schedules/"+sc.ID, a.Member.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	env.Do(t, http.MethodGet, "/schedules/"+sc.ID, a.Member.Token, nil).Expect(t, http.StatusOK, nil)
	for _, u := range []string{a.Admin.Token, a.Owner.Token} {
		s := createSchedule(t, env, u, autoA.ID, map[string]any{"cron_expression": "0 0 1 * *"})
		env.Do(t, http.MethodPatch, "/schedules/"+s.ID, u, map[string]any{"name": "monthly"}).Expect(t, http.StatusOK, nil)
		env.Do(t, http.MethodDelete, "/schedules/"+s.ID, u, nil).Expect(t, http.StatusNoContent, nil)
	}
	if env.CountRows(t, "schedules", "automation_id = $1", autoA.ID) != 1 {
		t.Fatal("schedules left over")
	}
}
