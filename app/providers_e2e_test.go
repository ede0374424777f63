package app_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/testenv"
)

// Each provider's documented payload shape goes through the real stack: signed
// request to ingest → webhooks.raw → trigger-processor → one queued run for the
// trigger it was meant for (and a redelivery adds none).
func TestEveryProviderPayloadBecomesAQueuedRun(t *testing.T) {
	cfg := devConfig(t, filepath.Join(t.TempDir(), "kafka"))
	cfg.GitHubWebhookSecret = "gh-webhook-secret"
	dev := startDev(t, cfg)
	base := "http://" + dev.app.APIAddr()
	ingest := "http://" + dev.app.IngestAddr()
	ctx := context.Background()

	var signup struct {
		AccessToken string `json:"access_token"`
		User        struct {
			ActiveOrgID string `json:"active_org_id"`
		} `json:"user"`
	}
	if code := apiCall(t, base, "POST", "/auth/signup", "", map[string]any{"email": fmt.Sprintf("prov-%d@example.com", time.Now().UnixNano()),
		"password": "correct horse battery", "name": "P"}, &signup); code != 201 {
		t.Fatalf("signup %d", code)
	}
	token, orgID := signup.AccessToken, signup.User.ActiveOrgID
	var auto struct{ ID string }
	if code := apiCall(t, base, "POST", "/automations", token, map[string]any{"name": "Triage"}, &auto); code != 201 {
		t.Fatalf("automation %d", code)
	}
	// The GitHub App installation of the fixtures, connected to this org (an
	// installation belongs to one org: free it from an earlier run).
	if _, err := dev.app.Pool.Exec(ctx, `DELETE FROM integrations WHERE github_installation_id = 51234567`); err != nil {
		t.Fatal(err)
	}
	var integrationID string
	if err := dev.app.Pool.QueryRow(ctx, `INSERT INTO integrations (org_id, provider, integration_id, connection_id, github_installation_id, visibility)
		VALUES ($1, 'github-app', 'github', 'github-app:51234567', 51234567, 'org') RETURNING id::text`, orgID).Scan(&integrationID); err != nil {
		t.Fatal(err)
	}
	type created struct {
		ID            string  `json:"id"`
		WebhookPath   *string `json:"webhook_path"`
		WebhookSecret *string `json:"webhook_secret"`
	}
	newTrigger := func(provider string, body map[string]any) created {
		t.Helper()
		body["trigger_type"], body["provider"] = "webhook", provider
		if body["config"] == nil {
			body["config"] = map[string]any{}
		}
		var c created
		if code := apiCall(t, base, "POST", "/automations/"+auto.ID+"/triggers", token, body, &c); code != 201 {
			t.Fatalf("%s trigger: %d", provider, code)
		}
		return c
	}
	fixture := func(p string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("..", "internal", "triggers", "providers", "testdata", p))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	sign := func(secret string, body []byte) string {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write(body)
		return hex.EncodeToString(m.Sum(nil))
	}
	post := func(url string, body []byte, headers map[string]string) {
		t.Helper()
		req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("POST %s answered %d", url, resp.StatusCode)
		}
	}

	gh := newTrigger("github", map[string]any{"integration_id": integrationID, "config": map[string]any{"events": []string{"issues"}}})
	lin := newTrigger("linear", map[string]any{})
	sen := newTrigger("sentry", map[string]any{})
	ph := newTrigger("posthog", map[string]any{})

	cases := []struct {
		name, triggerID, url string
		body                 []byte
		headers              map[string]string
	}{
		{"github issues", gh.ID, ingest + "/webhooks/github", fixture("github/issues_opened.json"), map[string]string{
			"X-GitHub-Event": "issues", "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958"}},
		{"linear issue", lin.ID, ingest + "/webhooks/direct/linear/" + *lin.WebhookPath, fixture("linear/issue_create.json"), nil},
		{"sentry event alert", sen.ID, ingest + "/webhooks/direct/sentry/" + *sen.WebhookPath, fixture("sentry/event_alert.json"),
			map[string]string{"Sentry-Hook-Resource": "event_alert"}},
		{"posthog", ph.ID, ingest + "/webhooks/direct/posthog/" + *ph.WebhookPath, fixture("posthog/flat_form.json"), nil},
	}
	secrets := map[string]string{gh.ID: cfg.GitHubWebhookSecret}
	for _, c := range []created{lin, sen, ph} {
		secrets[c.ID] = *c.WebhookSecret
	}
	sigHeader := map[string]func(string) (string, string){
		gh.ID:  func(s string) (string, string) { return "X-Hub-Signature-256", "sha256=" + s },
		lin.ID: func(s string) (string, string) { return "Linear-Signature", s },
		sen.ID: func(s string) (string, string) { return "Sentry-Hook-Signature", s },
		ph.ID:  func(s string) (string, string) { return "X-PostHog-Signature", s },
	}
	for _, c := range cases {
		h := map[string]string{}
		for k, v := range c.headers {
			h[k] = v
		}
		k, v := sigHeader[c.triggerID](sign(secrets[c.triggerID], c.body))
		h[k] = v
		post(c.url, c.body, h)
		post(c.url, c.body, h) // a redelivery
	}
	for _, c := range cases {
		// The run goes on through enrichment (the provider's real payload)
		// to running in a session.
		testenv.Eventually(t, 30*time.Second, c.name+" to run", func() bool {
			var runs, events int
			_ = dev.app.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM automation_runs WHERE trigger_id = $1 AND status = 'running'
					AND enrichment_json IS NOT NULL AND session_id IS NOT NULL),
				(SELECT count(*) FROM trigger_events WHERE trigger_id = $1)`, c.triggerID).Scan(&runs, &events)
			return runs == 1 && events == 1
		})
	}
	// Once the processor has committed everything, still one run each.
	testenv.Eventually(t, 30*time.Second, "the processor to catch up", func() bool {
		p := &pipeline{dev: dev}
		return committedAll(t, p)
	})
	for _, c := range cases {
		var runs int
		_ = dev.app.Pool.QueryRow(ctx, `SELECT count(*) FROM automation_runs WHERE trigger_id = $1`, c.triggerID).Scan(&runs)
		if runs != 1 {
			t.Errorf("%s: %d runs after a redelivery", c.name, runs)
		}
	}
}
