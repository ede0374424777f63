package integrations_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	integrationsapi "github.com/proliferate/proliferate/api/integrations"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/integrations/fakes"
)

func TestGitHubAppInstallation(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	inst := nextInstallation()
	e.gh.AddInstallation(fakes.GitHubInstallation{ID: inst, Login: "acme-corp"})

	var it integrations.Integration
	e.Do(t, http.MethodPost, "/integrations/github-app", tm.admin.Token, map[string]any{
		"installation_id": inst, "state": e.githubState(t, tm.admin),
	}).Expect(t, http.StatusCreated, &it)
	if it.Provider != integrations.ProviderGitHubApp || it.IntegrationID != "github" || it.GitHubInstallationID != inst ||
		it.ConnectionID != "github-app-"+strconv.FormatInt(inst, 10) || it.Status != integrations.StatusActive || it.Visibility != integrations.VisibilityOrg ||
		it.DisplayName == nil || *it.DisplayName != "acme-corp" || it.OrgID != tm.owner.OrgID ||
		it.Creator == nil || it.Creator.ID != tm.admin.ID || it.Metadata["account_login"] != "acme-corp" {
		t.Fatalf("integration %+v", it)
	}

	// Re-installing the same installation reactivates the row (200).
	if _, err := e.Deps.Pool.Exec(context.Background(), `UPDATE integrations SET status = 'suspended' WHERE id = $1`, it.ID); err != nil {
		t.Fatal(err)
	}
	var again integrations.Integration
	e.Do(t, http.MethodPost, "/integrations/github-app", tm.owner.Token, map[string]any{
		"installation_id": inst, "state": e.githubState(t, tm.owner),
	}).Expect(t, http.StatusOK, &again)
	if again.ID != it.ID || again.Status != integrations.StatusActive {
		t.Fatalf("re-install: %+v", again)
	}
	if n := e.CountRows(t, "integrations", "org_id = $1", tm.owner.OrgID); n != 1 {
		t.Fatalf("%d rows", n)
	}

	// A suspended installation is registered as suspended.
	susp := nextInstallation()
	e.gh.AddInstallation(fakes.GitHubInstallation{ID: susp, Login: "paused", Suspended: true})
	var s integrations.Integration
	e.Do(t, http.MethodPost, "/integrations/github-app", tm.admin.Token, map[string]any{
		"installation_id": susp, "state": e.githubState(t, tm.admin),
	}).Expect(t, http.StatusCreated, &s)
	if s.Status != integrations.StatusSuspended {
		t.Fatalf("status %s", s.Status)
	}
	noLeak(t, "logs", e.Logs.String(), keyPEM()[40:120], nangoSecret)
}

func TestGitHubAppStateIsSingleUseAndBoundToPersonAndOrg(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	other := e.NewUser(t)
	inst := nextInstallation()
	e.gh.AddInstallation(fakes.GitHubInstallation{ID: inst, Login: "acme"})
	count := func() int { return e.CountRows(t, "integrations", "github_installation_id = $1", inst) }
	body := func(state string) map[string]any { return map[string]any{"installation_id": inst, "state": state} }

	expectFields(t, e.Do(t, http.MethodPost, "/integrations/github-app", tm.admin.Token, body("made-up")), "state")
	// Another person's state, another org's state.
	expectFields(t, e.Do(t, http.MethodPost, "/integrations/github-app", tm.admin.Token, body(e.githubState(t, tm.owner))), "state")
	expectFields(t, e.Do(t, http.MethodPost, "/integrations/github-app", tm.admin.Token, body(e.githubState(t, other))), "state")
	// Unknown installation: the state is spent too.
	st := e.githubState(t, tm.admin)
	expectFields(t, e.Do(t, http.MethodPost, "/integrations/github-app", tm.admin.Token,
		map[string]any{"installation_id": 1, "state": st}), "installation_id")
	expectFields(t, e.Do(t, http.MethodPost, "/integrations/github-app", tm.admin.Token, body(st)), "state")
	if count() != 0 {
		t.Fatal("a refused callback wrote a row")
	}
	st = e.githubState(t, tm.admin)
	e.Do(t, http.MethodPost, "/integrations/github-app", tm.admin.Token, body(st)).Expect(t, http.StatusCreated, nil)
	expectFields(t, e.Do(t, http.MethodPost, "/integrations/github-app", tm.admin.Token, body(st)), "state") // replay
}

func TestGitHubAppInstallationBelongsToOneOrg(t *testing.T) {
	e := newEnv(t)
	a := e.NewUser(t)
	b := e.NewUser(t)
	it := e.githubIntegration(t, a, "")
	claim := func() *apitest.Response {
		return e.Do(t, http.MethodPost, "/integrations/github-app", b.Token, map[string]any{
			"installation_id": it.GitHubInstallationID, "state": e.githubState(t, b)})
	}
	r := claim()
	r.ExpectError(t, http.StatusConflict, "installation_claimed")
	if strings.Contains(string(r.Body), it.ID) || strings.Contains(string(r.Body), a.OrgID) {
		t.Fatal("the conflict reveals the other org's integration")
	}
	if e.CountRows(t, "integrations", "org_id = $1", b.OrgID) != 0 {
		t.Fatal("org B got a row")
	}
	// Once org A disconnects it, org B may connect it.
	e.Do(t, http.MethodDelete, "/integrations/"+it.ID, a.Token, nil).Expect(t, http.StatusOK, nil)
	claim().Expect(t, http.StatusCreated, nil)
}

func TestGitHubAppUpstreamFailureAndNotConfigured(t *testing.T) {
	e := newEnv(t)
	u := e.NewUser(t)
	// Installation lookup failing at GitHub: 502 naming GitHub.
	bad := apitest.New(t, []func(*api.Server) error{integrationsapi.Register}, apitest.WithEnv(
		"GITHUB_APP_ID", appID, "GITHUB_APP_PRIVATE_KEY", keyPEM(), "GITHUB_API_URL", "http://127.0.0.1:1"))
	bu := bad.NewUser(t)
	var st struct{ State string }
	bad.Do(t, http.MethodPost, "/integrations/github-app/state", bu.Token, nil).Expect(t, http.StatusCreated, &st)
	r := bad.Do(t, http.MethodPost, "/integrations/github-app", bu.Token, map[string]any{"installation_id": 5, "state": st.State})
	body := r.ExpectError(t, http.StatusBadGateway, httpapi.CodeUnavailable)
	if !strings.Contains(body.Error.Message, "github") {
		t.Fatalf("message does not name GitHub: %s", r.Body)
	}
	// No GitHub App configured: 503 not_configured, nothing written.
	plain := apitest.New(t, []func(*api.Server) error{integrationsapi.Register})
	pu := plain.NewUser(t)
	plain.Do(t, http.MethodPost, "/integrations/github-app/state", pu.Token, nil).ExpectError(t, http.StatusServiceUnavailable, "not_configured")
	plain.Do(t, http.MethodPost, "/integrations/github-app", pu.Token, map[string]any{"installation_id": 5, "state": "x"}).
		ExpectError(t, http.StatusServiceUnavailable, "not_configured")
	plain.Do(t, http.MethodPost, "/integrations/nango/sessions", pu.Token, map[string]any{"integration": "sentry"}).
		ExpectError(t, http.StatusServiceUnavailable, "not_configured")
	_ = u
}

func TestNangoConnectFlow(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	other := e.NewUser(t)

	var sess struct {
		Token             string `json:"token"`
		ProviderConfigKey string `json:"provider_config_key"`
	}
	e.Do(t, http.MethodPost, "/integrations/nango/sessions", tm.admin.Token, map[string]any{"integration": "sentry"}).
		Expect(t, http.StatusCreated, &sess)
	got := e.nango.Sessions()
	if sess.Token == "" || sess.ProviderConfigKey != "sentry" || len(got) != 1 || got[0].EndUserID != tm.admin.ID ||
		got[0].OrganizationID != tm.owner.OrgID || got[0].EndUserEmail != tm.admin.Email ||
		len(got[0].AllowedIntegrations) != 1 || got[0].AllowedIntegrations[0] != "sentry" {
		t.Fatalf("session %+v, nango saw %+v", sess, got)
	}
	e.Do(t, http.MethodPost, "/integrations/nango/sessions", tm.member.Token, map[string]any{"integration": "sentry"}).
		ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	e.Do(t, http.MethodPost, "/integrations/nango/sessions", tm.member.Token, map[string]any{"integration": "github", "personal": true}).
		Expect(t, http.StatusCreated, nil)
	expectFields(t, e.Do(t, http.MethodPost, "/integrations/nango/sessions", tm.member.Token,
		map[string]any{"integration": "sentry", "personal": true}), "integration")
	expectFields(t, e.Do(t, http.MethodPost, "/integrations/nango/sessions", tm.admin.Token, map[string]any{"integration": "jira"}), "integration")

	// The callback: the connection must exist and come from this org's session.
	e.nango.AddConnection(fakes.NangoConnection{ConnectionID: "c-ok", ConfigKey: "sentry", AccessToken: sentryToken, EndUserID: tm.admin.ID, EndUserOrgID: tm.owner.OrgID})
	e.nango.AddConnection(fakes.NangoConnection{ConnectionID: "c-other-org", ConfigKey: "sentry", AccessToken: "x", EndUserID: other.ID, EndUserOrgID: other.OrgID})
	e.nango.AddConnection(fakes.NangoConnection{ConnectionID: "c-no-session", ConfigKey: "sentry", AccessToken: "x"})
	count := func() int { return e.CountRows(t, "integrations", "org_id = $1", tm.owner.OrgID) }
	for conn, field := range map[string]string{"c-other-org": "connection_id", "c-no-session": "connection_id", "c-missing": "connection_id"} {
		expectFields(t, e.Do(t, http.MethodPost, "/integrations/nango", tm.admin.Token,
			map[string]any{"connection_id": conn, "provider_config_key": "sentry"}), field)
	}
	expectFields(t, e.Do(t, http.MethodPost, "/integrations/nango", tm.admin.Token,
		map[string]any{"connection_id": "c-ok", "provider_config_key": "jira"}), "provider_config_key")
	if count() != 0 {
		t.Fatal("refused callbacks wrote rows")
	}
	var it integrations.Integration
	e.Do(t, http.MethodPost, "/integrations/nango", tm.admin.Token, map[string]any{
		"connection_id": "c-ok", "provider_config_key": "sentry", "display_name": "  Prod Sentry  ",
	}).Expect(t, http.StatusCreated, &it)
	if it.Provider != integrations.ProviderNango || it.IntegrationID != "sentry" || it.ConnectionID != "c-ok" ||
		it.ProviderConfigKey != "sentry" || *it.DisplayName != "Prod Sentry" || len(it.Scopes) == 0 {
		t.Fatalf("%+v", it)
	}
	e.Do(t, http.MethodPost, "/integrations/nango", tm.owner.Token, map[string]any{"connection_id": "c-ok", "provider_config_key": "sentry"}).
		Expect(t, http.StatusOK, nil)
	e.Do(t, http.MethodPost, "/integrations/nango", tm.member.Token, map[string]any{"connection_id": "c-ok", "provider_config_key": "sentry"}).
		ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	// Nango down during the callback: 502 naming Nango.
	e.nango.Fail(http.StatusInternalServerError)
	r := e.Do(t, http.MethodPost, "/integrations/nango", tm.admin.Token, map[string]any{"connection_id": "c-ok", "provider_config_key": "sentry"})
	if b := r.ExpectError(t, http.StatusBadGateway, httpapi.CodeUnavailable); !strings.Contains(b.Error.Message, "nango") {
		t.Fatalf("%s", r.Body)
	}
	e.nango.Fail(0)
	noLeak(t, "logs", e.Logs.String(), nangoSecret, sentryToken)
}

func TestListGetAndFilters(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	gh := e.githubIntegration(t, tm.admin, "")
	sen := e.nangoIntegration(t, tm.admin, "sentry", sentryToken)
	lin := e.nangoIntegration(t, tm.owner, "linear", linearToken)

	var page api.Page[integrations.Integration]
	e.Do(t, http.MethodGet, "/integrations?limit=2", tm.member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 2 || page.Items[0].ID != lin.ID || page.Items[1].ID != sen.ID || page.NextCursor == "" {
		t.Fatalf("first page %+v", page)
	}
	var next api.Page[integrations.Integration]
	e.Do(t, http.MethodGet, "/integrations?limit=2&cursor="+page.NextCursor, tm.member.Token, nil).Expect(t, http.StatusOK, &next)
	if len(next.Items) != 1 || next.Items[0].ID != gh.ID || next.NextCursor != "" {
		t.Fatalf("second page %+v", next)
	}
	e.Do(t, http.MethodGet, "/integrations?integration=sentry", tm.member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 1 || page.Items[0].ID != sen.ID {
		t.Fatalf("filter: %+v", page.Items)
	}
	e.Do(t, http.MethodGet, "/integrations?status=expired", tm.member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 0 {
		t.Fatalf("status filter: %+v", page.Items)
	}
	expectFields(t, e.Do(t, http.MethodGet, "/integrations?status=weird", tm.member.Token, nil), "status")
	expectFields(t, e.Do(t, http.MethodGet, "/integrations?limit=0", tm.member.Token, nil), "limit")
	expectFields(t, e.Do(t, http.MethodGet, "/integrations?limit=101", tm.member.Token, nil), "limit")
	expectFields(t, e.Do(t, http.MethodGet, "/integrations?cursor=!!", tm.member.Token, nil), "cursor")
	expectFields(t, e.Do(t, http.MethodGet, "/integrations?cursor=eyJ0IjoiMjAyMC0wMS0wMVQwMDowMDowMFoiLCJpIjoieCJ9", tm.member.Token, nil), "cursor")
	expectFields(t, e.Do(t, http.MethodGet, "/integrations?integration="+strings.Repeat("x", 65), tm.member.Token, nil), "integration")

	var one integrations.Integration
	e.Do(t, http.MethodGet, "/integrations/"+gh.ID, tm.member.Token, nil).Expect(t, http.StatusOK, &one)
	if one.ID != gh.ID || one.Creator == nil || one.Creator.Email != tm.admin.Email {
		t.Fatalf("%+v", one)
	}
	e.Do(t, http.MethodGet, "/integrations/not-a-uuid", tm.member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodGet, "/integrations/6a1c0b52-4d21-4a7f-9a63-0c1d2e3f4a5b", tm.member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)

	var prov struct {
		Items []struct {
			ID        string                  `json:"id"`
			Available []integrations.Provider `json:"available"`
			Org       struct{ Preset string } `json:"org"`
		} `json:"items"`
	}
	e.Do(t, http.MethodGet, "/integrations/providers", tm.member.Token, nil).Expect(t, http.StatusOK, &prov)
	if len(prov.Items) != 3 || prov.Items[0].ID != "github" || len(prov.Items[0].Available) != 2 || prov.Items[2].Org.Preset != "sentry" {
		t.Fatalf("providers %+v", prov)
	}
}

func TestVisibilityIsEnforcedForPrivateIntegrations(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	priv := e.githubIntegration(t, tm.admin, "private")
	shared := e.githubIntegration(t, tm.owner, "org")
	if priv.Visibility != integrations.VisibilityPrivate {
		t.Fatalf("%+v", priv)
	}
	repoID, _ := e.repo(t, tm.owner.OrgID)
	ids := func(u *apitest.User) map[string]bool {
		var page api.Page[integrations.Integration]
		e.Do(t, http.MethodGet, "/integrations", u.Token, nil).Expect(t, http.StatusOK, &page)
		out := map[string]bool{}
		for _, it := range page.Items {
			out[it.ID] = true
		}
		return out
	}
	if got := ids(tm.admin); !got[priv.ID] || !got[shared.ID] {
		t.Fatalf("creator's list %v", got)
	}
	// Nobody else sees it, not even the owner: every route answers 404.
	for _, u := range []*apitest.User{tm.owner, tm.member} {
		if got := ids(u); got[priv.ID] || !got[shared.ID] {
			t.Fatalf("list of a non-creator %v", got)
		}
		for _, rq := range []struct{ method, path string }{
			{http.MethodGet, "/integrations/" + priv.ID},
			{http.MethodPatch, "/integrations/" + priv.ID},
			{http.MethodDelete, "/integrations/" + priv.ID},
			{http.MethodGet, "/integrations/" + priv.ID + "/repos"},
			{http.MethodPut, "/integrations/" + priv.ID + "/repos/" + repoID},
			{http.MethodDelete, "/integrations/" + priv.ID + "/repos/" + repoID},
			{http.MethodGet, "/integrations/" + priv.ID + "/sentry/metadata"},
			{http.MethodGet, "/integrations/" + priv.ID + "/linear/metadata"},
		} {
			var body any
			if rq.method == http.MethodPatch {
				body = map[string]any{"display_name": "stolen"}
			}
			if u == tm.member && strings.Contains(rq.path, "/repos/") { // admin-only routes: refused first
				e.Do(t, rq.method, rq.path, u.Token, body).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
				continue
			}
			e.Do(t, rq.method, rq.path, u.Token, body).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
		}
	}
	if e.CountRows(t, "integrations", "id = $1 AND display_name IS DISTINCT FROM 'stolen'", priv.ID) != 1 {
		t.Fatal("a non-creator changed the private integration")
	}
	// Bound to a repo, it stays hidden from others in the repo's connections.
	e.Do(t, http.MethodPut, "/integrations/"+priv.ID+"/repos/"+repoID, tm.admin.Token, nil).Expect(t, http.StatusCreated, nil)
	e.Do(t, http.MethodPut, "/integrations/"+shared.ID+"/repos/"+repoID, tm.admin.Token, nil).Expect(t, http.StatusCreated, nil)
	var conns api.Page[integrations.RepoConnection]
	e.Do(t, http.MethodGet, "/repos/"+repoID+"/connections", tm.member.Token, nil).Expect(t, http.StatusOK, &conns)
	if len(conns.Items) != 1 || conns.Items[0].Integration.ID != shared.ID {
		t.Fatalf("member sees %+v", conns.Items)
	}
	e.Do(t, http.MethodGet, "/repos/"+repoID+"/connections", tm.admin.Token, nil).Expect(t, http.StatusOK, &conns)
	if len(conns.Items) != 2 {
		t.Fatalf("creator sees %d", len(conns.Items))
	}

	// Only the creator makes an integration private; anyone allowed may make it org-wide.
	e.Do(t, http.MethodPatch, "/integrations/"+shared.ID, tm.admin.Token, map[string]any{"visibility": "private"}).
		ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	var upd integrations.Integration
	e.Do(t, http.MethodPatch, "/integrations/"+shared.ID, tm.owner.Token, map[string]any{"visibility": "private"}).Expect(t, http.StatusOK, &upd)
	if upd.Visibility != integrations.VisibilityPrivate {
		t.Fatalf("%+v", upd)
	}
	e.Do(t, http.MethodPatch, "/integrations/"+priv.ID, tm.admin.Token, map[string]any{"visibility": "org"}).Expect(t, http.StatusOK, nil)
	if got := ids(tm.member); !got[priv.ID] || got[shared.ID] {
		t.Fatalf("after swapping visibility the member sees %v", got)
	}

	// Re-registering another member's private connection neither reveals nor takes it over.
	inst := priv.GitHubInstallationID
	e.Do(t, http.MethodPatch, "/integrations/"+priv.ID, tm.admin.Token, map[string]any{"visibility": "private"}).Expect(t, http.StatusOK, nil)
	r := e.Do(t, http.MethodPost, "/integrations/github-app", tm.owner.Token, map[string]any{"installation_id": inst, "state": e.githubState(t, tm.owner)})
	r.ExpectError(t, http.StatusConflict, httpapi.CodeConflict)
	if strings.Contains(string(r.Body), priv.ID) {
		t.Fatal("conflict reveals the private integration")
	}
}

func TestUpdateAndDisconnectRoleMatrix(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	byAdmin := e.githubIntegration(t, tm.admin, "")
	name := func(id string) string {
		var n *string
		_ = e.Deps.Pool.QueryRow(context.Background(), `SELECT display_name FROM integrations WHERE id = $1`, id).Scan(&n)
		if n == nil {
			return ""
		}
		return *n
	}
	// member (not the creator): 403, nothing changes.
	e.Do(t, http.MethodPatch, "/integrations/"+byAdmin.ID, tm.member.Token, map[string]any{"display_name": "m"}).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	e.Do(t, http.MethodDelete, "/integrations/"+byAdmin.ID, tm.member.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	if name(byAdmin.ID) == "m" || e.CountRows(t, "integrations", "id = $1", byAdmin.ID) != 1 {
		t.Fatal("member changed it")
	}
	// admin and owner may rename; "" clears the name.
	for _, u := range []*apitest.User{tm.admin, tm.owner} {
		var it integrations.Integration
		e.Do(t, http.MethodPatch, "/integrations/"+byAdmin.ID, u.Token, map[string]any{"display_name": " " + u.ID[:6] + " "}).Expect(t, http.StatusOK, &it)
		if it.DisplayName == nil || *it.DisplayName != u.ID[:6] {
			t.Fatalf("%+v", it)
		}
	}
	var cleared integrations.Integration
	e.Do(t, http.MethodPatch, "/integrations/"+byAdmin.ID, tm.owner.Token, map[string]any{"display_name": ""}).Expect(t, http.StatusOK, &cleared)
	if cleared.DisplayName != nil {
		t.Fatalf("%+v", cleared)
	}
	// A member who created it (they were admin then) may still manage their own.
	own := e.githubIntegration(t, tm.admin, "")
	e.AddMember(t, tm.admin, tm.owner.OrgID, auth.RoleMember)
	e.Do(t, http.MethodPatch, "/integrations/"+own.ID, tm.admin.Token, map[string]any{"display_name": "mine"}).Expect(t, http.StatusOK, nil)
	e.Do(t, http.MethodDelete, "/integrations/"+own.ID, tm.admin.Token, nil).Expect(t, http.StatusOK, nil)
	// The owner disconnects anything.
	var res integrations.DisconnectResult
	e.Do(t, http.MethodDelete, "/integrations/"+byAdmin.ID, tm.owner.Token, nil).Expect(t, http.StatusOK, &res)
	if res.ID != byAdmin.ID || res.UpstreamRevoked || len(res.OrphanedRepos) != 0 {
		t.Fatalf("%+v", res)
	}
	e.Do(t, http.MethodDelete, "/integrations/"+byAdmin.ID, tm.owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	// Admin-only creation routes.
	e.Do(t, http.MethodPost, "/integrations/github-app/state", tm.member.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	e.Do(t, http.MethodPost, "/integrations/github-app", tm.member.Token, map[string]any{"installation_id": 1, "state": "x"}).
		ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
}

func TestDisconnectFlagsOrphanedRepos(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	x := e.nangoIntegration(t, tm.admin, "github", "gho_x")
	y := e.githubIntegration(t, tm.admin, "")
	onlyX, onlyXName := e.repo(t, tm.owner.OrgID)
	both, _ := e.repo(t, tm.owner.OrgID)
	unbound, _ := e.repo(t, tm.owner.OrgID)
	for _, b := range [][2]string{{x.ID, onlyX}, {x.ID, both}, {y.ID, both}} {
		e.Do(t, http.MethodPut, "/integrations/"+b[0]+"/repos/"+b[1], tm.admin.Token, nil).Expect(t, http.StatusCreated, nil)
	}
	var res integrations.DisconnectResult
	e.Do(t, http.MethodDelete, "/integrations/"+x.ID, tm.admin.Token, nil).Expect(t, http.StatusOK, &res)
	if len(res.OrphanedRepos) != 1 || res.OrphanedRepos[0].ID != onlyX || res.OrphanedRepos[0].GitHubRepoName != onlyXName || !res.UpstreamRevoked {
		t.Fatalf("%+v", res)
	}
	if e.CountRows(t, "repos", "id = $1 AND is_orphaned", onlyX) != 1 ||
		e.CountRows(t, "repos", "id = ANY($1::uuid[]) AND is_orphaned", []string{both, unbound}) != 0 {
		t.Fatal("orphan flags wrong")
	}
	if e.CountRows(t, "repo_connections", "integration_id = $1", x.ID) != 0 || e.CountRows(t, "repo_connections", "integration_id = $1", y.ID) != 1 {
		t.Fatal("bindings not cascaded")
	}
	if del := e.nango.Deleted(); len(del) != 1 || del[0] != x.ConnectionID {
		t.Fatalf("nango deletions %v", del)
	}
	// Binding the orphan to another integration un-orphans it.
	e.Do(t, http.MethodPut, "/integrations/"+y.ID+"/repos/"+onlyX, tm.admin.Token, nil).Expect(t, http.StatusCreated, nil)
	if e.CountRows(t, "repos", "id = $1 AND is_orphaned", onlyX) != 0 {
		t.Fatal("still orphaned")
	}
	// Nango failing to delete upstream does not block the local disconnect.
	z := e.nangoIntegration(t, tm.admin, "linear", linearToken)
	e.nango.Fail(http.StatusInternalServerError)
	e.Do(t, http.MethodDelete, "/integrations/"+z.ID, tm.admin.Token, nil).Expect(t, http.StatusOK, &res)
	e.nango.Fail(0)
	if res.UpstreamRevoked || e.CountRows(t, "integrations", "id = $1", z.ID) != 0 {
		t.Fatalf("%+v", res)
	}
}

func TestIntegrationsAreIsolatedBetweenOrgs(t *testing.T) {
	e := newEnv(t)
	a := e.team(t)
	b := e.NewUser(t)
	it := e.githubIntegration(t, a.admin, "")
	repoA, _ := e.repo(t, a.owner.OrgID)
	repoB, _ := e.repo(t, b.OrgID)
	e.Do(t, http.MethodPut, "/integrations/"+it.ID+"/repos/"+repoA, a.admin.Token, nil).Expect(t, http.StatusCreated, nil)
	for _, rq := range []struct {
		method, path string
		body         any
	}{
		{http.MethodGet, "/integrations/" + it.ID, nil},
		{http.MethodPatch, "/integrations/" + it.ID, map[string]any{"display_name": "pwned", "visibility": "private"}},
		{http.MethodDelete, "/integrations/" + it.ID, nil},
		{http.MethodGet, "/integrations/" + it.ID + "/repos", nil},
		{http.MethodPut, "/integrations/" + it.ID + "/repos/" + repoB, nil},
		{http.MethodPut, "/integrations/" + it.ID + "/repos/" + repoA, nil},
		{http.MethodDelete, "/integrations/" + it.ID + "/repos/" + repoA, nil},
		{http.MethodGet, "/repos/" + repoA + "/connections", nil},
		{http.MethodGet, "/integrations/" + it.ID + "/sentry/metadata", nil},
		{http.MethodGet, "/integrations/" + it.ID + "/linear/metadata", nil},
	} {
		e.Do(t, rq.method, rq.path, b.Token, rq.body).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	}
	var page api.Page[integrations.Integration]
	e.Do(t, http.MethodGet, "/integrations", b.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 0 {
		t.Fatalf("org B lists %+v", page.Items)
	}
	if e.CountRows(t, "integrations", "id = $1 AND display_name IS DISTINCT FROM 'pwned' AND visibility = 'org' AND status = 'active'", it.ID) != 1 ||
		e.CountRows(t, "repo_connections", "integration_id = $1", it.ID) != 1 ||
		e.CountRows(t, "repo_connections", "repo_id = $1", repoB) != 0 {
		t.Fatal("org B changed org A's integration or bindings")
	}
}

func TestUserConnections(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	add := func(u *apitest.User, conn string) {
		e.nango.AddConnection(fakes.NangoConnection{ConnectionID: conn, ConfigKey: "github", AccessToken: "gho_" + conn, EndUserID: u.ID, EndUserOrgID: u.OrgID})
	}
	add(tm.member, "member-gh")
	add(tm.member, "member-gh-2")
	add(tm.admin, "admin-gh")
	var uc integrations.UserConnection
	e.Do(t, http.MethodPost, "/integrations/user-connections", tm.member.Token, map[string]any{"connection_id": "member-gh", "provider_config_key": "github"}).
		Expect(t, http.StatusCreated, &uc)
	if uc.UserID != tm.member.ID || uc.IntegrationID != "github" || uc.Status != integrations.StatusActive {
		t.Fatalf("%+v", uc)
	}
	// Someone else's connection cannot be claimed.
	expectFields(t, e.Do(t, http.MethodPost, "/integrations/user-connections", tm.member.Token,
		map[string]any{"connection_id": "admin-gh", "provider_config_key": "github"}), "connection_id")
	// Sentry has no personal connections.
	e.nango.AddConnection(fakes.NangoConnection{ConnectionID: "member-sentry", ConfigKey: "sentry", AccessToken: "s", EndUserID: tm.member.ID, EndUserOrgID: tm.owner.OrgID})
	expectFields(t, e.Do(t, http.MethodPost, "/integrations/user-connections", tm.member.Token,
		map[string]any{"connection_id": "member-sentry", "provider_config_key": "sentry"}), "provider_config_key")
	// Connecting again replaces the previous connection (deleted at Nango).
	var uc2 integrations.UserConnection
	e.Do(t, http.MethodPost, "/integrations/user-connections", tm.member.Token, map[string]any{"connection_id": "member-gh-2", "provider_config_key": "github"}).
		Expect(t, http.StatusOK, &uc2)
	if uc2.ID != uc.ID || uc2.ConnectionID != "member-gh-2" {
		t.Fatalf("%+v", uc2)
	}
	if del := e.nango.Deleted(); len(del) != 1 || del[0] != "member-gh" {
		t.Fatalf("deleted %v", del)
	}
	var page api.Page[integrations.UserConnection]
	e.Do(t, http.MethodGet, "/integrations/user-connections", tm.admin.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 0 {
		t.Fatalf("admin sees the member's connections: %+v", page.Items)
	}
	e.Do(t, http.MethodGet, "/integrations/user-connections", tm.member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 1 {
		t.Fatalf("%+v", page.Items)
	}
	e.Do(t, http.MethodDelete, "/integrations/user-connections/"+uc.ID, tm.owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodDelete, "/integrations/user-connections/"+uc.ID, tm.member.Token, nil).Expect(t, http.StatusNoContent, nil)
	e.Do(t, http.MethodDelete, "/integrations/user-connections/"+uc.ID, tm.member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
}

func TestIntegrationRoutesRefuseInvalidInput(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	it := e.githubIntegration(t, tm.admin, "")
	countAll := func() int { return e.CountRows(t, "integrations", "org_id = $1", tm.owner.OrgID) }
	long := strings.Repeat("x", 256)

	t.Run("github-app", func(t *testing.T) {
		e.expectBad(t, http.MethodPost, "/integrations/github-app", tm.admin.Token, append(genericBad(false),
			badBody{"missing fields", `{}`, 0, "", []string{"installation_id", "state"}},
			badBody{"wrong types", `{"installation_id": "12", "state": "s"}`, 0, "", []string{"installation_id"}},
			badBody{"negative id", `{"installation_id": -3, "state": "s"}`, 0, "", []string{"installation_id"}},
			badBody{"oversized", map[string]any{"installation_id": 1, "state": long, "display_name": long}, 0, "", []string{"state", "display_name"}},
			badBody{"bad visibility", map[string]any{"installation_id": 1, "state": "s", "visibility": "public"}, 0, "", []string{"visibility"}},
		), countAll)
	})
	t.Run("nango", func(t *testing.T) {
		e.expectBad(t, http.MethodPost, "/integrations/nango", tm.admin.Token, append(genericBad(false),
			badBody{"missing fields", `{}`, 0, "", []string{"connection_id", "provider_config_key"}},
			badBody{"wrong types", `{"connection_id": 5, "provider_config_key": "sentry"}`, 0, "", []string{"connection_id"}},
			badBody{"oversized", map[string]any{"connection_id": long, "provider_config_key": long}, 0, "", []string{"connection_id", "provider_config_key"}},
		), countAll)
	})
	t.Run("nango session", func(t *testing.T) {
		e.expectBad(t, http.MethodPost, "/integrations/nango/sessions", tm.admin.Token, append(genericBad(false),
			badBody{"missing", `{}`, 0, "", []string{"integration"}},
			badBody{"wrong type", `{"integration": "sentry", "personal": "yes"}`, 0, "", []string{"personal"}},
			badBody{"oversized", map[string]any{"integration": long}, 0, "", []string{"integration"}},
		), func() int { return len(e.nango.Sessions()) })
	})
	t.Run("update", func(t *testing.T) {
		e.expectBad(t, http.MethodPatch, "/integrations/"+it.ID, tm.admin.Token, append(genericBad(false),
			badBody{"nothing to change", `{}`, 0, "", []string{"(body)"}},
			badBody{"wrong type", `{"display_name": 3}`, 0, "", []string{"display_name"}},
			badBody{"oversized", map[string]any{"display_name": long}, 0, "", []string{"display_name"}},
			badBody{"bad visibility", map[string]any{"visibility": "everyone"}, 0, "", []string{"visibility"}},
		), func() int { return e.CountRows(t, "integrations", "id = $1 AND updated_at = $2", it.ID, it.UpdatedAt) })
	})
	t.Run("user connection", func(t *testing.T) {
		e.expectBad(t, http.MethodPost, "/integrations/user-connections", tm.member.Token, append(genericBad(false),
			badBody{"missing", `{}`, 0, "", []string{"connection_id", "provider_config_key"}},
			badBody{"oversized", map[string]any{"connection_id": long, "provider_config_key": "github"}, 0, "", []string{"connection_id"}},
		), func() int { return e.CountRows(t, "user_connections", "org_id = $1", tm.owner.OrgID) })
	})
}
