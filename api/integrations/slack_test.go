package integrations_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	integrationsapi "github.com/proliferate/proliferate/api/integrations"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/integrations/fakes"
)

func (e *env) slackState(t *testing.T, u *apitest.User, body any) string {
	t.Helper()
	var st struct {
		State        string `json:"state"`
		AuthorizeURL string `json:"authorize_url"`
	}
	e.Do(t, http.MethodPost, "/slack/oauth/state", u.Token, body).Expect(t, http.StatusCreated, &st)
	return st.State
}

func (e *env) installSlack(t *testing.T, u *apitest.User, team string, wantStatus int) (integrations.SlackInstallation, string) {
	t.Helper()
	code := apitest.Unique("code-")
	tok := e.slack.AddCode(code, fakes.SlackInstall{TeamID: team, TeamName: "Team " + team, BotUserID: "UBOT" + team})
	var si integrations.SlackInstallation
	r := e.Do(t, http.MethodPost, "/slack/installations", u.Token, map[string]any{"code": code, "state": e.slackState(t, u, nil)})
	r.Expect(t, wantStatus, &si)
	noLeak(t, "install response", string(r.Body), tok)
	return si, tok
}

func TestSlackInstallLifecycle(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	ctx := context.Background()
	svc := e.svc(t)

	var st struct {
		State        string `json:"state"`
		AuthorizeURL string `json:"authorize_url"`
	}
	e.Do(t, http.MethodPost, "/slack/oauth/state", tm.admin.Token, map[string]any{"redirect_uri": publicURL + "/slack/callback"}).
		Expect(t, http.StatusCreated, &st)
	au, err := url.Parse(st.AuthorizeURL)
	if err != nil || au.Query().Get("client_id") != slackClientID || au.Query().Get("state") != st.State ||
		au.Query().Get("redirect_uri") != publicURL+"/slack/callback" || !strings.Contains(au.Query().Get("scope"), "chat:write") {
		t.Fatalf("authorize url %s", st.AuthorizeURL)
	}
	noLeak(t, "authorize url", st.AuthorizeURL, slackSecret)

	code := "code-redirect"
	tok := e.slack.AddCode(code, fakes.SlackInstall{TeamID: "T1", TeamName: "Acme", BotUserID: "UBOT1", RedirectURI: publicURL + "/slack/callback"})
	var si integrations.SlackInstallation
	r := e.Do(t, http.MethodPost, "/slack/installations", tm.admin.Token, map[string]any{"code": code, "state": st.State})
	r.Expect(t, http.StatusCreated, &si)
	if si.TeamID != "T1" || si.TeamName != "Acme" || si.BotUserID != "UBOT1" || si.Status != "active" ||
		si.InstalledBy == nil || *si.InstalledBy != tm.admin.ID || len(si.Scopes) != 2 || si.OrgID != tm.owner.OrgID {
		t.Fatalf("%+v", si)
	}
	noLeak(t, "install response", string(r.Body), tok)

	// Sealed at rest, bound to org and team.
	var sealed string
	if err := e.Deps.Pool.QueryRow(ctx, `SELECT encrypted_bot_token FROM slack_installations WHERE id = $1`, si.ID).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, tok) {
		t.Fatal("bot token stored in clear")
	}
	if _, err := e.Deps.Box.Open(sealed, []byte("slack:"+tm.owner.OrgID+":T1")); err != nil {
		t.Fatalf("not sealed with the org+team binding: %v", err)
	}
	if _, err := e.Deps.Box.Open(sealed, []byte("slack:"+tm.owner.OrgID+":T2")); err == nil {
		t.Fatal("opens for another team")
	}

	got, err := svc.SlackBotToken(ctx, tm.owner.OrgID)
	if err != nil || got.Value != tok {
		t.Fatalf("SlackBotToken: %v", err)
	}

	// Reading never returns the token.
	var page api.Page[integrations.SlackInstallation]
	r = e.Do(t, http.MethodGet, "/slack/installations", tm.member.Token, nil)
	r.Expect(t, http.StatusOK, &page)
	noLeak(t, "list", string(r.Body), tok, sealed)
	if len(page.Items) != 1 || page.Items[0].ID != si.ID {
		t.Fatalf("%+v", page)
	}
	r = e.Do(t, http.MethodGet, "/slack/installations/"+si.ID, tm.member.Token, nil)
	r.Expect(t, http.StatusOK, nil)
	noLeak(t, "get", string(r.Body), tok, sealed)

	// Re-installing the workspace updates it (200) with the new token.
	again, tok2 := e.installSlack(t, tm.owner, "T1", http.StatusOK)
	if again.ID != si.ID {
		t.Fatalf("%+v", again)
	}
	if got, _ := svc.SlackBotToken(ctx, tm.owner.OrgID); got.Value != tok2 {
		t.Fatal("token not replaced")
	}
	// A second workspace: SlackBotToken refuses to guess.
	other, tok3 := e.installSlack(t, tm.admin, "T2", http.StatusCreated)
	if _, err := svc.SlackBotToken(ctx, tm.owner.OrgID); !errors.Is(err, integrations.ErrAmbiguous) {
		t.Fatalf("two workspaces: %v", err)
	}
	if got, err := svc.SlackInstallationToken(ctx, tm.owner.OrgID, other.ID); err != nil || got.Value != tok3 {
		t.Fatalf("by installation: %v", err)
	}

	// Uninstall: member 403; admin revokes at Slack and locally.
	e.Do(t, http.MethodDelete, "/slack/installations/"+other.ID, tm.member.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	var rev integrations.SlackInstallation
	e.Do(t, http.MethodDelete, "/slack/installations/"+other.ID, tm.admin.Token, nil).Expect(t, http.StatusOK, &rev)
	if rev.Status != "revoked" || rev.RevokedAt == nil {
		t.Fatalf("%+v", rev)
	}
	if revoked := e.slack.Revoked(); len(revoked) != 1 || revoked[0] != tok3 {
		t.Fatal("token not revoked at Slack")
	}
	if e.CountRows(t, "slack_installations", "id = $1 AND encrypted_bot_token IS NULL", other.ID) != 1 {
		t.Fatal("sealed token kept after revocation")
	}
	if _, err := svc.SlackInstallationToken(ctx, tm.owner.OrgID, other.ID); !errors.Is(err, integrations.ErrNotFound) {
		t.Fatalf("revoked installation token: %v", err)
	}
	if got, err := svc.SlackBotToken(ctx, tm.owner.OrgID); err != nil || got.Value != tok2 {
		t.Fatalf("remaining workspace: %v", err)
	}
	// Uninstalling again changes nothing; Slack failing does not block it.
	e.Do(t, http.MethodDelete, "/slack/installations/"+other.ID, tm.admin.Token, nil).Expect(t, http.StatusOK, nil)
	e.slack.FailRevoke(true)
	e.Do(t, http.MethodDelete, "/slack/installations/"+si.ID, tm.owner.Token, nil).Expect(t, http.StatusOK, &rev)
	if rev.Status != "revoked" {
		t.Fatalf("%+v", rev)
	}
	if _, err := svc.SlackBotToken(ctx, tm.owner.OrgID); !errors.Is(err, integrations.ErrNotFound) {
		t.Fatalf("after uninstalling all: %v", err)
	}
	// Re-installing a revoked workspace reactivates it.
	back, _ := e.installSlack(t, tm.admin, "T2", http.StatusOK)
	if back.ID != other.ID || back.Status != "active" || back.RevokedAt != nil {
		t.Fatalf("%+v", back)
	}
	noLeak(t, "logs", e.Logs.String(), tok, tok2, tok3, slackSecret)
}

func TestSlackOAuthStateAndCode(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	other := e.NewUser(t)
	count := func() int { return e.CountRows(t, "slack_installations", "org_id = $1", tm.owner.OrgID) }
	code := "good-code"
	e.slack.AddCode(code, fakes.SlackInstall{TeamID: "T9", TeamName: "Nine", BotUserID: "U9"})
	install := func(u *apitest.User, code, state string) *apitest.Response {
		return e.Do(t, http.MethodPost, "/slack/installations", u.Token, map[string]any{"code": code, "state": state})
	}
	expectFields(t, install(tm.admin, code, "forged"), "state")
	expectFields(t, install(tm.admin, code, e.slackState(t, tm.owner, nil)), "state")           // another person's
	expectFields(t, install(tm.admin, code, e.slackState(t, other, map[string]any{})), "state") // another org's
	expectFields(t, install(tm.admin, "bad-code", e.slackState(t, tm.admin, nil)), "code")
	if count() != 0 || e.slack.Exchanges() != 1 {
		t.Fatalf("refused installs: %d rows, %d exchanges", count(), e.slack.Exchanges())
	}
	st := e.slackState(t, tm.admin, nil)
	install(tm.admin, code, st).Expect(t, http.StatusCreated, nil)
	expectFields(t, install(tm.admin, code, st), "state") // replayed state
	// Redirect URIs are limited to the platform's origins.
	for _, bad := range []string{"https://evil.example.com/cb", "javascript:alert(1)", "https://app.example.com.evil.com/x", "/relative"} {
		expectFields(t, e.Do(t, http.MethodPost, "/slack/oauth/state", tm.admin.Token, map[string]any{"redirect_uri": bad}), "redirect_uri")
	}
	e.Do(t, http.MethodPost, "/slack/oauth/state", tm.admin.Token, map[string]any{"redirect_uri": "https://app.example.com/settings"}).
		Expect(t, http.StatusCreated, nil)
	// Role matrix for creation.
	e.Do(t, http.MethodPost, "/slack/oauth/state", tm.member.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	e.Do(t, http.MethodPost, "/slack/installations", tm.member.Token, map[string]any{"code": "c", "state": "s"}).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)

	// Slack unreachable: 502 naming Slack.
	code2 := "code-2"
	e.slack.AddCode(code2, fakes.SlackInstall{TeamID: "T8", BotUserID: "U8"})
	down := apitest.New(t, []func(*api.Server) error{integrationsapi.RegisterWith(integrationsapi.Options{SlackClientID: "x", SlackClientSecret: "y"})},
		apitest.WithEnv("SLACK_API_URL", "http://127.0.0.1:1"))
	du := down.NewUser(t)
	var dst struct{ State string }
	down.Do(t, http.MethodPost, "/slack/oauth/state", du.Token, nil).Expect(t, http.StatusCreated, &dst)
	r := down.Do(t, http.MethodPost, "/slack/installations", du.Token, map[string]any{"code": code2, "state": dst.State})
	if body := r.ExpectError(t, http.StatusBadGateway, httpapi.CodeUnavailable); body.Error.Message != "slack is unavailable" {
		t.Fatalf("%s", r.Body)
	}
	// No Slack client configured: 503.
	plain := apitest.New(t, []func(*api.Server) error{integrationsapi.Register})
	pu := plain.NewUser(t)
	plain.Do(t, http.MethodPost, "/slack/oauth/state", pu.Token, nil).ExpectError(t, http.StatusServiceUnavailable, "not_configured")
	plain.Do(t, http.MethodPost, "/slack/installations", pu.Token, map[string]any{"code": "c", "state": "s"}).ExpectError(t, http.StatusServiceUnavailable, "not_configured")
}

func TestSlackInstallationsAreIsolatedBetweenOrgs(t *testing.T) {
	e := newEnv(t)
	a := e.NewUser(t)
	b := e.NewUser(t)
	si, tok := e.installSlack(t, a, "TA", http.StatusCreated)
	e.Do(t, http.MethodGet, "/slack/installations/"+si.ID, b.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodDelete, "/slack/installations/"+si.ID, b.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodGet, "/slack/installations/nope", a.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	var page api.Page[integrations.SlackInstallation]
	e.Do(t, http.MethodGet, "/slack/installations", b.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 0 {
		t.Fatalf("org B lists %+v", page.Items)
	}
	if e.CountRows(t, "slack_installations", "id = $1 AND status = 'active' AND encrypted_bot_token IS NOT NULL", si.ID) != 1 || len(e.slack.Revoked()) != 0 {
		t.Fatal("org B revoked org A's installation")
	}
	svc := e.svc(t)
	if _, err := svc.SlackBotToken(context.Background(), b.OrgID); !errors.Is(err, integrations.ErrNotFound) {
		t.Fatalf("org B got a token: %v", err)
	}
	if _, err := svc.SlackInstallationToken(context.Background(), b.OrgID, si.ID); !errors.Is(err, integrations.ErrNotFound) {
		t.Fatalf("org B got org A's token: %v", err)
	}
	// The same workspace installed by org B is its own row; a sealed token
	// copied across orgs does not open.
	sb, _ := e.installSlack(t, b, "TA", http.StatusCreated)
	if _, err := e.Deps.Pool.Exec(context.Background(), `UPDATE slack_installations SET encrypted_bot_token =
		(SELECT encrypted_bot_token FROM slack_installations WHERE id = $1) WHERE id = $2`, si.ID, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := svc.SlackBotToken(context.Background(), b.OrgID); err == nil || got.Value == tok {
		t.Fatal("a ciphertext copied from org A opened in org B")
	}
	noLeak(t, "logs", e.Logs.String(), tok)
}

func TestSlackRoutesRefuseInvalidInput(t *testing.T) {
	e := newEnv(t)
	u := e.NewUser(t)
	count := func() int { return e.CountRows(t, "slack_installations", "org_id = $1", u.OrgID) }
	e.expectBad(t, http.MethodPost, "/slack/installations", u.Token, append(genericBad(false),
		badBody{"missing", `{}`, 0, "", []string{"code", "state"}},
		badBody{"wrong types", `{"code": 1, "state": "s"}`, 0, "", []string{"code"}},
		badBody{"oversized", map[string]any{"code": strings.Repeat("c", 501), "state": strings.Repeat("s", 201)}, 0, "", []string{"code", "state"}},
	), count)
	e.expectBad(t, http.MethodPost, "/slack/oauth/state", u.Token, []badBody{
		{"malformed JSON", `{"a":`, http.StatusBadRequest, httpapi.CodeBadRequest, nil},
		{"unknown field", `{"bogus": 1}`, 0, "", []string{"bogus"}},
		{"wrong type", `{"redirect_uri": 5}`, 0, "", []string{"redirect_uri"}},
		{"oversized", map[string]any{"redirect_uri": publicURL + "/" + strings.Repeat("x", 2048)}, 0, "", []string{"redirect_uri"}},
	}, count)
}
