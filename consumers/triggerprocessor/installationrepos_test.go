package triggerprocessor_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/consumers/triggerprocessor"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/integrations/fakes"
)

// GitHub's installation_repositories events update the org's repos through
// the webhook pipeline: added repositories are imported and bound (metadata
// from the installation's listing, else from the event), removed ones lose
// the connection and are flagged orphaned when none is left; no run starts,
// and a replay changes nothing.
func TestInstallationRepositoriesEvents(t *testing.T) {
	e := newEnv(t)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ghf := fakes.NewGitHub(t, "77", &key.PublicKey, nil)
	ghf.AddInstallation(fakes.GitHubInstallation{ID: e.installation, Login: "acme"})
	svc, err := integrations.New(integrations.Options{Pool: e.pool, Cfg: &config.Config{GitHubAppID: "77", GitHubAPIURL: ghf.URL,
		GitHubAppPrivateKey: string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))}})
	if err != nil {
		t.Fatal(err)
	}
	e.handler = triggerprocessor.Handler(triggerprocessor.Deps{Pool: e.pool, Codec: e.codec, Integrations: svc})
	integ := e.githubApp()
	trig := e.trigger("github", integ, nil)

	api := ghf.AddListedRepo(e.installation, "acme", "api", true)
	ghf.AddListedRepo(e.installation, "acme", "not-added", false)
	// A repo also bound to another integration stays connected when removed here.
	var shared, other string
	if err := e.pool.QueryRow(context.Background(), `INSERT INTO repos (org_id, github_repo_name, github_repo_id) VALUES ($1, 'acme/shared', '555') RETURNING id::text`,
		e.org).Scan(&shared); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.QueryRow(context.Background(), `INSERT INTO integrations (org_id, provider, integration_id, connection_id, provider_config_key)
		VALUES ($1, 'nango', 'github', $2, 'github') RETURNING id::text`, e.org, uuid.NewString()).Scan(&other); err != nil {
		t.Fatal(err)
	}
	e.exec(`INSERT INTO repo_connections (org_id, repo_id, integration_id) VALUES ($1, $2, $3), ($1, $2, $4)`, e.org, shared, integ, other)

	send := func(action string, added []map[string]any, removed []map[string]any) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"action": action, "installation": map[string]any{"id": e.installation},
			"repository_selection": "selected", "repositories_added": added, "repositories_removed": removed,
			"sender": map[string]any{"login": "octocat"}})
		e.handle(e.message(record{provider: "github", route: "direct", headers: gh("installation_repositories"), delivery: uuid.NewString(), body: body}))
	}
	added := []map[string]any{
		{"id": api.ID, "node_id": "R_1", "name": "api", "full_name": "acme/api", "private": true},
		{"id": 424242, "node_id": "R_2", "name": "gone-already", "full_name": "acme/gone-already", "private": false}, // not in the listing
	}
	send("added", added, []map[string]any{})
	send("added", added, []map[string]any{}) // replay
	type row struct {
		name, url, branch string
		private, orphaned bool
		bound             int
	}
	get := func(gid string) row {
		t.Helper()
		var r row
		if err := e.pool.QueryRow(context.Background(), `SELECT github_repo_name, github_url, default_branch, is_private, is_orphaned,
			(SELECT count(*) FROM repo_connections rc WHERE rc.repo_id = repos.id AND rc.integration_id = $3)
			FROM repos WHERE org_id = $1 AND github_repo_id = $2`, e.org, gid, integ).Scan(&r.name, &r.url, &r.branch, &r.private, &r.orphaned, &r.bound); err != nil {
			t.Fatalf("repo %s: %v", gid, err)
		}
		return r
	}
	if r := get(fmt.Sprint(api.ID)); r.name != "acme/api" || r.url != api.CloneURL || !r.private || r.orphaned || r.bound != 1 {
		t.Fatalf("added repo: %+v", r)
	}
	if r := get("424242"); r.name != "acme/gone-already" || r.url != "https://github.com/acme/gone-already.git" || r.branch != "main" || r.bound != 1 {
		t.Fatalf("event-only repo: %+v", r)
	}
	if n := e.scalar(`SELECT count(*) FROM repos WHERE org_id = $1`, e.org); n != 3 {
		t.Fatalf("org has %d repos, want 3 (replay must not duplicate)", n)
	}

	send("removed", []map[string]any{}, []map[string]any{{"id": api.ID, "full_name": "acme/api"}, {"id": 555, "full_name": "acme/shared"}})
	send("removed", []map[string]any{}, []map[string]any{{"id": api.ID, "full_name": "acme/api"}}) // replay
	if r := get(fmt.Sprint(api.ID)); !r.orphaned || r.bound != 0 {
		t.Fatalf("removed repo: %+v", r)
	}
	if r := get("555"); r.orphaned || r.bound != 0 {
		t.Fatalf("removed repo with another connection: %+v", r)
	}
	if n := e.scalar(`SELECT count(*) FROM repo_connections WHERE repo_id = $1`, shared); n != 1 {
		t.Fatalf("the other integration's binding went: %d", n)
	}
	// Added back: bound again, no longer orphaned.
	send("added", added[:1], []map[string]any{})
	if r := get(fmt.Sprint(api.ID)); r.orphaned || r.bound != 1 {
		t.Fatalf("re-added repo: %+v", r)
	}
	if len(e.events(trig)) != 0 {
		t.Fatal("installation_repositories recorded trigger events")
	}

	// A suspended installation's integration is left alone.
	e.exec(`UPDATE integrations SET status = 'suspended' WHERE id = $1`, integ)
	send("removed", []map[string]any{}, []map[string]any{{"id": api.ID, "full_name": "acme/api"}})
	if r := get(fmt.Sprint(api.ID)); r.bound != 1 {
		t.Fatalf("inactive integration's repos changed: %+v", r)
	}
	// GitHub failing while listing an added repository: an error, so the
	// runner retries the record; nothing half-done.
	e.exec(`UPDATE integrations SET status = 'active' WHERE id = $1`, integ)
	ghf.FailRepoList(502)
	body, _ := json.Marshal(map[string]any{"action": "added", "installation": map[string]any{"id": e.installation},
		"repositories_added": []map[string]any{{"id": 999, "full_name": "acme/new"}}, "repositories_removed": []any{}})
	if err := e.handler(context.Background(), e.message(record{provider: "github", route: "direct", headers: gh("installation_repositories"),
		delivery: uuid.NewString(), body: body})); err == nil {
		t.Fatal("a GitHub outage was not reported for retry")
	}
	if n := e.scalar(`SELECT count(*) FROM repos WHERE org_id = $1 AND github_repo_id = '999'`, e.org); n != 0 {
		t.Fatal("repo imported while GitHub failed")
	}
}
