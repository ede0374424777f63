package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/app"
	"github.com/proliferate/proliferate/internal/obs"
)

// The API the binary serves, with every module registered: every route is in
// the OpenAPI document, every non-public route demands a credential, and a new
// user can sign up and use org-scoped resources of several modules.
func TestAPIServesEveryModuleAndDocumentsEveryRoute(t *testing.T) {
	a := app.New(devConfig(t, filepath.Join(t.TempDir(), "kafka")), obs.NewLogger(io.Discard, "error", "text"))
	defer a.Close()
	s, err := a.APIServer(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	call := func(method, path, token string, body any) (int, map[string]any) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, srv.URL+api.Prefix+path, rd)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}

	_, doc := call("GET", "/openapi.json", "", nil)
	paths := doc["paths"].(map[string]any)
	documented := 0
	declared := map[string]api.Access{}
	for _, r := range s.Routes() {
		declared[r.Method+" "+r.Path] = r.Access
	}
	for _, r := range s.Engine().Routes() {
		if r.Path == api.Prefix+"/openapi.json" {
			continue
		}
		ops, _ := paths[api.OpenAPIPath(r.Path)].(map[string]any)
		if _, ok := ops[strings.ToLower(r.Method)]; !ok {
			t.Errorf("%s %s is served but not documented", r.Method, r.Path)
			continue
		}
		documented++
		// Without a credential, only public routes answer anything but 401.
		access, ok := declared[r.Method+" "+strings.TrimPrefix(r.Path, api.Prefix)]
		if !ok {
			t.Errorf("%s %s was registered outside Server.Handle", r.Method, r.Path)
			continue
		}
		if access != api.Public {
			path := strings.NewReplacer(":id", "00000000-0000-0000-0000-000000000000").Replace(strings.TrimPrefix(r.Path, api.Prefix))
			for _, seg := range strings.Split(path, "/") {
				if strings.HasPrefix(seg, ":") {
					path = strings.Replace(path, seg, "00000000-0000-0000-0000-000000000000", 1)
				}
			}
			if code, _ := call(r.Method, path, "", nil); code != http.StatusUnauthorized {
				t.Errorf("%s %s without credentials answered %d, want 401", r.Method, r.Path, code)
			}
		}
	}
	if documented < 80 {
		t.Fatalf("only %d routes served; are all modules registered?", documented)
	}

	// A new user: sign up, create a repo and a secret in their personal org,
	// see them listed, and find the secret by existence check only.
	code, signup := call("POST", "/auth/signup", "", map[string]any{"email": fmt.Sprintf("new.user.%d@example.com", time.Now().UnixNano()),
		"password": "correct horse battery", "name": "New User"})
	if code != http.StatusCreated {
		t.Fatalf("signup: %d %v", code, signup)
	}
	token, _ := signup["access_token"].(string)
	if token == "" {
		t.Fatalf("signup returned no access token: %v", signup)
	}
	if code, body := call("POST", "/repos", token, map[string]any{"github_repo_name": "acme/web"}); code != http.StatusCreated {
		t.Fatalf("create repo: %d %v", code, body)
	}
	if code, body := call("POST", "/secrets", token, map[string]any{"key": "API_TOKEN", "value": "s3cr3t-value"}); code != http.StatusCreated {
		t.Fatalf("create secret: %d %v", code, body)
	}
	code, check := call("POST", "/secrets/check", token, map[string]any{"keys": []string{"API_TOKEN", "MISSING"}})
	if code != http.StatusOK || check["API_TOKEN"] != true || check["MISSING"] != false {
		t.Fatalf("check: %d %v", code, check)
	}
	code, list := call("GET", "/secrets", token, nil)
	raw, _ := json.Marshal(list)
	if code != http.StatusOK || strings.Contains(string(raw), "s3cr3t-value") || !strings.Contains(string(raw), "API_TOKEN") {
		t.Fatalf("list secrets: %d %s", code, raw)
	}
}
