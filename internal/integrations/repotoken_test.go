package integrations_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A token narrowed to one repository (the access-token request names it in
// "repositories") is cached apart from the installation's and from other
// repositories' tokens, and the fake GitHub honours the narrowing: git
// clones the named repository with it and is refused the other one, and a
// pull request can be opened on the named repository only.
func TestGitHubRepositoryTokenIsScopedToOneRepository(t *testing.T) {
	gh, fake, _ := newGitHub(t)
	ctx := context.Background()
	app := fake.AddRepo(t, 7, "acme", "app")
	other := fake.AddRepo(t, 7, "acme", "other")

	tok, err := gh.RepositoryToken(ctx, 7, "App")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := gh.RepositoryToken(ctx, 7, "app"); err != nil || again.Value != tok.Value {
		t.Fatalf("second call: %v, a new token: %v", err, again.Value != tok.Value)
	}
	if scope, ok := fake.TokenRepos(tok.Value); !ok || !slices.Equal(scope, []string{"app"}) {
		t.Fatalf("token scope %v %v, want [app]", scope, ok)
	}
	whole, err := gh.InstallationToken(ctx, 7)
	if err != nil || whole.Value == tok.Value {
		t.Fatalf("installation token: %v (same as the scoped one: %v)", err, whole.Value == tok.Value)
	}
	if scope, _ := fake.TokenRepos(whole.Value); scope != nil {
		t.Fatalf("installation token narrowed to %v", scope)
	}
	if n := fake.TokenCalls(); n != 2 {
		t.Fatalf("%d token requests, want 2", n)
	}
	if _, err := gh.RepositoryToken(ctx, 7, "not-installed"); err == nil {
		t.Fatalf("a repository outside the installation: %v", err)
	}
	if _, err := gh.RepositoryToken(ctx, 7, "acme/app"); err == nil {
		t.Fatal("an owner/name repository name was accepted")
	}

	clone := func(url string) error {
		dir := filepath.Join(t.TempDir(), "c")
		cmd := exec.Command("git", "-c", "http.extraHeader=Authorization: Basic "+basicAuth("x-access-token", tok.Value),
			"clone", "--quiet", url, dir)
		cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return errors.New(stderr.String())
		}
		return nil
	}
	if err := clone(app.CloneURL); err != nil {
		t.Fatalf("clone the token's repository: %v", err)
	}
	if err := clone(other.CloneURL); err == nil {
		t.Fatal("the token cloned a repository it was not narrowed to")
	}
	if fake.Denied() == 0 {
		t.Fatal("the refusal was not counted")
	}

	pr := func(repo string) int {
		body, _ := json.Marshal(map[string]string{"title": "t", "head": "main", "base": "main"})
		req, _ := http.NewRequest(http.MethodPost, fake.URL+"/repos/acme/"+repo+"/pulls", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok.Value)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// head == base is GitHub's 422 on the token's repository; the other
	// repository is invisible to the token (404).
	if got := pr("app"); got != http.StatusUnprocessableEntity {
		t.Fatalf("PR on the token's repository: %d, want 422 (head == base)", got)
	}
	if got := pr("other"); got != http.StatusNotFound {
		t.Fatalf("PR on another repository: %d, want 404", got)
	}
	if len(fake.PullRequests()) != 0 {
		t.Fatal("unexpected pull requests")
	}
}

func basicAuth(user, pass string) string {
	req, _ := http.NewRequest(http.MethodGet, "http://x", nil)
	req.SetBasicAuth(user, pass)
	return strings.TrimPrefix(req.Header.Get("Authorization"), "Basic ")
}
