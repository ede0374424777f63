package gateway_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway"
	"github.com/proliferate/proliferate/gateway/tools"
	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/redaction"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/integrations/fakes"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/secrets"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// fakeGitHubRepos is a gateway.RepoAccess of one repository, acme/app on
// the GitHub fake, whose tokens the real GitHub App client mints there.
type fakeGitHubRepos struct {
	repo         fakes.GitRepo
	app          *integrations.GitHubApp
	installation int64
}

func (f fakeGitHubRepos) SessionRepos(context.Context, sessions.Session) ([]gateway.SessionRepo, error) {
	return []gateway.SessionRepo{{Name: f.repo.Owner + "/" + f.repo.Name, CloneURL: f.repo.CloneURL,
		DefaultBranch: "main", IntegrationID: "github-app"}}, nil
}

func (f fakeGitHubRepos) RepoToken(ctx context.Context, _, _, repo string) (integrations.Token, error) {
	return f.app.RepositoryToken(ctx, f.installation, repo)
}

// startRedactingGateway runs a gateway instance as production wires it
// for what agents send out: the organizations' redaction cache, and
// repository access to the GitHub fake.
func (w *world) startRedactingGateway(t *testing.T, gh *fakes.GitHub, repos gateway.RepoAccess) *gw {
	t.Helper()
	return w.startGateway(t, gwOptions{Instance: "redacting", Gateway: func(d *gateway.Deps) {
		cfg := *d.Cfg
		cfg.GitHubAPIURL = gh.URL
		d.Cfg, d.Repos = &cfg, repos
		d.Redactors = redaction.NewCache(d.Pool, w.api.Deps.Box, d.Log)
	}})
}

// What the agent writes that leaves its session through the gateway's
// tools and sandbox routes is redacted where it leaves, like a run's
// completion: an organization secret (and a token) the agent printed raw
// into a pull request's title and body reaches GitHub as [REDACTED]; into
// save_snapshot's message, the tool's answer and its stored (replayed)
// result carry [REDACTED]; into automation.complete's summary, the run's
// completion and the stopped session's summary (the After hook, which
// uses the completion as the tool redacted it) carry [REDACTED]. No log
// line carries the secret either.
func TestAgentWrittenOutboundFieldsAreRedacted(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	pool := w.api.Deps.Pool
	owner := w.api.NewUser(t)
	secret := "acme-outbound-secret-" + strings.ToLower(rand.Text()[:10])
	token := "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"
	if _, err := secrets.Create(ctx, pool, w.api.Deps.Box, secrets.CreateInput{OrgID: owner.OrgID,
		Key: "ACME_DEPLOY_KEY", Value: secret, Persist: true}); err != nil {
		t.Fatal(err)
	}
	leaky := "uses " + secret + " and " + token

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	gh := fakes.NewGitHub(t, "4242", &key.PublicKey, nil)
	const installation = 77001
	gh.AddInstallation(fakes.GitHubInstallation{ID: installation, Login: "acme"})
	repo := gh.AddRepo(t, installation, "acme", "app")
	// The agent's branch, as its git push left it on GitHub.
	if out, err := exec.Command("git", "--git-dir", repo.Dir, "branch", "agent/fix", "main").CombinedOutput(); err != nil {
		t.Fatalf("branch: %v %s", err, out)
	}
	g := w.startRedactingGateway(t, gh, fakeGitHubRepos{repo: repo, installation: installation,
		app: integrations.NewGitHubApp("4242", key, gh.URL, nil, nil)})

	redacted := func(t *testing.T, where, v string) {
		t.Helper()
		if strings.Contains(v, secret) || strings.Contains(v, token) {
			t.Errorf("%s carries the secret: %.300s", where, v)
		}
		if !strings.Contains(v, actions.Redacted) {
			t.Errorf("%s carries no [REDACTED] (did the text reach it?): %.300s", where, v)
		}
	}

	t.Run("pull request title and body", func(t *testing.T) {
		sid := sessionstest.New(t, pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
		st, body := call(t, http.MethodPost, g.url+"/proliferate/"+sid+"/git/pull-requests", w.sandboxToken(sid),
			map[string]any{"remote_url": repo.CloneURL, "head": "agent/fix", "title": "Rotate " + secret,
				"body": "The deploy " + leaky + "."}, nil)
		if st != http.StatusCreated {
			t.Fatalf("pr create: %d %s", st, body)
		}
		prs := gh.PullRequests()
		if len(prs) != 1 || prs[0].Head != "agent/fix" || prs[0].Base != "main" {
			t.Fatalf("pull requests on GitHub: %+v", prs)
		}
		redacted(t, "the pull request's title on GitHub", prs[0].Title)
		redacted(t, "the pull request's body on GitHub", prs[0].Body)
		if prs[0].Title != "Rotate "+actions.Redacted || prs[0].Body != "The deploy uses [REDACTED] and [REDACTED]." {
			t.Fatalf("title %q body %q", prs[0].Title, prs[0].Body)
		}
	})

	t.Run("save_snapshot message", func(t *testing.T) {
		sid := sessionstest.New(t, pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
		st, res, body := toolCall(t, g, w.sandboxToken(sid), sid, tools.SaveSnapshot, "snap-leak", map[string]any{"message": leaky})
		if st != http.StatusOK || !res.Success {
			t.Fatalf("save_snapshot: %d %s", st, body)
		}
		redacted(t, "save_snapshot's answer", string(body))
		var stored string
		if err := pool.QueryRow(ctx, `SELECT output::text FROM session_tool_invocations WHERE session_id = $1 AND tool_call_id = $2`,
			sid, "snap-leak").Scan(&stored); err != nil {
			t.Fatal(err)
		}
		redacted(t, "save_snapshot's stored result", stored)
		_, _, replay := toolCall(t, g, w.sandboxToken(sid), sid, tools.SaveSnapshot, "snap-leak", map[string]any{"message": leaky})
		redacted(t, "save_snapshot's replayed answer", string(replay))
	})

	t.Run("automation.complete summary", func(t *testing.T) {
		runID, sid := runningRun(t, w, owner.OrgID)
		st, res, body := toolCall(t, g, w.sandboxToken(sid), sid, tools.AutomationComplete, "done-1", map[string]any{
			"run_id": runID, "completion_id": "cmp-leak", "outcome": "succeeded", "summary_markdown": "Deployed: " + leaky})
		if st != http.StatusOK || !res.Success || res.Data["status"] != runs.StatusSucceeded {
			t.Fatalf("automation.complete: %d %s", st, body)
		}
		var completion string
		if err := pool.QueryRow(ctx, `SELECT completion_json::text FROM automation_runs WHERE id = $1`, runID).Scan(&completion); err != nil {
			t.Fatal(err)
		}
		redacted(t, "the run's completion", completion)
		var summary string
		testenv.Eventually(t, 10*time.Second, "the session stopped with the run's summary", func() bool {
			s, err := w.store.Get(ctx, "", sid)
			if err != nil || s.Status != sessions.StatusStopped || s.Summary == nil {
				return false
			}
			summary = *s.Summary
			return true
		})
		redacted(t, "the stopped session's summary", summary)
	})

	if logs := w.logs.String(); strings.Contains(logs, secret) || strings.Contains(logs, token) {
		t.Fatal("the secret is in the gateway's logs")
	}
}
