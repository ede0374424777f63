package identity_test

import (
	"net/http"
	"testing"
)

func TestOpenAPIDocumentsTheRoutes(t *testing.T) {
	env := newEnv(t)
	var doc struct {
		Paths map[string]map[string]struct {
			Tags        []string `json:"tags"`
			RequestBody *struct {
				Content map[string]struct {
					Schema struct {
						Required   []string       `json:"required"`
						Properties map[string]any `json:"properties"`
					} `json:"schema"`
				} `json:"content"`
			} `json:"requestBody"`
			Security []map[string][]string `json:"security"`
		} `json:"paths"`
	}
	env.Do(t, "GET", "/openapi.json", "", nil).Expect(t, http.StatusOK, &doc)
	for _, want := range []struct {
		path, method string
		public       bool
	}{
		{"/api/v1/auth/signup", "post", true}, {"/api/v1/auth/login", "post", true}, {"/api/v1/auth/refresh", "post", true},
		{"/api/v1/auth/logout", "post", false}, {"/api/v1/auth/verify-email", "post", true},
		{"/api/v1/auth/resend-verification", "post", false}, {"/api/v1/me", "get", false},
		{"/api/v1/api-keys", "post", false}, {"/api/v1/api-keys", "get", false}, {"/api/v1/api-keys/{id}", "delete", false},
		{"/api/v1/auth/password-reset/request", "post", true}, {"/api/v1/auth/password-reset", "post", true},
	} {
		op, ok := doc.Paths[want.path][want.method]
		if !ok {
			t.Errorf("%s %s not documented", want.method, want.path)
			continue
		}
		if len(op.Tags) != 1 || op.Tags[0] != "identity" {
			t.Errorf("%s %s tags %v", want.method, want.path, op.Tags)
		}
		if (len(op.Security) == 0) != want.public {
			t.Errorf("%s %s: security %v, public %v", want.method, want.path, op.Security, want.public)
		}
	}
	signup := doc.Paths["/api/v1/auth/signup"]["post"].RequestBody.Content["application/json"].Schema
	if len(signup.Required) != 3 || signup.Properties["password"] == nil {
		t.Errorf("signup schema %+v", signup)
	}
}
