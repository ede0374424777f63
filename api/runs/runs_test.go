package runs_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/query"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestRunDetail(t *testing.T) {
	e := newEnv(t)
	o := newOrg(t, e)
	id := run(t, e, o, runs.StatusRunning)
	e.Exec(t, `UPDATE automation_runs SET enrichment_json = '{"version": 1, "summary": {"title": "Issue"}}' WHERE id = $1`, id)
	var res query.CompleteResult
	e.Do(t, http.MethodPost, "/runs/"+id+"/complete", e.Service, map[string]any{"completion_id": "c-1", "outcome": "needs_human",
		"summary_markdown": "I need a decision"}).Expect(t, http.StatusOK, &res)

	var d query.Detail
	e.Do(t, http.MethodGet, "/runs/"+id, o.Member.Token, nil).Expect(t, http.StatusOK, &d)
	if d.ID != id || d.Status != runs.StatusNeedsHuman || d.AutomationID != o.AutomationID || d.AutomationName != "Test automation" ||
		d.DeadlineAt == nil || d.CompletedAt == nil || d.ExecutionStartedAt == nil || d.CompletionID == nil || *d.CompletionID != "c-1" ||
		d.StatusReason == nil || *d.StatusReason != "completed" || d.Resolution != nil || d.AssignedTo != nil {
		t.Fatalf("detail %+v", d)
	}
	// The deadline comes from the automation (default 7200 s after queueing).
	if got := d.DeadlineAt.Sub(d.QueuedAt); got < 7199*time.Second || got > 7201*time.Second {
		t.Fatalf("deadline %v after queueing", got)
	}
	te := d.TriggerEvent
	if te.ID != d.TriggerEventID || !strings.HasPrefix(te.Title, "Issue ") || te.Provider != "github" || te.URL == nil ||
		!strings.HasPrefix(*te.URL, "https://github.com/acme/app/issues/") || te.EventType != "issue_opened" || d.Title != te.Title {
		t.Fatalf("trigger event %+v", te)
	}
	if !strings.Contains(string(d.EnrichmentJSON), `"version":1`) || !strings.Contains(string(d.CompletionJSON), `"I need a decision"`) {
		t.Fatalf("enrichment %s completion %s", d.EnrichmentJSON, d.CompletionJSON)
	}
	var trail []string
	for i, ev := range d.Events {
		if i > 0 && ev.ID <= d.Events[i-1].ID {
			t.Fatal("events are not oldest first")
		}
		to := ""
		if ev.ToStatus != nil {
			to = *ev.ToStatus
		}
		trail = append(trail, ev.Type+":"+to)
	}
	want := []string{"status_transition:queued", "status_transition:enriching", "status_transition:ready", "status_transition:running",
		"completion:", "status_transition:needs_human"}
	if !slices.Equal(trail, want) {
		t.Fatalf("event log %v, want %v", trail, want)
	}
	// Unknown and malformed ids name nothing.
	e.Do(t, http.MethodGet, "/runs/00000000-0000-0000-0000-000000000000", o.Member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodGet, "/runs/nope", o.Member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
}

func TestListStatusFilterAndPagination(t *testing.T) {
	e := newEnv(t)
	o := newOrg(t, e)
	ids := enqueue(t, e, o, 130)
	failed := map[string]bool{}
	for i, id := range ids {
		if i%2 == 0 {
			move(t, e, id, runs.StatusEnriching)
		}
		if i%3 == 0 {
			e.Exec(t, `UPDATE automation_runs SET status = 'failed', completed_at = now() WHERE id = $1`, id)
			failed[id] = true
		}
	}
	walk := func(query string) []string {
		t.Helper()
		var got []string
		seen := map[string]bool{}
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > 10 {
				t.Fatal("pagination does not end")
			}
			p := getPage(t, e, "/automations/"+o.AutomationID+"/runs?limit=40"+query+cursor, o.Member.Token)
			for _, r := range p.Items {
				if seen[r.ID] {
					t.Fatalf("run %s listed twice", r.ID)
				}
				seen[r.ID] = true
				got = append(got, r.Status)
				if r.AutomationName != "Test automation" || r.AutomationID != o.AutomationID {
					t.Fatalf("summary %+v", r)
				}
			}
			if p.NextCursor == "" {
				return got
			}
			cursor = "&cursor=" + p.NextCursor
		}
	}
	if all := walk(""); len(all) != 130 {
		t.Fatalf("%d runs listed, want 130", len(all))
	}
	onlyFailed := walk("&status=failed")
	if len(onlyFailed) != len(failed) || slices.ContainsFunc(onlyFailed, func(s string) bool { return s != "failed" }) {
		t.Fatalf("failed filter: %d runs %v", len(onlyFailed), onlyFailed)
	}
	two := walk("&status=failed,enriching")
	three := walk("&status=failed&status=queued&status=enriching")
	if len(two)+130-len(failed)-countOf(two, "enriching") != 130 || len(three) != 130 {
		t.Fatalf("multi-status filters: %d, %d", len(two), len(three))
	}
	// Newest first.
	p := getPage(t, e, "/automations/"+o.AutomationID+"/runs?limit=1", o.Member.Token)
	if p.Items[0].ID != ids[len(ids)-1] {
		t.Fatalf("first item %s, want the newest run %s", p.Items[0].ID, ids[len(ids)-1])
	}

	for _, q := range []struct{ query, field string }{
		{"status=bogus", "status"}, {"status=failed,", "status"}, {"limit=0", "limit"}, {"limit=101", "limit"}, {"cursor=abc", "cursor"},
	} {
		body := e.Do(t, http.MethodGet, "/automations/"+o.AutomationID+"/runs?"+q.query, o.Member.Token, nil).
			ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
		assertField(t, body, q.field)
	}
	e.Do(t, http.MethodGet, "/automations/00000000-0000-0000-0000-000000000000/runs", o.Member.Token, nil).
		ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
}

func countOf(xs []string, v string) int {
	n := 0
	for _, x := range xs {
		if x == v {
			n++
		}
	}
	return n
}

func TestAttention(t *testing.T) {
	e := newEnv(t)
	o := newOrg(t, e)
	other := newOrg(t, e)
	failed := run(t, e, o, runs.StatusFailed)
	human := run(t, e, o, runs.StatusNeedsHuman)
	timedOut := run(t, e, o, runs.StatusTimedOut)
	run(t, e, o, runs.StatusSucceeded)
	run(t, e, o, runs.StatusRunning)
	old := run(t, e, o, runs.StatusFailed)
	e.Exec(t, `UPDATE automation_runs SET completed_at = now() - interval '10 days' WHERE id = $1`, old)
	resolved := run(t, e, o, runs.StatusNeedsHuman)
	e.Do(t, http.MethodPost, "/runs/"+resolved+"/resolve", o.Member.Token, map[string]any{"outcome": "failed"}).Expect(t, http.StatusOK, nil)
	run(t, e, other, runs.StatusFailed)

	var got runsapiAttention
	e.Do(t, http.MethodGet, "/runs/attention", o.Member.Token, nil).Expect(t, http.StatusOK, &got)
	if ids := got.ids(); !slices.Equal(ids, []string{timedOut, human, failed}) {
		t.Fatalf("attention %v, want %v (most recently ended first)", ids, []string{timedOut, human, failed})
	}
	if got.Items[0].AutomationName != "Test automation" || got.Items[0].Status != runs.StatusTimedOut {
		t.Fatalf("item %+v", got.Items[0])
	}
	e.Do(t, http.MethodGet, "/runs/attention?max_age_days=30&limit=2", o.Member.Token, nil).Expect(t, http.StatusOK, &got)
	if ids := got.ids(); !slices.Equal(ids, []string{timedOut, human}) {
		t.Fatalf("limited attention %v", ids)
	}
	e.Do(t, http.MethodGet, "/runs/attention?max_age_days=30", o.Member.Token, nil).Expect(t, http.StatusOK, &got)
	if ids := got.ids(); len(ids) != 4 || ids[3] != old {
		t.Fatalf("30-day attention %v", ids)
	}
	for _, q := range []struct{ query, field string }{
		{"max_age_days=0", "max_age_days"}, {"max_age_days=31", "max_age_days"}, {"max_age_days=x", "max_age_days"},
		{"limit=0", "limit"}, {"limit=51", "limit"},
	} {
		assertField(t, e.Do(t, http.MethodGet, "/runs/attention?"+q.query, o.Member.Token, nil).
			ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation), q.field)
	}
	e.Do(t, http.MethodGet, "/runs/attention", other.Member.Token, nil).Expect(t, http.StatusOK, &got)
	if len(got.Items) != 1 || got.Items[0].AutomationID != other.AutomationID {
		t.Fatalf("another org's attention list %v", got.ids())
	}
}

type runsapiAttention struct {
	Items []query.Summary `json:"items"`
}

func (a runsapiAttention) ids() []string {
	out := []string{}
	for _, s := range a.Items {
		out = append(out, s.ID)
	}
	return out
}

func TestAssign(t *testing.T) {
	e := newEnv(t)
	o := newOrg(t, e)
	id := run(t, e, o, runs.StatusNeedsHuman)
	p := "/runs/" + id + "/assign"

	var s query.Summary
	e.Do(t, http.MethodPost, p, o.Member.Token, nil).Expect(t, http.StatusOK, &s)
	if s.AssignedTo == nil || *s.AssignedTo != o.Member.ID || s.AssignedAt == nil {
		t.Fatalf("assigned %+v", s)
	}
	e.Do(t, http.MethodPost, p, o.Member.Token, nil).Expect(t, http.StatusOK, &s) // idempotent
	if n := e.CountRows(t, "automation_run_events", "run_id = $1 AND type = 'assigned' AND data->>'user_id' = $2", id, o.Member.ID); n != 1 {
		t.Fatalf("%d assigned rows", n)
	}
	before := snapshot(t, e, id)
	body := e.Do(t, http.MethodPost, p, o.Admin.Token, nil).ExpectError(t, http.StatusConflict, "run_claimed")
	if d, _ := body.Error.Details.(map[string]any); d["claimed_by"] != o.Member.ID {
		t.Fatalf("conflict does not name the claimant: %+v", body.Error)
	}
	e.Do(t, http.MethodDelete, p, o.Member2.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	if after := snapshot(t, e, id); after != before {
		t.Fatalf("a refused claim changed the run: %s → %s", before, after)
	}

	mine := getPage(t, e, "/runs/claimed", o.Member.Token)
	if len(mine.Items) != 1 || mine.Items[0].ID != id {
		t.Fatalf("claimed %+v", mine.Items)
	}
	if theirs := getPage(t, e, "/runs/claimed", o.Admin.Token); len(theirs.Items) != 0 {
		t.Fatalf("admin's claimed %+v", theirs.Items)
	}

	// An admin may take a claim away; the claimant may drop it.
	e.Do(t, http.MethodDelete, p, o.Admin.Token, nil).Expect(t, http.StatusOK, &s)
	if s.AssignedTo != nil || s.AssignedAt != nil {
		t.Fatalf("unassigned %+v", s)
	}
	if n := e.CountRows(t, "automation_run_events", "run_id = $1 AND type = 'unassigned' AND data->>'claimant' = $2 AND data->>'user_id' = $3",
		id, o.Member.ID, o.Admin.ID); n != 1 {
		t.Fatalf("%d unassigned rows", n)
	}
	e.Do(t, http.MethodDelete, p, o.Member2.Token, nil).Expect(t, http.StatusOK, nil) // unclaimed: no-op
	e.Do(t, http.MethodPost, p, o.Member2.Token, nil).Expect(t, http.StatusOK, nil)
	e.Do(t, http.MethodDelete, p, o.Member2.Token, nil).Expect(t, http.StatusOK, &s)
	if s.AssignedTo != nil {
		t.Fatalf("claimant could not unclaim: %+v", s)
	}
	if n := e.CountRows(t, "automation_run_events", "run_id = $1 AND type IN ('assigned', 'unassigned')", id); n != 4 {
		t.Fatalf("%d claim log rows, want 4", n)
	}
	// Claimed runs paginate.
	ids := enqueue(t, e, o, 5)
	for _, r := range ids {
		e.Do(t, http.MethodPost, "/runs/"+r+"/assign", o.Owner.Token, nil).Expect(t, http.StatusOK, nil)
	}
	p1 := getPage(t, e, "/runs/claimed?limit=3", o.Owner.Token)
	p2 := getPage(t, e, "/runs/claimed?limit=3&cursor="+p1.NextCursor, o.Owner.Token)
	if len(p1.Items) != 3 || len(p2.Items) != 2 || p2.NextCursor != "" || p1.Items[0].ID != ids[4] {
		t.Fatalf("claimed pages %d + %d", len(p1.Items), len(p2.Items))
	}
}

func TestResolve(t *testing.T) {
	e := newEnv(t)
	o := newOrg(t, e)
	for _, from := range query.Resolvable {
		for _, outcome := range query.Outcomes {
			t.Run(from+"→"+outcome, func(t *testing.T) {
				id := run(t, e, o, from)
				outboxBefore := e.CountRows(t, "outbox", "topic = $1 AND key = $2", topics.RunsLifecycle, id)
				var s query.Summary
				e.Do(t, http.MethodPost, "/runs/"+id+"/resolve", o.Member.Token, map[string]any{"outcome": outcome, "note": " checked by hand "}).
					Expect(t, http.StatusOK, &s)
				if s.Status != outcome || s.ResolvedAt == nil || s.StatusReason == nil || *s.StatusReason != "manual_resolution" {
					t.Fatalf("resolved %+v", s)
				}
				var d query.Detail
				e.Do(t, http.MethodGet, "/runs/"+id, o.Member.Token, nil).Expect(t, http.StatusOK, &d)
				if d.Resolution == nil || d.Resolution.ResolvedBy == nil || *d.Resolution.ResolvedBy != o.Member.ID ||
					d.Resolution.Note == nil || *d.Resolution.Note != "checked by hand" {
					t.Fatalf("resolution %+v", d.Resolution)
				}
				last := d.Events[len(d.Events)-1]
				if last.Type != "status_transition" || *last.FromStatus != from || *last.ToStatus != outcome ||
					last.Data["reason"] != "manual_resolution" || last.Data["resolved_by"] != o.Member.ID {
					t.Fatalf("log row %+v", last)
				}
				if n := e.CountRows(t, "outbox", "topic = $1 AND key = $2", topics.RunsLifecycle, id); n != outboxBefore+1 {
					t.Fatalf("%d runs.lifecycle rows added, want 1", n-outboxBefore)
				}
				var value []byte
				if err := e.Deps.Pool.QueryRow(context.Background(), `SELECT value FROM outbox WHERE topic = $1 AND key = $2
					ORDER BY id DESC LIMIT 1`, topics.RunsLifecycle, id).Scan(&value); err != nil {
					t.Fatal(err)
				}
				dec, err := codec.Decode(value)
				if err != nil {
					t.Fatal(err)
				}
				life, ok := dec.Payload.(*schemas.RunLifecycle)
				if !ok || life.RunID != id || life.ToStatus != outcome || life.FromStatus == nil || *life.FromStatus != from ||
					life.StatusReason == nil || *life.StatusReason != "manual_resolution" || dec.OrgID != o.ID {
					t.Fatalf("lifecycle %+v", dec.Payload)
				}
				wantEvent := "completed"
				if outcome == runs.StatusFailed {
					wantEvent = "failed"
				}
				if got := apitest.Scalar[string](t, e.Env, `SELECT status FROM trigger_events WHERE id = $1`, d.TriggerEventID); got != wantEvent {
					t.Fatalf("trigger event %s, want %s", got, wantEvent)
				}
				// Once.
				before := snapshot(t, e, id)
				e.Do(t, http.MethodPost, "/runs/"+id+"/resolve", o.Admin.Token, map[string]any{"outcome": "succeeded"}).
					ExpectError(t, http.StatusConflict, "run_already_resolved")
				if after := snapshot(t, e, id); after != before {
					t.Fatal("a second resolution changed the run")
				}
			})
		}
	}

	t.Run("live and succeeded runs are refused", func(t *testing.T) {
		for _, status := range []string{runs.StatusQueued, runs.StatusEnriching, runs.StatusReady, runs.StatusRunning, runs.StatusSucceeded} {
			id := run(t, e, o, status)
			before := snapshot(t, e, id)
			e.Do(t, http.MethodPost, "/runs/"+id+"/resolve", o.Owner.Token, map[string]any{"outcome": "failed"}).
				ExpectError(t, http.StatusConflict, "invalid_transition")
			if after := snapshot(t, e, id); after != before {
				t.Fatalf("a refused resolution of a %s run changed it: %s → %s", status, before, after)
			}
		}
	})

	t.Run("a claim by another member needs an admin", func(t *testing.T) {
		id := run(t, e, o, runs.StatusFailed)
		e.Do(t, http.MethodPost, "/runs/"+id+"/assign", o.Member.Token, nil).Expect(t, http.StatusOK, nil)
		before := snapshot(t, e, id)
		e.Do(t, http.MethodPost, "/runs/"+id+"/resolve", o.Member2.Token, map[string]any{"outcome": "succeeded"}).
			ExpectError(t, http.StatusConflict, "run_claimed")
		if after := snapshot(t, e, id); after != before {
			t.Fatal("a refused resolution changed the run")
		}
		e.Do(t, http.MethodPost, "/runs/"+id+"/resolve", o.Admin.Token, map[string]any{"outcome": "succeeded"}).Expect(t, http.StatusOK, nil)
		other := run(t, e, o, runs.StatusFailed)
		e.Do(t, http.MethodPost, "/runs/"+other+"/assign", o.Member.Token, nil).Expect(t, http.StatusOK, nil)
		e.Do(t, http.MethodPost, "/runs/"+other+"/resolve", o.Member.Token, map[string]any{"outcome": "failed"}).Expect(t, http.StatusOK, nil)
	})

	t.Run("invalid input", func(t *testing.T) {
		id := run(t, e, o, runs.StatusNeedsHuman)
		cases := []struct {
			name   string
			body   any
			status int
			code   string
			field  string
		}{
			{"missing outcome", map[string]any{}, 422, httpapi.CodeValidation, "outcome"},
			{"needs_human outcome", map[string]any{"outcome": "needs_human"}, 422, httpapi.CodeValidation, "outcome"},
			{"outcome type", map[string]any{"outcome": 1}, 422, httpapi.CodeValidation, "outcome"},
			{"long note", map[string]any{"outcome": "failed", "note": strings.Repeat("n", 4001)}, 422, httpapi.CodeValidation, "note"},
			{"NUL note", map[string]any{"outcome": "failed", "note": "a\x00"}, 422, httpapi.CodeValidation, "note"},
			{"unknown field", map[string]any{"outcome": "failed", "status": "succeeded"}, 422, httpapi.CodeValidation, "status"},
			{"malformed", `{"outcome":`, 400, httpapi.CodeBadRequest, ""},
			{"empty", "", 400, httpapi.CodeBadRequest, ""},
		}
		for _, tc := range cases {
			before := snapshot(t, e, id)
			body := e.Do(t, http.MethodPost, "/runs/"+id+"/resolve", o.Member.Token, tc.body).ExpectError(t, tc.status, tc.code)
			if tc.field != "" {
				assertField(t, body, tc.field)
			}
			if after := snapshot(t, e, id); after != before {
				t.Fatalf("%s: a rejected resolution wrote", tc.name)
			}
		}
	})
}

func TestComplete(t *testing.T) {
	e := newEnv(t)
	o := newOrg(t, e)
	id := run(t, e, o, runs.StatusRunning)
	p := "/runs/" + id + "/complete"
	body := map[string]any{"run_id": id, "completion_id": "done-1", "outcome": "succeeded", "summary_markdown": "Fixed it",
		"citations": []string{"https://example.com/pr/1"}}
	outboxBefore := e.CountRows(t, "outbox", "topic = $1 AND key = $2", topics.RunsLifecycle, id)

	var res query.CompleteResult
	e.Do(t, http.MethodPost, p, e.Service, body).Expect(t, http.StatusOK, &res)
	if res.RunID != id || res.Status != runs.StatusSucceeded || res.CompletionID != "done-1" || res.Replayed {
		t.Fatalf("completion %+v", res)
	}
	e.Do(t, http.MethodPost, p, e.Service, body).Expect(t, http.StatusOK, &res)
	if res.Status != runs.StatusSucceeded || !res.Replayed || res.CompletionID != "done-1" {
		t.Fatalf("replay %+v", res)
	}
	if n := e.CountRows(t, "outbox", "topic = $1 AND key = $2", topics.RunsLifecycle, id); n != outboxBefore+1 {
		t.Fatalf("%d lifecycle events for one completion and its replay", n-outboxBefore)
	}
	if n := e.CountRows(t, "automation_run_events", "run_id = $1 AND type = 'completion'", id); n != 1 {
		t.Fatalf("%d completion rows", n)
	}
	before := snapshot(t, e, id)
	e.Do(t, http.MethodPost, p, e.Service, map[string]any{"completion_id": "done-2", "outcome": "failed"}).
		ExpectError(t, http.StatusConflict, "run_already_completed")
	if after := snapshot(t, e, id); after != before {
		t.Fatal("a conflicting completion changed the run")
	}

	queued := run(t, e, o, runs.StatusQueued)
	e.Do(t, http.MethodPost, "/runs/"+queued+"/complete", e.Service, map[string]any{"completion_id": "x", "outcome": "succeeded"}).
		ExpectError(t, http.StatusConflict, "run_not_running")
	timedOut := run(t, e, o, runs.StatusTimedOut)
	e.Do(t, http.MethodPost, "/runs/"+timedOut+"/complete", e.Service, map[string]any{"completion_id": "x", "outcome": "succeeded"}).
		ExpectError(t, http.StatusConflict, "run_already_completed")
	e.Do(t, http.MethodPost, "/runs/00000000-0000-0000-0000-000000000000/complete", e.Service, map[string]any{"completion_id": "x", "outcome": "succeeded"}).
		ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)

	running := run(t, e, o, runs.StatusRunning)
	rp := "/runs/" + running + "/complete"
	for _, tc := range []struct {
		name  string
		body  any
		field string
	}{
		{"other run id", map[string]any{"run_id": id, "completion_id": "x", "outcome": "succeeded"}, "run_id"},
		{"missing completion id", map[string]any{"outcome": "succeeded"}, "completion_id"},
		{"bad outcome", map[string]any{"completion_id": "x", "outcome": "canceled"}, "outcome"},
		{"long completion id", map[string]any{"completion_id": strings.Repeat("c", 201), "outcome": "failed"}, "completion_id"},
		{"too many citations", map[string]any{"completion_id": "x", "outcome": "failed", "citations": make([]string, 51)}, "citations"},
		{"unknown field", map[string]any{"completion_id": "x", "outcome": "failed", "status": "x"}, "status"},
	} {
		before := snapshot(t, e, running)
		assertField(t, e.Do(t, http.MethodPost, rp, e.Service, tc.body).ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation), tc.field)
		if after := snapshot(t, e, running); after != before {
			t.Fatalf("%s: a rejected completion wrote", tc.name)
		}
	}

	// People and sandboxes never call it.
	before = snapshot(t, e, running)
	ok := map[string]any{"completion_id": "y", "outcome": "succeeded"}
	for _, tok := range []string{o.Owner.Token, o.Admin.Token, o.Member.Token, e.Sandbox} {
		e.Do(t, http.MethodPost, rp, tok, ok).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	}
	e.Do(t, http.MethodPost, rp, "", ok).ExpectError(t, http.StatusUnauthorized, httpapi.CodeUnauthenticated)
	if after := snapshot(t, e, running); after != before {
		t.Fatal("a refused caller completed the run")
	}
}

func TestIsolation(t *testing.T) {
	e := newEnv(t)
	a, b := newOrg(t, e), newOrg(t, e)
	id := run(t, e, a, runs.StatusNeedsHuman)
	before := snapshot(t, e, id)
	for _, tok := range []string{b.Owner.Token, b.Member.Token} {
		e.Do(t, http.MethodGet, "/runs/"+id, tok, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
		e.Do(t, http.MethodPost, "/runs/"+id+"/assign", tok, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
		e.Do(t, http.MethodDelete, "/runs/"+id+"/assign", tok, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
		e.Do(t, http.MethodPost, "/runs/"+id+"/resolve", tok, map[string]any{"outcome": "succeeded"}).
			ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
		e.Do(t, http.MethodGet, "/automations/"+a.AutomationID+"/runs", tok, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	}
	if after := snapshot(t, e, id); after != before {
		t.Fatalf("another org changed the run: %s → %s", before, after)
	}
	e.Do(t, http.MethodPost, "/runs/"+id+"/assign", a.Member.Token, nil).Expect(t, http.StatusOK, nil)
	for _, path := range []string{"/runs/claimed", "/runs/attention"} {
		var p api.Page[query.Summary]
		e.Do(t, http.MethodGet, path, b.Owner.Token, nil).Expect(t, http.StatusOK, &p)
		if len(p.Items) != 0 {
			t.Fatalf("%s leaks: %+v", path, p.Items)
		}
	}
	// A member of both orgs sees each org's runs only while it is active.
	e.AddMember(t, b.Member, a.ID, "member")
	e.Do(t, http.MethodGet, "/runs/"+id, b.Member.Token, nil).Expect(t, http.StatusOK, nil)
}

func TestSandboxAndServiceTokensRefusedOnPersonRoutes(t *testing.T) {
	e := newEnv(t)
	o := newOrg(t, e)
	id := run(t, e, o, runs.StatusFailed)
	routes := []struct{ method, path string }{
		{http.MethodGet, "/automations/" + o.AutomationID + "/runs"}, {http.MethodGet, "/runs/attention"},
		{http.MethodGet, "/runs/claimed"}, {http.MethodGet, "/runs/" + id}, {http.MethodPost, "/runs/" + id + "/assign"},
		{http.MethodDelete, "/runs/" + id + "/assign"}, {http.MethodPost, "/runs/" + id + "/resolve"},
	}
	before := snapshot(t, e, id)
	for _, r := range routes {
		var body any
		if r.method == http.MethodPost {
			body = map[string]any{"outcome": "succeeded"}
		}
		for _, tok := range []string{e.Sandbox, e.Service} {
			e.Do(t, r.method, r.path, tok, body).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
		}
		e.Do(t, r.method, r.path, "", body).ExpectError(t, http.StatusUnauthorized, httpapi.CodeUnauthenticated)
	}
	if after := snapshot(t, e, id); after != before {
		t.Fatal("a refused caller changed the run")
	}
}

func TestRunNowShowsUpInTheRunsAPI(t *testing.T) {
	e := newEnv(t)
	o := newOrg(t, e)
	var manual struct {
		RunID  string `json:"run_id"`
		Status string `json:"status"`
	}
	e.Do(t, http.MethodPost, "/automations/"+o.AutomationID+"/run", o.Member.Token, nil).Expect(t, http.StatusCreated, &manual)
	if manual.RunID == "" || manual.Status != runs.StatusQueued {
		t.Fatalf("run now %+v", manual)
	}
	p := getPage(t, e, "/automations/"+o.AutomationID+"/runs?status=queued", o.Member.Token)
	if len(p.Items) != 1 || p.Items[0].ID != manual.RunID || p.Items[0].Provider != "manual" || p.Items[0].DeadlineAt == nil {
		t.Fatalf("runs %+v", p.Items)
	}
	var d query.Detail
	e.Do(t, http.MethodGet, "/runs/"+manual.RunID, o.Member.Token, nil).Expect(t, http.StatusOK, &d)
	if d.TriggeredBy == nil || *d.TriggeredBy != o.Member.ID || d.DeadlineAt == nil || len(d.Events) != 1 {
		t.Fatalf("detail %+v", d)
	}
}
