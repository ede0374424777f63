package secrets_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/secrets"
)

// A session on two repos: the org-wide values, overridden by the repos'
// (the first repo's winning); one env file per repo and bundle with that
// repo's values; a persist=false secret in the variables but in no file;
// submitted values saved once, existing keys left alone.
func TestForSessionAcrossRepos(t *testing.T) {
	ctx := context.Background()
	box := newBox(t, "k1")
	w := newWorld(t)
	k := w.create(t, box, "", "API_KEY", "org")
	r1 := w.create(t, box, w.repo, "API_KEY", "repo-1")
	r2 := w.create(t, box, w.repo2, "API_KEY", "repo-2")
	w.create(t, box, w.repo2, "ONLY_TWO", "two")
	hidden, err := secrets.Create(ctx, w.pool, box, secrets.CreateInput{OrgID: w.org, Key: "HIDDEN", Value: "h", Persist: false})
	if err != nil {
		t.Fatal(err)
	}
	name, target := "app", "config/.env"
	b, err := secrets.CreateBundle(ctx, w.pool, w.org, secrets.BundleInput{Name: &name, TargetPath: &target})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []secrets.Secret{k, r1, r2, hidden} {
		if err := secrets.AddToBundle(ctx, w.pool, w.org, b.ID, s.ID, secrets.Actor{}); err != nil {
			t.Fatal(err)
		}
	}
	env, err := secrets.ForSession(ctx, w.pool, box, w.org, []secrets.SessionRepo{{RepoID: w.repo, WorkspacePath: "front"}, {RepoID: w.repo2, WorkspacePath: "back"}})
	if err != nil {
		t.Fatal(err)
	}
	if env.Vars["API_KEY"] != "repo-1" || env.Vars["ONLY_TWO"] != "two" || env.Vars["HIDDEN"] != "h" || len(env.Vars) != 3 {
		t.Fatalf("vars %v", env.Vars)
	}
	want := []sandbox.EnvFile{
		{Path: "front/config/.env", Vars: []sandbox.EnvVar{{Key: "API_KEY", Value: "repo-1"}}},
		{Path: "back/config/.env", Vars: []sandbox.EnvVar{{Key: "API_KEY", Value: "repo-2"}}},
	}
	if !slices.EqualFunc(env.Files, want, func(a, b sandbox.EnvFile) bool { return a.Path == b.Path && slices.Equal(a.Vars, b.Vars) }) {
		t.Fatalf("files %+v", env.Files)
	}

	// A scratch session: the org-wide values, the file at the root.
	env, err = secrets.ForSession(ctx, w.pool, box, w.org, nil)
	if err != nil {
		t.Fatal(err)
	}
	if env.Vars["API_KEY"] != "org" || len(env.Files) != 1 || env.Files[0].Path != "config/.env" {
		t.Fatalf("scratch %v %+v", env.Vars, env.Files)
	}

	res, err := secrets.SaveSubmitted(ctx, w.pool, box, w.org, secrets.Actor{UserID: w.userID}, []secrets.SubmittedSecret{
		{Key: "API_KEY", Value: "new"}, {Key: "NEW_ONE", Value: "n", RepoID: w.repo}})
	if err != nil || len(res) != 2 || !res[0].AlreadyExisted || !res[1].Persisted {
		t.Fatalf("save %+v %v", res, err)
	}
	if v, _ := secrets.Resolve(ctx, w.pool, box, w.org, w.repo); v["NEW_ONE"] != "n" || v["API_KEY"] != "repo-1" {
		t.Fatalf("after save %v", v)
	}
	// A repo of another organization stores nothing.
	if _, err := secrets.SaveSubmitted(ctx, w.pool, box, w.org, secrets.Actor{}, []secrets.SubmittedSecret{
		{Key: "FIRST", Value: "1"}, {Key: "SECOND", Value: "2", RepoID: "00000000-0000-0000-0000-000000000001"}}); !errors.Is(err, secrets.ErrRepoNotFound) {
		t.Fatalf("foreign repo: %v", err)
	}
	if have, _ := secrets.Check(ctx, w.pool, w.org, "", []string{"FIRST"}); have["FIRST"] {
		t.Fatal("a refused save stored a secret")
	}
}
