package repos_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/repos"
)

func TestSnapshotTransitionMatrix(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	repo := createRepo(t, env, o.Admin.Token, "acme/app", nil)
	cfg := createConfig(t, env, o.Admin.Token, map[string]any{"name": "x", "repos": refs(repo.ID)})

	allowed := map[string][]string{
		"none":     {"building", "ready"},
		"building": {"building", "default", "ready", "failed"},
		"default":  {"building", "ready"},
		"ready":    {"building", "ready"},
		"failed":   {"building", "ready"},
	}
	bodies := map[string]map[string]any{
		"none":     {"status": "none"},
		"building": {"status": "building"},
		"default":  {"status": "default", "snapshot_id": "snap-default", "provider": "modal"},
		"ready":    {"status": "ready", "snapshot_id": "snap-ready", "provider": "e2b"},
		"failed":   {"status": "failed", "error": "clone failed: repository not found"},
	}
	for _, from := range repos.SnapshotStatuses {
		for _, to := range repos.SnapshotStatuses {
			t.Run(from+"->"+to, func(t *testing.T) {
				// The state "from", with a previous snapshot unless it is "none"
				// (building and failed: a rebuild of an earlier snapshot).
				env.Exec(t, `UPDATE configurations SET snapshot_status = $2,
						snapshot_id = CASE WHEN $2 <> 'none' THEN 'snap-old' END,
						snapshot_error = CASE WHEN $2 = 'failed' THEN 'old error' END,
						snapshot_repos_version = CASE WHEN $2 <> 'none' THEN repos_version END,
						building_repos_version = CASE WHEN $2 = 'building' THEN repos_version END
					WHERE id = $1`, cfg.ID, from)
				before := rowJSON(t, env, "configurations", cfg.ID)
				resp := env.Do(t, http.MethodPatch, "/configurations/"+cfg.ID+"/snapshot", builderToken, bodies[to])
				ok := false
				for _, a := range allowed[from] {
					ok = ok || a == to
				}
				if !ok {
					body := resp.ExpectError(t, http.StatusConflict, "invalid_transition")
					if !strings.Contains(body.Error.Message, from) || !strings.Contains(body.Error.Message, to) {
						t.Fatalf("message: %q", body.Error.Message)
					}
					if rowJSON(t, env, "configurations", cfg.ID) != before {
						t.Fatal("a refused transition changed the configuration")
					}
					return
				}
				var got repos.Configuration
				resp.Expect(t, http.StatusOK, &got)
				if got.SnapshotStatus != to || got.ID != cfg.ID || len(got.Repos) != 1 {
					t.Fatalf("after: %+v", got)
				}
				switch to {
				case "building":
					wantID := from != "none"
					if got.SnapshotError != nil || got.SnapshotBuildStartedAt == nil || (got.SnapshotID != nil) != wantID {
						t.Fatalf("building: %+v", got)
					}
				case "default", "ready":
					if got.SnapshotID == nil || *got.SnapshotID != bodies[to]["snapshot_id"] || got.SnapshotProvider == nil ||
						*got.SnapshotProvider != bodies[to]["provider"] || got.SnapshotBuiltAt == nil || got.SnapshotError != nil || got.SnapshotStale {
						t.Fatalf("built: %+v", got)
					}
				case "failed":
					if got.SnapshotError == nil || *got.SnapshotError != bodies[to]["error"] || got.SnapshotID == nil || *got.SnapshotID != "snap-old" {
						t.Fatalf("failed keeps the previous snapshot: %+v", got)
					}
				}
			})
		}
	}
}

func TestSnapshotReportValidation(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	repo := createRepo(t, env, o.Admin.Token, "acme/app", nil)
	cfg := createConfig(t, env, o.Admin.Token, map[string]any{"name": "x", "repos": refs(repo.ID)})
	env.Exec(t, `UPDATE configurations SET snapshot_status = 'building' WHERE id = $1`, cfg.ID)
	row := rowJSON(t, env, "configurations", cfg.ID)
	path := "/configurations/" + cfg.ID + "/snapshot"
	for name, c := range map[string]struct {
		body   any
		fields []string
	}{
		"missing status":          {map[string]any{}, []string{"status"}},
		"unknown status":          {map[string]any{"status": "done"}, []string{"status"}},
		"default without id":      {map[string]any{"status": "default"}, []string{"snapshot_id"}},
		"ready without id":        {map[string]any{"status": "ready", "provider": "modal"}, []string{"snapshot_id"}},
		"failed without error":    {map[string]any{"status": "failed", "error": "  "}, []string{"error"}},
		"building with id":        {map[string]any{"status": "building", "snapshot_id": "x"}, []string{"snapshot_id"}},
		"building with error":     {map[string]any{"status": "building", "error": "x"}, []string{"error"}},
		"failed with provider":    {map[string]any{"status": "failed", "error": "x", "provider": "modal"}, []string{"provider"}},
		"bad provider":            {map[string]any{"status": "ready", "snapshot_id": "x", "provider": "Modal Labs!"}, []string{"provider"}},
		"id too long":             {map[string]any{"status": "ready", "snapshot_id": strings.Repeat("x", 501)}, []string{"snapshot_id"}},
		"error too long":          {map[string]any{"status": "failed", "error": strings.Repeat("x", 4001)}, []string{"error"}},
		"unknown field":           {map[string]any{"status": "ready", "snapshot_id": "x", "org_id": o.ID}, []string{"org_id"}},
		"status wrong type":       {`{"status": 1}`, []string{"status"}},
		"several rule violations": {map[string]any{"status": "default", "error": "x", "provider": "UPPER"}, []string{"snapshot_id", "error", "provider"}},
	} {
		t.Run(name, func(t *testing.T) {
			expectInvalid(t, env.Do(t, http.MethodPatch, path, builderToken, c.body), c.fields...)
		})
	}
	env.Do(t, http.MethodPatch, path, builderToken, `{"status": "ready",`).ExpectError(t, http.StatusBadRequest, httpapi.CodeBadRequest)
	env.Do(t, http.MethodPatch, "/configurations/"+missingID+"/snapshot", builderToken, map[string]any{"status": "building"}).
		ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodPatch, "/configurations/nope/snapshot", builderToken, map[string]any{"status": "building"}).
		ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	if rowJSON(t, env, "configurations", cfg.ID) != row {
		t.Fatal("a rejected report changed the configuration")
	}
}

func TestSnapshotLifecycleAndStaleness(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	a := createRepo(t, env, o.Admin.Token, "acme/a", nil)
	b := createRepo(t, env, o.Admin.Token, "acme/b", nil)
	cfg := createConfig(t, env, o.Admin.Token, map[string]any{"name": "x", "repos": refs(a.ID)})
	path := "/configurations/" + cfg.ID + "/snapshot"
	report := func(body map[string]any) repos.Configuration {
		t.Helper()
		var got repos.Configuration
		env.Do(t, http.MethodPatch, path, builderToken, body).Expect(t, http.StatusOK, &got)
		return got
	}
	get := func() repos.Configuration {
		t.Helper()
		var got repos.Configuration
		env.Do(t, http.MethodGet, "/configurations/"+cfg.ID, o.Member.Token, nil).Expect(t, http.StatusOK, &got)
		return got
	}

	report(map[string]any{"status": "building"})
	// The repos change while the build runs: its result lacks repo b.
	env.Do(t, http.MethodPut, "/configurations/"+cfg.ID+"/repos", o.Admin.Token, map[string]any{"repos": refs(a.ID, b.ID)}).Expect(t, http.StatusOK, nil)
	got := report(map[string]any{"status": "default", "snapshot_id": "snap-1"})
	if !got.SnapshotStale || *got.SnapshotID != "snap-1" {
		t.Fatalf("a build started before the repo change must be stale: %+v", got)
	}
	// A rebuild from the current repos is fresh; the old snapshot stays usable meanwhile.
	got = report(map[string]any{"status": "building"})
	if *got.SnapshotID != "snap-1" || !got.SnapshotStale {
		t.Fatalf("rebuilding: %+v", got)
	}
	got = report(map[string]any{"status": "default", "snapshot_id": "snap-2"})
	if got.SnapshotStale || *got.SnapshotID != "snap-2" {
		t.Fatalf("rebuilt: %+v", got)
	}
	if l := get(); l.SnapshotStale || l.SnapshotStatus != "default" {
		t.Fatalf("get: %+v", l)
	}
	// A user finalizes during a forced rebuild; the rebuild's late result is refused.
	report(map[string]any{"status": "building"})
	got = report(map[string]any{"status": "ready", "snapshot_id": "snap-final"})
	if got.SnapshotStatus != "ready" || got.SnapshotStale {
		t.Fatalf("finalized: %+v", got)
	}
	env.Do(t, http.MethodPatch, path, builderToken, map[string]any{"status": "default", "snapshot_id": "snap-late"}).
		ExpectError(t, http.StatusConflict, "invalid_transition")
	if l := get(); *l.SnapshotID != "snap-final" {
		t.Fatalf("the finalized snapshot was replaced: %+v", l)
	}
	// Reordering repos does not make a snapshot stale; removing one does.
	env.Do(t, http.MethodPut, "/configurations/"+cfg.ID+"/repos", o.Admin.Token, map[string]any{"repos": refs(b.ID, a.ID)}).Expect(t, http.StatusOK, nil)
	if get().SnapshotStale {
		t.Fatal("reorder made the snapshot stale")
	}
	env.Do(t, http.MethodPut, "/configurations/"+cfg.ID+"/repos", o.Admin.Token, map[string]any{"repos": refs(b.ID)}).Expect(t, http.StatusOK, nil)
	if !get().SnapshotStale {
		t.Fatal("removing a repo left the snapshot fresh")
	}
	// A failed build records the error and keeps the previous snapshot.
	report(map[string]any{"status": "building"})
	got = report(map[string]any{"status": "failed", "error": "clone failed"})
	if *got.SnapshotID != "snap-final" || *got.SnapshotError != "clone failed" || got.SnapshotStatus != "failed" {
		t.Fatalf("failed: %+v", got)
	}
	got = report(map[string]any{"status": "building"})
	if got.SnapshotError != nil {
		t.Fatalf("retry keeps the error: %+v", got)
	}
	// The list filter sees the status.
	var page api.Page[repos.Configuration]
	env.Do(t, http.MethodGet, "/configurations?snapshot_status=building", o.Member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 1 || page.Items[0].ID != cfg.ID {
		t.Fatalf("filter: %+v", page.Items)
	}
	if !strings.Contains(env.Logs.String(), `"configuration snapshot reported"`) {
		t.Fatal("snapshot reports are not logged")
	}
}
