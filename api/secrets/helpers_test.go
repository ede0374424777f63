package secrets_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	secretsapi "github.com/proliferate/proliferate/api/secrets"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/secrets"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// tenv is the API plus a record of every secret value a test stored and every
// response body it read, so the leak check can look for each value in each
// body and in the logs.
type tenv struct {
	*apitest.Env
	mu     sync.Mutex
	values []string
	bodies [][]byte
}

func newEnv(t *testing.T) *tenv {
	t.Helper()
	e := &tenv{Env: apitest.New(t, []func(*api.Server) error{secretsapi.Register})}
	t.Cleanup(func() { e.assertNoLeaks(t) })
	return e
}

// value makes a recognisable secret value and remembers it.
func (e *tenv) value(label string) string {
	v := apitest.Unique("sv-" + label + "-")
	e.mu.Lock()
	e.values = append(e.values, v)
	e.mu.Unlock()
	return v
}

// do sends a request and keeps its response body for the leak check.
func (e *tenv) do(t testing.TB, method, path, token string, body any) *apitest.Response {
	t.Helper()
	r := e.Do(t, method, path, token, body)
	e.mu.Lock()
	e.bodies = append(e.bodies, r.Body)
	e.mu.Unlock()
	return r
}

// assertNoLeaks: no stored value appears in any response body, in the logs,
// in the audit log, or in plaintext in the secrets table.
func (e *tenv) assertNoLeaks(t *testing.T) {
	e.mu.Lock()
	defer e.mu.Unlock()
	logs := e.Logs.String()
	var audit strings.Builder
	rows, err := e.Deps.Pool.Query(context.Background(), `SELECT details::text FROM audit_log UNION ALL SELECT encrypted_value FROM secrets`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		audit.WriteString(s)
	}
	rows.Close()
	for _, v := range e.values {
		for _, b := range e.bodies {
			if strings.Contains(string(b), v) {
				t.Errorf("a response body contains secret value %q: %s", v, b)
			}
		}
		if strings.Contains(logs, v) {
			t.Errorf("the logs contain secret value %q", v)
		}
		if strings.Contains(audit.String(), v) {
			t.Errorf("audit log or ciphertext contains secret value %q", v)
		}
	}
}

func (e *tenv) newRepo(t *testing.T, orgID string) string {
	t.Helper()
	var id string
	err := e.Deps.Pool.QueryRow(context.Background(), `INSERT INTO repos (org_id, github_repo_name) VALUES ($1, $2) RETURNING id::text`,
		orgID, apitest.Unique("acme/repo-")).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (e *tenv) createSecret(t *testing.T, token string, body map[string]any) secrets.Secret {
	t.Helper()
	var s secrets.Secret
	e.do(t, http.MethodPost, "/secrets", token, body).Expect(t, http.StatusCreated, &s)
	return s
}

func (e *tenv) createBundle(t *testing.T, token string, body map[string]any) secrets.Bundle {
	t.Helper()
	var b secrets.Bundle
	e.do(t, http.MethodPost, "/secret-bundles", token, body).Expect(t, http.StatusCreated, &b)
	return b
}

// resolve decrypts what a session would get.
func (e *tenv) resolve(t *testing.T, orgID, repoID string) map[string]string {
	t.Helper()
	env, err := secrets.Resolve(context.Background(), e.Deps.Pool, e.Deps.Box, orgID, repoID)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func (e *tenv) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	return e.CountRows(t, "secrets", where, args...)
}

func fieldNames(t *testing.T, body httpapi.ErrorBody) []string {
	t.Helper()
	raw, ok := body.Error.Details.([]any)
	if !ok {
		t.Fatalf("details are not a list: %#v", body.Error.Details)
	}
	var out []string
	for _, d := range raw {
		m, _ := d.(map[string]any)
		out = append(out, fmt.Sprint(m["field"]))
	}
	return out
}
