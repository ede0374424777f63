package runs_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	runsapi "github.com/proliferate/proliferate/api/runs"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/runs"
)

func feed(t *testing.T, e *env, query, token string) api.Page[runsapi.FeedItem] {
	t.Helper()
	var p api.Page[runsapi.FeedItem]
	e.Do(t, http.MethodGet, "/runs"+query, token, nil).Expect(t, http.StatusOK, &p)
	return p
}

func feedIDs(p api.Page[runsapi.FeedItem]) []string {
	ids := make([]string, len(p.Items))
	for i, r := range p.Items {
		ids[i] = r.ID
	}
	return ids
}

// The org-wide feed: every automation's runs newest first, in pages;
// filters on status, automation, origin, assignment and attention; each
// run with its session (display status derived); other organizations'
// runs never; bad filters are 422 naming the parameter.
func TestRunFeed(t *testing.T) {
	e := newEnv(t)
	o := newOrg(t, e)
	other := newOrg(t, e)
	run(t, e, other, runs.StatusFailed)

	ok := run(t, e, o, runs.StatusSucceeded)
	failed := run(t, e, o, runs.StatusFailed)
	human := run(t, e, o, runs.StatusNeedsHuman)
	queued := run(t, e, o, runs.StatusQueued)
	sess := apitest.Scalar[string](t, e.Env, `INSERT INTO sessions (org_id, title, status, pause_reason, latest_task, pr_urls)
		VALUES ($1, 'Fix the disk', 'paused', 'credit_limit', 'Deleting core dumps', '{https://github.com/acme/app/pull/7}') RETURNING id::text`, o.ID)
	e.Exec(t, `UPDATE automation_runs SET session_id = $1 WHERE id = $2`, sess, human)

	all := feed(t, e, "", o.Member.Token)
	if want := []string{queued, human, failed, ok}; !slices.Equal(feedIDs(all), want) {
		t.Fatalf("feed %v, want %v", feedIDs(all), want)
	}
	for _, r := range all.Items {
		if r.AutomationName != "Test automation" || r.Provider != "github" {
			t.Fatalf("run %+v", r.Summary)
		}
		if (r.Session != nil) != (r.ID == human) {
			t.Fatalf("run %s session %+v", r.ID, r.Session)
		}
	}
	s := all.Items[1].Session
	if s.ID != sess || s.Title != "Fix the disk" || s.Status != "paused" || s.DisplayStatus != "blocked" ||
		s.LatestTask == nil || *s.LatestTask != "Deleting core dumps" || !slices.Equal(s.PRURLs, []string{"https://github.com/acme/app/pull/7"}) {
		t.Fatalf("session %+v", s)
	}

	// Pages.
	p1 := feed(t, e, "?limit=3", o.Member.Token)
	if len(p1.Items) != 3 || p1.NextCursor == "" {
		t.Fatalf("first page %v next %q", feedIDs(p1), p1.NextCursor)
	}
	if p2 := feed(t, e, "?limit=3&cursor="+p1.NextCursor, o.Member.Token); !slices.Equal(feedIDs(p2), []string{ok}) || p2.NextCursor != "" {
		t.Fatalf("second page %v next %q", feedIDs(p2), p2.NextCursor)
	}

	// Filters.
	if got := feedIDs(feed(t, e, "?status=failed,needs_human", o.Member.Token)); !slices.Equal(got, []string{human, failed}) {
		t.Fatalf("status filter %v", got)
	}
	if got := feedIDs(feed(t, e, "?attention=true", o.Member.Token)); !slices.Equal(got, []string{human, failed}) {
		t.Fatalf("attention %v", got)
	}
	if got := feedIDs(feed(t, e, "?provider=custom", o.Member.Token)); len(got) != 0 {
		t.Fatalf("provider custom %v", got)
	}
	if got := feedIDs(feed(t, e, "?provider=github&automation_id="+o.AutomationID, o.Member.Token)); len(got) != 4 {
		t.Fatalf("provider github %v", got)
	}
	if got := feedIDs(feed(t, e, "?automation_id="+other.AutomationID, o.Member.Token)); len(got) != 0 {
		t.Fatalf("another org's automation %v", got)
	}
	e.Do(t, http.MethodPost, "/runs/"+failed+"/assign", o.Member.Token, nil).Expect(t, http.StatusOK, nil)
	if got := feedIDs(feed(t, e, "?assigned=me", o.Member.Token)); !slices.Equal(got, []string{failed}) {
		t.Fatalf("mine %v", got)
	}
	if got := feedIDs(feed(t, e, "?assigned=me", o.Member2.Token)); len(got) != 0 {
		t.Fatalf("another member's %v", got)
	}
	if got := feedIDs(feed(t, e, "?assigned="+o.Member.ID, o.Admin.Token)); !slices.Equal(got, []string{failed}) {
		t.Fatalf("assigned to a member %v", got)
	}
	if got := feedIDs(feed(t, e, "?attention=true&assigned=unassigned", o.Member.Token)); !slices.Equal(got, []string{human}) {
		t.Fatalf("unassigned attention %v", got)
	}
	// Resolved runs leave the attention feed.
	e.Do(t, http.MethodPost, "/runs/"+human+"/resolve", o.Member.Token, map[string]any{"outcome": "succeeded"}).Expect(t, http.StatusOK, nil)
	if got := feedIDs(feed(t, e, "?attention=true", o.Member.Token)); !slices.Equal(got, []string{failed}) {
		t.Fatalf("attention after resolving %v", got)
	}

	for q, field := range map[string]string{
		"?status=bogus":          "status",
		"?provider=Not%20A%20Id": "provider",
		"?automation_id=nope":    "automation_id",
		"?assigned=someone":      "assigned",
		"?attention=yes":         "attention",
		"?limit=0":               "limit",
	} {
		body := e.Do(t, http.MethodGet, "/runs"+q, o.Member.Token, nil).ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
		assertField(t, body, field)
	}
	e.Do(t, http.MethodGet, "/runs", "", nil).ExpectError(t, http.StatusUnauthorized, httpapi.CodeUnauthenticated)
}
