package repos_test

import (
	"net/http"
	"sync"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/prebuilds"
	"github.com/proliferate/proliferate/internal/repos"
)

// POST /configurations/:id/rebuild and GET /configurations/:id/builds
// (the build itself runs in a gateway: app's end-to-end test): a
// member starts one (202, building, the configuration building too);
// concurrent rebuilds get exactly one 202 and 409 build_running for the
// rest; another organization's configuration, a malformed id and no
// credentials are refused with the stable error shape and change nothing.
func TestRebuildRoutes(t *testing.T) {
	env := newEnv(t)
	o, other := env.NewOrg(t), env.NewOrg(t)
	repo := createRepo(t, env, o.Admin.Token, "acme/app", nil)
	cfg := createConfig(t, env, o.Admin.Token, map[string]any{"name": "app", "repos": refs(repo.ID)})
	theirs := createConfig(t, env, other.Admin.Token, map[string]any{"name": "theirs",
		"repos": refs(createRepo(t, env, other.Admin.Token, "acme/theirs", nil).ID)})

	// Refusals first: nothing recorded.
	for _, tok := range []string{o.Member.Token, o.Admin.Token} {
		env.Do(t, http.MethodPost, "/configurations/"+theirs.ID+"/rebuild", tok, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
		env.Do(t, http.MethodGet, "/configurations/"+theirs.ID+"/builds", tok, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	}
	env.Do(t, http.MethodPost, "/configurations/not-a-uuid/rebuild", o.Member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodGet, "/configurations/not-a-uuid/builds", o.Member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodPost, "/configurations/"+cfg.ID+"/rebuild", "", nil).ExpectError(t, http.StatusUnauthorized, httpapi.CodeUnauthenticated)
	env.Do(t, http.MethodGet, "/configurations/"+cfg.ID+"/builds?limit=0", o.Member.Token, nil).ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
	if n := env.CountRows(t, "configuration_builds", "configuration_id IN ($1, $2)", cfg.ID, theirs.ID); n != 0 {
		t.Fatalf("%d builds recorded by refused requests", n)
	}

	// Concurrent rebuilds by members: one 202, the others 409.
	var wg sync.WaitGroup
	resps := make([]*apitest.Response, 6)
	for i := range resps {
		wg.Go(func() {
			resps[i] = env.Do(t, http.MethodPost, "/configurations/"+cfg.ID+"/rebuild", o.Member.Token, nil)
		})
	}
	wg.Wait()
	var started prebuilds.Build
	accepted := 0
	for _, r := range resps {
		if r.Status == http.StatusAccepted {
			accepted++
			r.Expect(t, http.StatusAccepted, &started)
		} else {
			r.ExpectError(t, http.StatusConflict, "build_running")
		}
	}
	if accepted != 1 || started.Status != prebuilds.BuildBuilding || started.ConfigurationID != cfg.ID || started.OrgID != o.ID ||
		started.RequestedBy == nil || *started.RequestedBy != o.Member.ID || started.FinishedAt != nil {
		t.Fatalf("%d accepted, build %+v", accepted, started)
	}
	var got repos.Configuration
	env.Do(t, http.MethodGet, "/configurations/"+cfg.ID, o.Member.Token, nil).Expect(t, http.StatusOK, &got)
	if got.SnapshotStatus != repos.SnapshotBuilding {
		t.Fatalf("configuration snapshot_status %s while building", got.SnapshotStatus)
	}
	var page api.Page[prebuilds.Build]
	env.Do(t, http.MethodGet, "/configurations/"+cfg.ID+"/builds", o.Member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 1 || page.Items[0].ID != started.ID || page.Items[0].Status != prebuilds.BuildBuilding {
		t.Fatalf("builds %+v", page)
	}
	// The other organization still has none, and cannot see this one.
	var theirPage api.Page[prebuilds.Build]
	env.Do(t, http.MethodGet, "/configurations/"+theirs.ID+"/builds", other.Member.Token, nil).Expect(t, http.StatusOK, &theirPage)
	if len(theirPage.Items) != 0 {
		t.Fatalf("their builds %+v", theirPage)
	}
	env.Do(t, http.MethodGet, "/configurations/"+cfg.ID+"/builds", other.Member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
}
