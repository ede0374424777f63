package actions_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/httpapi"
)

func TestInboxFilterPagesTitlesAndTenancy(t *testing.T) {
	e := newEnv(t)
	a, b := newOrg(t, e), newOrg(t, e)
	s1 := session(t, e, a.ID, "Fix the login bug")
	s2 := session(t, e, a.ID, "Triage Sentry issues")
	base := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	statuses := []string{"pending", "completed", "pending", "denied", "failed", "pending", "expired", "completed"}
	var ids []string // oldest first
	for i, st := range statuses {
		sess := s1
		if i%2 == 1 {
			sess = s2
		}
		ids = append(ids, invocation(t, e, a.ID, sess, st, base.Add(time.Duration(i)*time.Minute)))
	}
	other := invocation(t, e, b.ID, session(t, e, b.ID, "Other org"), "pending", base)

	walk := func(query string, limit string) []invocations.Invocation {
		t.Helper()
		var all []invocations.Invocation
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > 10 {
				t.Fatal("pagination does not end")
			}
			var p api.Page[invocations.Invocation]
			e.Do(t, http.MethodGet, "/actions?limit="+limit+query+cursor, a.Member.Token, nil).Expect(t, http.StatusOK, &p)
			all = append(all, p.Items...)
			if p.NextCursor == "" {
				return all
			}
			cursor = "&cursor=" + p.NextCursor
		}
	}
	all := walk("", "3")
	if len(all) != len(ids) {
		t.Fatalf("%d invocations listed, want %d", len(all), len(ids))
	}
	for i, inv := range all {
		want := ids[len(ids)-1-i]
		if inv.ID != want {
			t.Fatalf("item %d is %s, want %s (newest first)", i, inv.ID, want)
		}
		wantTitle := "Fix the login bug"
		if inv.SessionID != s1 {
			wantTitle = "Triage Sentry issues"
		}
		if inv.SessionTitle != wantTitle || inv.OrgID != a.ID || inv.Integration != "linear" || inv.Action != "create_issue" ||
			string(inv.Params) != `{"title":"x"}` {
			t.Fatalf("item %d: %+v", i, inv)
		}
	}
	pending := walk("&status=pending", "2")
	if len(pending) != 3 {
		t.Fatalf("%d pending, want 3", len(pending))
	}
	for _, inv := range pending {
		if inv.Status != invocations.StatusPending || inv.ExpiresAt == nil {
			t.Fatalf("pending filter returned %+v", inv)
		}
	}
	if got := walk("&status=approved", "100"); len(got) != 0 {
		t.Fatalf("approved: %d", len(got))
	}

	// Bad input is 422 naming the field.
	assertField(t, e.Do(t, http.MethodGet, "/actions?status=done", a.Member.Token, nil).ExpectError(t, 422, httpapi.CodeValidation), "status")
	assertField(t, e.Do(t, http.MethodGet, "/actions?limit=101", a.Member.Token, nil).ExpectError(t, 422, httpapi.CodeValidation), "limit")
	assertField(t, e.Do(t, http.MethodGet, "/actions?limit=0", a.Member.Token, nil).ExpectError(t, 422, httpapi.CodeValidation), "limit")
	assertField(t, e.Do(t, http.MethodGet, "/actions?cursor=nope", a.Member.Token, nil).ExpectError(t, 422, httpapi.CodeValidation), "cursor")
	e.Do(t, http.MethodGet, "/actions", "", nil).ExpectError(t, http.StatusUnauthorized, httpapi.CodeUnauthenticated)

	// One invocation, with its title; another org's is 404.
	var got invocations.Invocation
	e.Do(t, http.MethodGet, "/actions/"+ids[0], a.Member.Token, nil).Expect(t, http.StatusOK, &got)
	if got.ID != ids[0] || got.SessionTitle != "Fix the login bug" || got.Status != "pending" || got.Mode != "require_approval" ||
		got.ModeSource != "inferred_default" {
		t.Fatalf("get: %+v", got)
	}
	e.Do(t, http.MethodGet, "/actions/"+other, a.Member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodGet, "/actions/"+ids[0], b.Owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodGet, "/actions/not-a-uuid", a.Member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)

	// The other org's inbox holds only its own invocation.
	var pb api.Page[invocations.Invocation]
	e.Do(t, http.MethodGet, "/actions", b.Owner.Token, nil).Expect(t, http.StatusOK, &pb)
	if len(pb.Items) != 1 || pb.Items[0].ID != other || pb.Items[0].SessionTitle != "Other org" {
		t.Fatalf("org b inbox: %+v", pb.Items)
	}
}

// A pending invocation of a changed connector tool shows, in the inbox and
// on its own, the hashes and the diff an approver needs.
func TestInboxShowsDefinitionDiff(t *testing.T) {
	e := newEnv(t)
	a := newOrg(t, e)
	sid := session(t, e, a.ID, "Docs")
	diff := `{"reviewed_known":true,"changes":[{"path":"params.properties.delete_all","change":"added","new":{"type":"boolean"}}]}`
	id := apitest.Scalar[string](t, e, `INSERT INTO action_invocations (org_id, session_id, integration, action, risk_level, mode,
			mode_source, drifted, params, status, expires_at, definition_hash, reviewed_hash, definition_diff)
		VALUES ($1, $2, 'connector:00000000-0000-0000-0000-000000000001', 'search_docs', 'read', 'require_approval',
			'inferred_default', true, '{}', 'pending', now() + interval '1 hour', 'new-hash', 'old-hash', $3)
		RETURNING id::text`, a.ID, sid, diff)
	check := func(what string, inv invocations.Invocation) {
		t.Helper()
		if inv.ID != id || !inv.Drifted || inv.DefinitionHash == nil || *inv.DefinitionHash != "new-hash" ||
			inv.ReviewedHash == nil || *inv.ReviewedHash != "old-hash" || inv.DefinitionDiff == nil ||
			!inv.DefinitionDiff.ReviewedKnown || len(inv.DefinitionDiff.Changes) != 1 ||
			inv.DefinitionDiff.Changes[0].Path != "params.properties.delete_all" ||
			string(inv.DefinitionDiff.Changes[0].New) != `{"type":"boolean"}` {
			t.Fatalf("%s: %+v %+v", what, inv, inv.DefinitionDiff)
		}
	}
	var p api.Page[invocations.Invocation]
	e.Do(t, http.MethodGet, "/actions?status=pending", a.Member.Token, nil).Expect(t, http.StatusOK, &p)
	if len(p.Items) != 1 {
		t.Fatalf("inbox: %+v", p.Items)
	}
	check("inbox", p.Items[0])
	var got invocations.Invocation
	e.Do(t, http.MethodGet, "/actions/"+id, a.Member.Token, nil).Expect(t, http.StatusOK, &got)
	check("get", got)
}
