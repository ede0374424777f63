package integrations_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	integrationsapi "github.com/proliferate/proliferate/api/integrations"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/integrations/fakes"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	appID         = "4242"
	nangoSecret   = "nango-secret-key-do-not-leak"
	slackClientID = "123.456"
	slackSecret   = "slack-client-secret-do-not-leak"
	sentryToken   = "sntrys_oauth_token_do_not_leak"
	linearToken   = "lin_oauth_token_do_not_leak"
	publicURL     = "https://app.example.com"
)

var (
	keyOnce sync.Once
	appKey  *rsa.PrivateKey
)

func key() *rsa.PrivateKey {
	keyOnce.Do(func() {
		var err error
		if appKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
	})
	return appKey
}

func keyPEM() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key())}))
}

// env is the API with every third party faked.
type env struct {
	*apitest.Env
	gh     *fakes.GitHub
	nango  *fakes.Nango
	slack  *fakes.Slack
	sentry *fakes.Sentry
	linear *fakes.Linear
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{
		gh:     fakes.NewGitHub(t, appID, &key().PublicKey, nil),
		nango:  fakes.NewNango(t, nangoSecret, map[string]string{"github": "github", "sentry": "sentry", "linear": "linear"}, nil),
		slack:  fakes.NewSlack(t, slackClientID, slackSecret),
		sentry: fakes.NewSentry(t, sentryToken),
		linear: fakes.NewLinear(t, linearToken, linearData()),
	}
	e.Env = apitest.New(t, []func(*api.Server) error{
		integrationsapi.RegisterWith(integrationsapi.Options{SlackClientID: slackClientID, SlackClientSecret: slackSecret}),
	}, apitest.WithEnv(
		"GITHUB_APP_ID", appID, "GITHUB_APP_PRIVATE_KEY", keyPEM(), "GITHUB_API_URL", e.gh.URL,
		"NANGO_URL", e.nango.URL, "NANGO_SECRET_KEY", nangoSecret,
		"SENTRY_API_URL", e.sentry.URL, "LINEAR_API_URL", e.linear.URL, "SLACK_API_URL", e.slack.URL,
		"PUBLIC_URL", publicURL,
	))
	return e
}

// svc is a domain service over the same database and keys (for checks the
// API does not expose, like SlackBotToken).
func (e *env) svc(t *testing.T) *integrations.Service {
	t.Helper()
	s, err := integrations.New(integrations.Options{Cfg: e.Deps.Cfg, Pool: e.Deps.Pool, Redis: e.Deps.Redis, Box: e.Deps.Box,
		Log: e.Deps.Log, SlackClientID: slackClientID, SlackClientSecret: slackSecret})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// team is an org with an owner, an admin and a member.
type team struct {
	owner, admin, member *apitest.User
}

func (e *env) team(t *testing.T) team {
	t.Helper()
	tm := team{owner: e.NewUser(t), admin: e.NewUser(t), member: e.NewUser(t)}
	e.AddMember(t, tm.admin, tm.owner.OrgID, auth.RoleAdmin)
	e.AddMember(t, tm.member, tm.owner.OrgID, auth.RoleMember)
	return tm
}

var installSeq struct {
	sync.Mutex
	n int64
}

func nextInstallation() int64 {
	installSeq.Lock()
	defer installSeq.Unlock()
	installSeq.n++
	return 90000 + installSeq.n
}

// githubIntegration installs the GitHub App for u's org through the API.
func (e *env) githubIntegration(t *testing.T, u *apitest.User, visibility string) integrations.Integration {
	t.Helper()
	id := nextInstallation()
	e.gh.AddInstallation(fakes.GitHubInstallation{ID: id, Login: "acct" + apitest.Unique("")})
	var it integrations.Integration
	e.Do(t, http.MethodPost, "/integrations/github-app", u.Token, map[string]any{
		"installation_id": id, "state": e.githubState(t, u), "visibility": visibility,
	}).Expect(t, http.StatusCreated, &it)
	return it
}

func (e *env) githubState(t *testing.T, u *apitest.User) string {
	t.Helper()
	var st struct{ State string }
	e.Do(t, http.MethodPost, "/integrations/github-app/state", u.Token, nil).Expect(t, http.StatusCreated, &st)
	return st.State
}

// nangoIntegration completes a Nango connect flow of preset for u's org.
func (e *env) nangoIntegration(t *testing.T, u *apitest.User, preset, token string) integrations.Integration {
	t.Helper()
	connID := apitest.Unique("conn-")
	e.nango.AddConnection(fakes.NangoConnection{ConnectionID: connID, ConfigKey: preset, AccessToken: token,
		EndUserID: u.ID, EndUserOrgID: u.OrgID})
	var it integrations.Integration
	e.Do(t, http.MethodPost, "/integrations/nango", u.Token, map[string]any{
		"connection_id": connID, "provider_config_key": preset,
	}).Expect(t, http.StatusCreated, &it)
	return it
}

// repo inserts a repo into org.
func (e *env) repo(t *testing.T, orgID string) (id, name string) {
	t.Helper()
	name = "acme/" + apitest.Unique("repo")
	err := e.Deps.Pool.QueryRow(context.Background(), `INSERT INTO repos (org_id, github_repo_name) VALUES ($1, $2) RETURNING id::text`,
		orgID, name).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id, name
}

// secret inserts an org-wide (repoID "") or repo-scoped secret key.
func (e *env) secret(t *testing.T, orgID, key, repoID string) {
	t.Helper()
	var repo any
	if repoID != "" {
		repo = repoID
	}
	if _, err := e.Deps.Pool.Exec(context.Background(), `INSERT INTO secrets (org_id, key, repo_id, encrypted_value)
		VALUES ($1, $2, $3, 'v1.dev.placeholder')`, orgID, key, repo); err != nil {
		t.Fatal(err)
	}
}

func sandboxToken(t *testing.T, e *env) string {
	t.Helper()
	_, tok := e.SandboxToken(t, e.NewUser(t).OrgID)
	return tok
}

// expectFields asserts a 422 naming exactly these fields (in any order).
func expectFields(t *testing.T, r *apitest.Response, fields ...string) {
	t.Helper()
	body := r.ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
	raw, _ := json.Marshal(body.Error.Details)
	var details []httpapi.FieldError
	_ = json.Unmarshal(raw, &details)
	got := map[string]bool{}
	for _, d := range details {
		got[d.Field] = true
	}
	for _, f := range fields {
		if !got[f] {
			t.Fatalf("422 does not name %q: %s", f, r.Body)
		}
	}
	if len(got) != len(fields) {
		t.Fatalf("422 names %v, want %v: %s", details, fields, r.Body)
	}
}

// badBody is an invalid request and the answer it must get.
type badBody struct {
	name   string
	body   any // string bodies are sent raw
	status int
	code   string
	fields []string
}

// genericBad are the malformed bodies every JSON route must refuse.
func genericBad(unknownOK bool) []badBody {
	out := []badBody{
		{"malformed JSON", `{"a":`, http.StatusBadRequest, httpapi.CodeBadRequest, nil},
		{"empty body", ``, http.StatusBadRequest, httpapi.CodeBadRequest, nil},
		{"not an object", `[1,2]`, http.StatusUnprocessableEntity, httpapi.CodeValidation, []string{"(body)"}},
		{"trailing data", `{} {}`, http.StatusBadRequest, httpapi.CodeBadRequest, nil},
	}
	if !unknownOK {
		out = append(out, badBody{"unknown field", `{"bogus": 1}`, http.StatusUnprocessableEntity, httpapi.CodeValidation, []string{"bogus"}})
	}
	return out
}

// expectBad sends every case and checks the answer; count must not change.
func (e *env) expectBad(t *testing.T, method, path, token string, cases []badBody, count func() int) {
	t.Helper()
	before := count()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.Do(t, method, path, token, c.body)
			if c.fields != nil {
				expectFields(t, r, c.fields...)
			} else {
				r.ExpectError(t, c.status, c.code)
			}
		})
	}
	r := e.DoWith(t, method, path, token, []byte(`{}`), map[string]string{"Content-Type": "text/plain"})
	r.ExpectError(t, http.StatusUnsupportedMediaType, httpapi.CodeUnsupportedMedia)
	if after := count(); after != before {
		t.Fatalf("rejected requests wrote rows: %d → %d", before, after)
	}
}

// noLeak asserts none of the secrets appear in s.
func noLeak(t *testing.T, where, s string, secrets ...string) {
	t.Helper()
	for _, sec := range secrets {
		if sec != "" && strings.Contains(s, sec) {
			t.Fatalf("%s contains a secret (%.12s…)", where, sec)
		}
	}
}
