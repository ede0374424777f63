package integrations_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
)

func TestRepoBindings(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	it := e.githubIntegration(t, tm.admin, "")
	repoID, repoName := e.repo(t, tm.owner.OrgID)
	path := "/integrations/" + it.ID + "/repos/" + repoID

	// Role matrix: members read, admins and owners write.
	e.Do(t, http.MethodPut, path, tm.member.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	if e.CountRows(t, "repo_connections", "repo_id = $1", repoID) != 0 {
		t.Fatal("member bound a repo")
	}
	var b integrations.RepoBinding
	e.Do(t, http.MethodPut, path, tm.admin.Token, nil).Expect(t, http.StatusCreated, &b)
	if b.RepoID != repoID || b.IntegrationID != it.ID || b.GitHubRepoName != repoName || b.IsOrphaned {
		t.Fatalf("%+v", b)
	}
	var again integrations.RepoBinding
	e.Do(t, http.MethodPut, path, tm.owner.Token, nil).Expect(t, http.StatusOK, &again)
	if again.ID != b.ID || e.CountRows(t, "repo_connections", "repo_id = $1", repoID) != 1 {
		t.Fatal("binding twice is not idempotent")
	}

	var repos api.Page[integrations.RepoBinding]
	e.Do(t, http.MethodGet, "/integrations/"+it.ID+"/repos", tm.member.Token, nil).Expect(t, http.StatusOK, &repos)
	if len(repos.Items) != 1 || repos.Items[0].RepoID != repoID {
		t.Fatalf("%+v", repos)
	}
	var conns api.Page[integrations.RepoConnection]
	e.Do(t, http.MethodGet, "/repos/"+repoID+"/connections", tm.member.Token, nil).Expect(t, http.StatusOK, &conns)
	if len(conns.Items) != 1 || conns.Items[0].Integration.ID != it.ID || conns.Items[0].ID != b.ID {
		t.Fatalf("%+v", conns)
	}

	// Unknown repo / integration / binding.
	missing := "6a1c0b52-4d21-4a7f-9a63-0c1d2e3f4a5b"
	r := e.Do(t, http.MethodPut, "/integrations/"+it.ID+"/repos/"+missing, tm.admin.Token, nil)
	if body := r.ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound); !strings.Contains(body.Error.Message, "repo") {
		t.Fatalf("%s", r.Body)
	}
	e.Do(t, http.MethodPut, "/integrations/"+missing+"/repos/"+repoID, tm.admin.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodPut, "/integrations/"+it.ID+"/repos/nope", tm.admin.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodGet, "/repos/"+missing+"/connections", tm.member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)

	// Unbinding the only connection orphans the repo.
	e.Do(t, http.MethodDelete, path, tm.member.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	var un struct{ Orphaned bool }
	e.Do(t, http.MethodDelete, path, tm.admin.Token, nil).Expect(t, http.StatusOK, &un)
	if !un.Orphaned || e.CountRows(t, "repos", "id = $1 AND is_orphaned", repoID) != 1 {
		t.Fatal("repo not orphaned")
	}
	e.Do(t, http.MethodDelete, path, tm.admin.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)

	// An inactive integration cannot be bound.
	if _, err := e.Deps.Pool.Exec(context.Background(), `UPDATE integrations SET status = 'revoked' WHERE id = $1`, it.ID); err != nil {
		t.Fatal(err)
	}
	e.Do(t, http.MethodPut, path, tm.admin.Token, nil).ExpectError(t, http.StatusConflict, "integration_inactive")
}

func TestRepoBindingsAcrossOrgsAreRefused(t *testing.T) {
	e := newEnv(t)
	a := e.NewUser(t)
	b := e.NewUser(t)
	itA := e.githubIntegration(t, a, "")
	itB := e.githubIntegration(t, b, "")
	repoA, _ := e.repo(t, a.OrgID)
	repoB, _ := e.repo(t, b.OrgID)
	// Org A's repo with org B's integration, from either side: 404.
	e.Do(t, http.MethodPut, "/integrations/"+itB.ID+"/repos/"+repoA, a.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodPut, "/integrations/"+itB.ID+"/repos/"+repoA, b.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodPut, "/integrations/"+itA.ID+"/repos/"+repoB, a.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	if e.CountRows(t, "repo_connections", "repo_id = ANY($1::uuid[])", []string{repoA, repoB}) != 0 {
		t.Fatal("a cross-org binding was written")
	}
	// The database refuses it as well.
	if _, err := e.Deps.Pool.Exec(context.Background(), `INSERT INTO repo_connections (org_id, repo_id, integration_id) VALUES ($1, $2, $3)`,
		a.OrgID, repoA, itB.ID); err == nil {
		t.Fatal("database accepted a cross-org repo binding")
	}
	// Org B cannot list or unbind org A's bindings.
	e.Do(t, http.MethodPut, "/integrations/"+itA.ID+"/repos/"+repoA, a.Token, nil).Expect(t, http.StatusCreated, nil)
	e.Do(t, http.MethodGet, "/integrations/"+itA.ID+"/repos", b.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodDelete, "/integrations/"+itA.ID+"/repos/"+repoA, b.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodGet, "/repos/"+repoA+"/connections", b.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	if e.CountRows(t, "repo_connections", "repo_id = $1", repoA) != 1 {
		t.Fatal("org B removed org A's binding")
	}
}
