package repos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	reposapi "github.com/proliferate/proliferate/api/repos"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/repos"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// builderToken stands for the platform's service credential: the snapshot
// route is for Service principals, whose verifier the identity feature owns.
const builderToken = "test-builder-service-credential"

func builderVerifier(s *api.Server) error {
	s.AddVerifier(func(_ context.Context, bearer string) (*auth.Principal, bool, error) {
		if bearer != builderToken {
			return nil, false, nil
		}
		return &auth.Principal{Kind: auth.KindService, Service: "snapshot-builder"}, true, nil
	})
	return nil
}

func newEnv(t *testing.T) *apitest.Env {
	t.Helper()
	return apitest.New(t, []func(*api.Server) error{reposapi.Register, builderVerifier})
}

func createRepo(t *testing.T, env *apitest.Env, token, name string, extra map[string]any) reposapi.CreatedRepo {
	t.Helper()
	body := map[string]any{"github_repo_name": name, "create_configuration": false}
	for k, v := range extra {
		body[k] = v
	}
	var out reposapi.CreatedRepo
	env.Do(t, http.MethodPost, "/repos", token, body).Expect(t, http.StatusCreated, &out)
	return out
}

func createConfig(t *testing.T, env *apitest.Env, token string, body map[string]any) repos.Configuration {
	t.Helper()
	var out repos.Configuration
	env.Do(t, http.MethodPost, "/configurations", token, body).Expect(t, http.StatusCreated, &out)
	return out
}

func refs(ids ...string) []map[string]any {
	out := make([]map[string]any, len(ids))
	for i, id := range ids {
		out[i] = map[string]any{"repo_id": id}
	}
	return out
}

// expectInvalid asserts a 422 naming exactly the given fields (any order).
func expectInvalid(t *testing.T, resp *apitest.Response, fields ...string) []httpapi.FieldError {
	t.Helper()
	resp.ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
	var body struct {
		Error struct {
			Details []httpapi.FieldError `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Body, &body); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range body.Error.Details {
		got = append(got, d.Field)
	}
	slices.Sort(got)
	want := slices.Clone(fields)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("invalid fields %v, want %v; body %s", got, want, resp.Body)
	}
	return body.Error.Details
}

// rowJSON is a row as JSON, to prove a rejected request changed nothing.
func rowJSON(t *testing.T, env *apitest.Env, table, id string) string {
	t.Helper()
	var s string
	err := env.Deps.Pool.QueryRow(context.Background(),
		fmt.Sprintf(`SELECT row_to_json(t)::text FROM %s t WHERE id = $1`, table), id).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// configReposJSON is a configuration's repo links as JSON.
func configReposJSON(t *testing.T, env *apitest.Env, cfgID string) string {
	t.Helper()
	var s string
	err := env.Deps.Pool.QueryRow(context.Background(), `SELECT COALESCE(json_agg(json_build_array(repo_id, workspace_path, position)
		ORDER BY position), '[]')::text FROM configuration_repos WHERE configuration_id = $1`, cfgID).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const missingID = "00000000-0000-4000-8000-000000000000"
