package apptest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	mrand "math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/integrations/fakes"
)

// GitHubAppID is the App id of the GitHub fake NewGitHub starts.
const GitHubAppID = "4242"

// GitHub is the GitHub fake (the App API, git smart HTTP backed by bare
// repositories on disk, the pulls API) as the platform's GitHub App, with
// one installation of account acme.
type GitHub struct {
	Fake *fakes.GitHub
	// Installation is the id of acme's installation (unique across
	// organizations of the shared test database).
	Installation int64
	// Env points the platform at the fake (name, value pairs for Config):
	// GITHUB_APP_ID, GITHUB_APP_PRIVATE_KEY, GITHUB_API_URL.
	Env []string
}

// NewGitHub starts the GitHub fake on host (an address of this machine:
// 127.0.0.2 is reached by a sandbox through its egress proxy, like
// github.com) with a fresh App key and an installation of account acme.
func NewGitHub(t testing.TB, host string) *GitHub {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	gh := fakes.NewGitHubOn(t, host, GitHubAppID, &key.PublicKey, nil)
	installation := 100000 + mrand.Int64N(1<<40)
	gh.AddInstallation(fakes.GitHubInstallation{ID: installation, Login: "acme"})
	return &GitHub{Fake: gh, Installation: installation,
		Env: []string{"GITHUB_APP_ID", GitHubAppID, "GITHUB_APP_PRIVATE_KEY", keyPEM, "GITHUB_API_URL", gh.URL}}
}

// Connect records acme's installation as orgID's GitHub App integration
// (created by userID) and the repositories as the organization's, each
// connected to it, with github_url cloneURL(repo) (nil: the fake's smart
// HTTP URL). It returns the repositories' ids by name.
func (g *GitHub) Connect(t testing.TB, pool *pgxpool.Pool, orgID, userID string, cloneURL func(fakes.GitRepo) string, repos ...fakes.GitRepo) map[string]string {
	t.Helper()
	ctx := context.Background()
	var integrationID string
	if err := pool.QueryRow(ctx, `INSERT INTO integrations (org_id, provider, integration_id, connection_id, github_installation_id, created_by)
		VALUES ($1, 'github-app', 'github', $2, $3, $4) RETURNING id::text`,
		orgID, fmt.Sprintf("github-app-%d", g.Installation), g.Installation, userID).Scan(&integrationID); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, r := range repos {
		u := r.CloneURL
		if cloneURL != nil {
			u = cloneURL(r)
		}
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO repos (org_id, github_repo_name, github_url, default_branch) VALUES ($1, $2, $3, 'main')
			RETURNING id::text`, orgID, r.Owner+"/"+r.Name, u).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO repo_connections (org_id, repo_id, integration_id) VALUES ($1, $2, $3)`,
			orgID, id, integrationID); err != nil {
			t.Fatal(err)
		}
		ids[r.Name] = id
	}
	return ids
}

// Configuration creates a configuration of orgID named name holding the
// repository repoID at workspacePath; it returns its id.
func Configuration(t testing.TB, pool *pgxpool.Pool, orgID, name, repoID, workspacePath string) string {
	t.Helper()
	ctx := context.Background()
	var id string
	if err := pool.QueryRow(ctx, `INSERT INTO configurations (org_id, name) VALUES ($1, $2) RETURNING id::text`, orgID, name).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO configuration_repos (configuration_id, repo_id, org_id, workspace_path, position)
		VALUES ($1, $2, $3, $4, 0)`, id, repoID, orgID, workspacePath); err != nil {
		t.Fatal(err)
	}
	return id
}
