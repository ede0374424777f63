package fakes

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/proliferate/proliferate/internal/fakekit"
)

// SlackInstall is what an authorization code grants.
type SlackInstall struct {
	TeamID, TeamName, BotUserID, AppID, Scope string
	RedirectURI                               string // required redirect_uri, if any
	Token                                     string // minted when empty
}

// Slack fakes the Slack Web API methods oauth.v2.access (client credentials
// in HTTP Basic auth or the form, single-use codes) and auth.revoke (bearer
// token). Like Slack, it answers HTTP 200 with {"ok": false, "error": …} on
// failures.
type Slack struct {
	URL                    string
	clientID, clientSecret string

	mu         sync.Mutex
	codes      map[string]SlackInstall
	active     map[string]bool // bot tokens not revoked
	revoked    []string
	failRevoke bool
	exchanges  int
	authorize  *SlackInstall // SetAuthorizeInstall (browserpages.go)
}

// NewSlack starts the fake for one Slack app.
func NewSlack(t fakekit.TB, clientID, clientSecret string) *Slack {
	s := &Slack{clientID: clientID, clientSecret: clientSecret, codes: map[string]SlackInstall{}, active: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// AddCode makes code exchangeable once for in; it returns the bot token the
// exchange will yield.
func (s *Slack) AddCode(code string, in SlackInstall) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in.Token == "" {
		in.Token = "xoxb-" + randomHex(12)
	}
	if in.Scope == "" {
		in.Scope = "chat:write,channels:read"
	}
	if in.AppID == "" {
		in.AppID = "A0TEST"
	}
	s.codes[code] = in
	return in.Token
}

// FailRevoke makes auth.revoke fail.
func (s *Slack) FailRevoke(fail bool) { s.mu.Lock(); s.failRevoke = fail; s.mu.Unlock() }

// Revoked returns the tokens revoked through auth.revoke.
func (s *Slack) Revoked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.revoked...)
}

// Exchanges counts oauth.v2.access calls with valid client credentials.
func (s *Slack) Exchanges() int { s.mu.Lock(); defer s.mu.Unlock(); return s.exchanges }

func slackFail(w http.ResponseWriter, code string) {
	writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": code})
}

func (s *Slack) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/oauth/v2/authorize" && r.Method == http.MethodGet {
		s.serveAuthorize(w, r)
		return
	}
	if r.Method != http.MethodPost {
		slackFail(w, "invalid_request")
		return
	}
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		slackFail(w, "invalid_form_data")
		return
	}
	if err := r.ParseForm(); err != nil {
		slackFail(w, "invalid_form_data")
		return
	}
	switch r.URL.Path {
	case "/oauth.v2.access":
		s.oauthAccess(w, r)
	case "/auth.revoke":
		s.revoke(w, r)
	default:
		slackFail(w, "unknown_method")
	}
}

func (s *Slack) oauthAccess(w http.ResponseWriter, r *http.Request) {
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if id != s.clientID {
		slackFail(w, "invalid_client_id")
		return
	}
	if secret != s.clientSecret {
		slackFail(w, "bad_client_secret")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exchanges++
	code := r.PostForm.Get("code")
	in, ok := s.codes[code]
	if !ok {
		slackFail(w, "invalid_code")
		return
	}
	if in.RedirectURI != "" && r.PostForm.Get("redirect_uri") != in.RedirectURI {
		slackFail(w, "bad_redirect_uri")
		return
	}
	delete(s.codes, code)
	s.active[in.Token] = true
	writeJSON(w, http.StatusOK, map[string]any{
		"ok": true, "access_token": in.Token, "token_type": "bot", "scope": in.Scope, "bot_user_id": in.BotUserID,
		"app_id": in.AppID, "team": map[string]any{"name": in.TeamName, "id": in.TeamID}, "enterprise": nil,
		"authed_user": map[string]any{"id": "U0INSTALLER"}, "is_enterprise_install": false,
	})
}

func (s *Slack) revoke(w http.ResponseWriter, r *http.Request) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		tok = r.PostForm.Get("token")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failRevoke {
		slackFail(w, "internal_error")
		return
	}
	if !s.active[tok] {
		slackFail(w, "invalid_auth")
		return
	}
	delete(s.active, tok)
	s.revoked = append(s.revoked, tok)
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "revoked": true})
}
