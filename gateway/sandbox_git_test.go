package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
)

// The sandbox git routes answer the session's own sandbox only, and bad
// input is a 400 with the field before anything is looked up. (The happy
// path, the refusal of another repository and the real token are tested
// end to end in app: TestAgentPushesAndOpensAPullRequestFromTheSandbox.)
func TestSandboxGitRoutesAuthAndBadInput(t *testing.T) {
	w, g, owner, sid := newSessionWorld(t)
	other := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	tok, otherTok := w.sandboxToken(sid), w.sandboxToken(other)
	cred := func(token string, body any) (int, string) {
		st, b := call(t, http.MethodPost, g.url+"/proliferate/"+sid+"/git/credential", token, body, nil)
		return st, string(b)
	}
	pr := func(token string, body any) (int, string) {
		st, b := call(t, http.MethodPost, g.url+"/proliferate/"+sid+"/git/pull-requests", token, body, nil)
		return st, string(b)
	}
	good := map[string]any{"protocol": "https", "host": "github.com", "path": "acme/app.git"}
	goodPR := map[string]any{"remote_url": "https://github.com/acme/app.git", "head": "agent/x", "title": "Fix"}

	for name, c := range map[string]struct {
		token string
		want  int
	}{"no token": {"", 401}, "a person": {owner.Token, 403}, "another session's sandbox": {otherTok, 404}} {
		if st, b := cred(c.token, good); st != c.want {
			t.Errorf("credential, %s: %d %s", name, st, b)
		}
		if st, b := pr(c.token, goodPR); st != c.want {
			t.Errorf("pull request, %s: %d %s", name, st, b)
		}
	}

	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"protocol": "ssh", "host": "github.com", "path": "a/b.git"}, "protocol"},
		{map[string]any{"protocol": "https", "host": "", "path": "a/b.git"}, "host"},
		{map[string]any{"protocol": "https", "host": "evil.com/x", "path": "a/b.git"}, "host"},
		{map[string]any{"protocol": "https", "host": "github.com", "path": ""}, "path"},
	} {
		st, b := cred(tok, c.body)
		if st != http.StatusUnprocessableEntity || !strings.Contains(b, `"`+c.field+`"`) {
			t.Errorf("credential %v: %d %s, want 422 on %s", c.body, st, b, c.field)
		}
	}
	if st, b := cred(tok, map[string]any{"protocol": "https", "host": "github.com", "path": "a/b", "password": "x"}); st/100 != 4 {
		t.Errorf("unknown field: %d %s", st, b)
	}
	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"remote_url": "/tmp/repo", "head": "x", "title": "t"}, "remote_url"},
		{map[string]any{"remote_url": "https://github.com/a/b.git", "head": "x", "title": " "}, "title"},
		{map[string]any{"remote_url": "https://github.com/a/b.git", "head": "x", "title": strings.Repeat("t", 257)}, "title"},
		{map[string]any{"remote_url": "https://github.com/a/b.git", "head": "", "title": "t"}, "head"},
		{map[string]any{"remote_url": "https://github.com/a/b.git", "head": "a..b", "title": "t"}, "head"},
		{map[string]any{"remote_url": "https://github.com/a/b.git", "head": "x", "base": "-evil", "title": "t"}, "base"},
		{map[string]any{"remote_url": "https://github.com/a/b.git", "head": "x", "title": "t", "body": strings.Repeat("b", 65537)}, "body"},
	} {
		st, b := pr(tok, c.body)
		var e struct {
			Error struct {
				Details []struct {
					Field string `json:"field"`
				} `json:"details"`
			} `json:"error"`
		}
		_ = json.Unmarshal([]byte(b), &e)
		if st != http.StatusUnprocessableEntity || len(e.Error.Details) == 0 || e.Error.Details[0].Field != c.field {
			t.Errorf("pull request %v: %d %.300s, want 422 on %s", c.body["head"], st, b, c.field)
		}
	}
	// Valid requests on a gateway without repository access: 503.
	if st, b := cred(tok, good); st != http.StatusServiceUnavailable {
		t.Errorf("credential without repository access: %d %s", st, b)
	}
	if strings.Contains(w.logs.String(), tok) {
		t.Fatal("the sandbox token was logged")
	}
}
