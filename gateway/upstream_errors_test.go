package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/gitops"
	"github.com/proliferate/proliferate/gateway/gitops/gitopstest"
	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/internal/actions/catalog"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/integrations/fakes"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// Upstream failures are 502/503 with the stable error shape, never 500:
// each case was a 500 before.

// expectUpstream checks an upstream failure's answer: status, code, the
// error shape with a request id, and no 500.
func expectUpstream(t *testing.T, what string, st int, body []byte, status int, code string) {
	t.Helper()
	var eb httpapi.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil || st != status || eb.Error.Code != code || eb.Error.Message == "" || eb.Error.RequestID == "" {
		t.Fatalf("%s: %d %s, want %d %s in the error shape", what, st, body, status, code)
	}
}

// The OpenCode proxy: the agent's 5xx is the gateway's 502 agent_failed
// (the agent's body, naming its internals, is not passed on); its 4xx
// answers still pass through untouched.
func TestProxyAgentFailureIsABadGateway(t *testing.T) {
	w := newWorld(t)
	prov := newRecordingProvider(t)
	g := w.startWith(t, "a", prov, nil)
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})

	for _, st := range []string{"500", "503"} {
		resp, body := testenv.Request(t, "GET", proxyURL(g, sid, owner.Token, "session/status"), "", map[string]string{"X-Test-Agent-Status": st})
		expectUpstream(t, "agent "+st, resp.StatusCode, body, http.StatusBadGateway, "agent_failed")
		if strings.Contains(string(body), "agent-internal-stack") {
			t.Fatalf("the agent's error body reached the client: %s", body)
		}
	}
	resp, body := testenv.Request(t, "GET", proxyURL(g, sid, owner.Token, "session/status"), "", map[string]string{"X-Test-Agent-Status": "404"})
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "UnknownError") {
		t.Fatalf("agent 404: %d %s, want it passed through", resp.StatusCode, body)
	}
	// And the proxy still works.
	if resp, body := testenv.Request(t, "GET", proxyURL(g, sid, owner.Token, "session/status"), "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("after failures: %d %s", resp.StatusCode, body)
	}
}

// POST /git/pr with GitHub unreachable, GitHub failing (5xx) or the
// repository's credentials unobtainable: 502 github_unavailable / 503
// credentials_unavailable, with Retry-After; GitHub refusing the request
// (4xx) stays a 422.
func TestGitPRUpstreamFailures(t *testing.T) {
	w := newWorld(t)
	ws, repo := widgetWorkspace(t)
	gitopstest.Git(t, repo, "checkout", "-q", "-b", "feature")

	var githubStatus int // what the GitHub stand-in answers; 0: unreachable
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close() // connection refused from now on
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(githubStatus)
		_, _ = w.Write([]byte(`{"message":"Validation Failed","errors":[{"message":"A pull request already exists"}]}`))
	}))
	t.Cleanup(failing.Close)
	gh := &gitops.GitHub{BaseURL: downURL, HTTP: &http.Client{Timeout: 5 * time.Second}}
	tokenErr := error(nil)
	gh.Tokens = gitops.TokenSourceFunc(func(context.Context, string, string, string) (string, error) {
		return "ghs_test", tokenErr
	})
	g := w.startWith(t, "git", &dirExecProvider{countingProvider: w.prov, DirExec: &gitopstest.DirExec{Root: ws}},
		func(d *hub.Deps) { d.Git = hub.GitDeps{GitHub: gh} })
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	pr := func() (int, []byte, http.Header) {
		resp, body := testenv.Request(t, "POST", g.url+"/proliferate/"+sid+"/git/pr", `{"workspace_path":"widget","title":"Add panel"}`,
			map[string]string{"Authorization": "Bearer " + owner.Token, "Content-Type": "application/json"})
		return resp.StatusCode, body, resp.Header
	}

	st, body, hdr := pr()
	expectUpstream(t, "GitHub unreachable", st, body, http.StatusBadGateway, "github_unavailable")
	if hdr.Get("Retry-After") == "" {
		t.Fatal("no Retry-After on github_unavailable")
	}
	gh.BaseURL = failing.URL
	githubStatus = http.StatusInternalServerError
	st, body, _ = pr()
	expectUpstream(t, "GitHub 500", st, body, http.StatusBadGateway, "github_unavailable")
	githubStatus = http.StatusUnprocessableEntity
	st, body, _ = pr()
	expectUpstream(t, "GitHub 422", st, body, http.StatusUnprocessableEntity, "git_failed")
	tokenErr = errors.New("installation token: dial tcp: connection refused")
	st, body, _ = pr()
	expectUpstream(t, "no credentials", st, body, http.StatusServiceUnavailable, "credentials_unavailable")
	if strings.Contains(string(body), "ghs_test") || strings.Contains(w.logs.String(), "ghs_test") {
		t.Fatal("the token leaked")
	}
}

// The actions guide of an integration whose credentials cannot be
// obtained (the real catalog, Nango's API answering 503): 502 naming the
// provider, never the credential, instead of a 500.
func TestActionsGuideWithoutUsableCredentials(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	d := w.api.Deps
	nango := fakes.NewNango(t, "nango-secret", map[string]string{"linear": "linear"}, nil)
	cfg := *d.Cfg
	cfg.NangoURL, cfg.NangoSecretKey = nango.URL, "nango-secret"
	integ, err := integrations.New(integrations.Options{Cfg: &cfg, Pool: d.Pool, Redis: d.Redis, Box: d.Box,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	cat := catalog.New(catalog.Deps{Pool: d.Pool, Integrations: integ, Secrets: catalog.OrgSecrets{Pool: d.Pool, Box: d.Box},
		MCP: catalog.MCPOptions{ListTimeout: 5 * time.Second, CallTimeout: 5 * time.Second}})
	t.Cleanup(func() { _ = cat.Close() })
	g := w.startActionsWith(t, "a", cat, nil)

	owner := w.api.NewUser(t)
	nango.AddConnection(fakes.NangoConnection{ConnectionID: "lin-conn-guide", ConfigKey: "linear", Provider: "linear", AccessToken: "lin_tok_secret"})
	if _, err := d.Pool.Exec(ctx, `INSERT INTO integrations (org_id, provider, integration_id, connection_id, provider_config_key, created_by)
		VALUES ($1, 'nango', 'linear', 'lin-conn-guide', 'linear', $2)`, owner.OrgID, owner.ID); err != nil {
		t.Fatal(err)
	}
	sid := sessionstest.New(t, d.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	sbx := w.sandboxToken(sid)
	if st, body := call(t, "GET", actionsURL(g, sid, "guide/linear"), sbx, nil, nil); st != http.StatusOK {
		t.Fatalf("guide with credentials: %d %s", st, body)
	}
	nango.Fail(http.StatusServiceUnavailable)
	st, body := call(t, "GET", actionsURL(g, sid, "guide/linear"), sbx, nil, nil)
	expectUpstream(t, "guide without credentials", st, body, http.StatusBadGateway, httpapi.CodeUnavailable)
	if !strings.Contains(string(body), "linear") || strings.Contains(string(body), "lin_tok") {
		t.Fatalf("guide error should name the provider and no token: %s", body)
	}
}
