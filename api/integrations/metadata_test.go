package integrations_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/integrations/fakes"
)

func linearData() fakes.LinearData {
	return fakes.LinearData{
		Teams: []map[string]any{{"id": "team-eng", "name": "Engineering", "key": "ENG"}, {"id": "team-ops", "name": "Ops", "key": "OPS"}},
		States: []map[string]any{
			{"id": "st-1", "name": "Todo", "type": "unstarted", "color": "#aaa", "team_id": "team-eng"},
			{"id": "st-2", "name": "Done", "type": "completed", "color": "#0f0", "team_id": "team-eng"},
			{"id": "st-3", "name": "Triage", "type": "triage", "color": "#f00", "team_id": "team-ops"},
		},
		Labels: []map[string]any{
			{"id": "lb-1", "name": "bug", "color": "#f00", "team_id": "team-eng"},
			{"id": "lb-2", "name": "infra", "color": "#00f", "team_id": "team-ops"},
		},
		Users:    []map[string]any{{"id": "u-1", "name": "Ada", "displayName": "ada", "email": "ada@example.com", "active": true}},
		Projects: []map[string]any{{"id": "p-1", "name": "Launch", "state": "started"}},
	}
}

func TestSentryMetadata(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	e.sentry.PageSize = 2
	e.sentry.AddOrg("acme",
		fakes.SentryProject{Slug: "web", Name: "Web", Platform: "javascript", Environments: []string{"production", "staging"}},
		fakes.SentryProject{Slug: "api", Name: "API", Platform: "go", Environments: []string{"production"}},
		fakes.SentryProject{Slug: "worker", Name: "Worker", Platform: "python"},
	)
	it := e.nangoIntegration(t, tm.admin, "sentry", sentryToken)

	var md integrations.SentryMetadata
	e.Do(t, http.MethodGet, "/integrations/"+it.ID+"/sentry/metadata", tm.member.Token, nil).Expect(t, http.StatusOK, &md)
	if md.Organization != "acme" || len(md.Projects) != 3 || md.Projects[2].Slug != "worker" || md.Project != "web" ||
		len(md.Environments) != 2 || md.Environments[0].Name != "production" || len(md.Levels) != 5 {
		t.Fatalf("%+v", md)
	}
	e.Do(t, http.MethodGet, "/integrations/"+it.ID+"/sentry/metadata?organization=acme&project=api", tm.member.Token, nil).Expect(t, http.StatusOK, &md)
	if md.Project != "api" || len(md.Environments) != 1 {
		t.Fatalf("%+v", md)
	}
	expectFields(t, e.Do(t, http.MethodGet, "/integrations/"+it.ID+"/sentry/metadata?project=nope", tm.member.Token, nil), "project")
	expectFields(t, e.Do(t, http.MethodGet, "/integrations/"+it.ID+"/sentry/metadata?organization=globex", tm.member.Token, nil), "organization")
	expectFields(t, e.Do(t, http.MethodGet, "/integrations/"+it.ID+"/sentry/metadata?project="+strings.Repeat("p", 101), tm.member.Token, nil), "project")

	// Sentry failing: 502 naming Sentry, no token in the answer or logs.
	for _, status := range []int{http.StatusInternalServerError, http.StatusUnauthorized, http.StatusForbidden} {
		e.sentry.Fail(status)
		r := e.Do(t, http.MethodGet, "/integrations/"+it.ID+"/sentry/metadata", tm.member.Token, nil)
		body := r.ExpectError(t, http.StatusBadGateway, httpapi.CodeUnavailable)
		if !strings.HasPrefix(body.Error.Message, "sentry ") {
			t.Fatalf("%d: %s", status, r.Body)
		}
		noLeak(t, "response", string(r.Body), sentryToken, nangoSecret)
	}
	e.sentry.Fail(0)
	e.sentry.SetToken("another")
	r := e.Do(t, http.MethodGet, "/integrations/"+it.ID+"/sentry/metadata", tm.member.Token, nil)
	if body := r.ExpectError(t, http.StatusBadGateway, httpapi.CodeUnavailable); body.Error.Message != "sentry rejected the credentials" {
		t.Fatalf("%s", r.Body)
	}
	e.sentry.SetToken(sentryToken)

	// Not a Sentry integration: 404.
	gh := e.githubIntegration(t, tm.admin, "")
	e.Do(t, http.MethodGet, "/integrations/"+gh.ID+"/sentry/metadata", tm.member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	noLeak(t, "logs", e.Logs.String(), sentryToken, nangoSecret)
}

func TestLinearMetadata(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	it := e.nangoIntegration(t, tm.admin, "linear", linearToken)

	var md integrations.LinearMetadata
	e.Do(t, http.MethodGet, "/integrations/"+it.ID+"/linear/metadata", tm.member.Token, nil).Expect(t, http.StatusOK, &md)
	if len(md.Teams) != 2 || len(md.States) != 3 || md.States[0].TeamID != "team-eng" || len(md.Labels) != 2 ||
		len(md.Users) != 1 || md.Users[0].DisplayName != "ada" || len(md.Projects) != 1 {
		t.Fatalf("%+v", md)
	}
	e.Do(t, http.MethodGet, "/integrations/"+it.ID+"/linear/metadata?team_id=team-ops", tm.member.Token, nil).Expect(t, http.StatusOK, &md)
	if len(md.States) != 1 || md.States[0].ID != "st-3" || len(md.Labels) != 1 || md.Labels[0].ID != "lb-2" || len(md.Teams) != 2 {
		t.Fatalf("team filter %+v", md)
	}
	expectFields(t, e.Do(t, http.MethodGet, "/integrations/"+it.ID+"/linear/metadata?team_id="+strings.Repeat("t", 101), tm.member.Token, nil), "team_id")

	e.linear.Fail(http.StatusServiceUnavailable)
	r := e.Do(t, http.MethodGet, "/integrations/"+it.ID+"/linear/metadata", tm.member.Token, nil)
	if body := r.ExpectError(t, http.StatusBadGateway, httpapi.CodeUnavailable); body.Error.Message != "linear is unavailable" {
		t.Fatalf("%s", r.Body)
	}
	e.linear.Fail(0)
	e.linear.SetToken("rotated")
	r = e.Do(t, http.MethodGet, "/integrations/"+it.ID+"/linear/metadata", tm.member.Token, nil)
	if body := r.ExpectError(t, http.StatusBadGateway, httpapi.CodeUnavailable); body.Error.Message != "linear rejected the credentials" {
		t.Fatalf("%s", r.Body)
	}
	sen := e.nangoIntegration(t, tm.admin, "sentry", sentryToken)
	e.Do(t, http.MethodGet, "/integrations/"+sen.ID+"/linear/metadata", tm.member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	noLeak(t, "logs", e.Logs.String(), linearToken, nangoSecret)
}

func TestMetadataThroughAFailingTokenBoundary(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	it := e.nangoIntegration(t, tm.admin, "linear", linearToken)

	// Nango down: 502 naming Nango; the integration stays active.
	e.nango.Fail(http.StatusBadGateway)
	r := e.Do(t, http.MethodGet, "/integrations/"+it.ID+"/linear/metadata", tm.member.Token, nil)
	if body := r.ExpectError(t, http.StatusBadGateway, httpapi.CodeUnavailable); body.Error.Message != "nango is unavailable" {
		t.Fatalf("%s", r.Body)
	}
	e.nango.Fail(0)
	if e.CountRows(t, "integrations", "id = $1 AND status = 'active'", it.ID) != 1 {
		t.Fatal("an outage changed the status")
	}
	// Nango cannot refresh: 502 asking for re-authorization, the integration
	// becomes expired, and later calls fail fast with 409.
	e.nango.Update(it.ConnectionID, "linear", func(c *fakes.NangoConnection) { c.RefreshFails = true })
	r = e.Do(t, http.MethodGet, "/integrations/"+it.ID+"/linear/metadata", tm.member.Token, nil)
	if body := r.ExpectError(t, http.StatusBadGateway, httpapi.CodeUnavailable); !strings.Contains(body.Error.Message, "re-authorize") {
		t.Fatalf("%s", r.Body)
	}
	var got integrations.Integration
	e.Do(t, http.MethodGet, "/integrations/"+it.ID, tm.member.Token, nil).Expect(t, http.StatusOK, &got)
	if got.Status != integrations.StatusExpired || got.StatusReason == "" {
		t.Fatalf("%+v", got)
	}
	calls := e.linear.Calls()
	e.Do(t, http.MethodGet, "/integrations/"+it.ID+"/linear/metadata", tm.member.Token, nil).ExpectError(t, http.StatusConflict, "integration_inactive")
	if e.linear.Calls() != calls {
		t.Fatal("an inactive integration still called Linear")
	}
	// Re-authorizing (the callback again) reactivates it.
	e.nango.Update(it.ConnectionID, "linear", func(c *fakes.NangoConnection) { c.RefreshFails = false })
	got = integrations.Integration{}
	e.Do(t, http.MethodPost, "/integrations/nango", tm.admin.Token, map[string]any{"connection_id": it.ConnectionID, "provider_config_key": "linear"}).
		Expect(t, http.StatusOK, &got)
	if got.Status != integrations.StatusActive || got.StatusReason != "" {
		t.Fatalf("%+v", got)
	}
	e.Do(t, http.MethodGet, "/integrations/"+it.ID+"/linear/metadata", tm.member.Token, nil).Expect(t, http.StatusOK, nil)
	noLeak(t, "logs", e.Logs.String(), linearToken, nangoSecret)
}
