package app_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/slack/slackfake"
	"github.com/proliferate/proliferate/internal/testenv"
)

// From webhook to pull request, with the configuration's secrets, env file
// and service: the whole platform (dev: API,
// ingest, Kafka, the run pipeline, the gateway with the isolated bubblewrap
// provider, the notifier) with the GitHub fake (App API, git smart HTTP,
// REST pulls) and the Slack fake. The configuration (repo acme/app at
// workspace path app) gets, through the API, an org secret in a bundle
// whose target path is .env.local and a service command (a Python HTTP
// server on a loopback port of the sandbox that serves the hash of the
// secret it sees). A signed webhook starts a run; the real agent, scripted,
// in its bash tool: prints the secret's value (as an agent talked into it
// would), the hashes of the secret in its environment and of the env file, curls the service through localhost, edits a file,
// commits everything (`git add -A`: the env file must be git-excluded),
// pushes through the credential helper, opens the pull request with
// `proliferate pr create` and completes the run. Then: the run succeeded
// with the pull request's URL in its completion, its artifact, the run
// API and the Slack notification; the fake GitHub received exactly one
// push (changing README.md only) and one pull request; the secret's value
// is in no log line of the platform, no record of any Kafka topic and no
// API response the test fetched (secrets, bundle, configuration, session,
// runs, the session's history), and the run's summary and notification
// show it [REDACTED]. The same holds for every secret setting the stack is
// configured with (canarySettings), the member's password and access token
// and the webhook's secret, which the frames streamed to a member over the
// WebSocket do not carry either.
func TestWebhookToPullRequestWithSecretsEnvFileAndService(t *testing.T) {
	sl := slackfake.New(t)
	canaries, overrides := canarySettings(t)
	w := newGitWorld(t, append([]string{"SLACK_API_URL", sl.URL()}, overrides...)...)
	ctx := context.Background()
	pool := w.dev.app.Pool
	apiBase := w.base + api.Prefix
	secret := "e2e-secret-" + rand.Text()
	_, portStr, err := net.SplitHostPort(freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	// Every API response body the test reads, checked for the secret at
	// the end.
	var bodies []string
	call := func(method, path string, body any, want int, out any) string {
		t.Helper()
		status, b := gatewayCall(t, apiBase, method, path, w.token, body)
		if status != want {
			t.Fatalf("%s %s: %d %s", method, path, status, b)
		}
		bodies = append(bodies, method+" "+path+": "+b)
		if out != nil {
			if err := json.Unmarshal([]byte(b), out); err != nil {
				t.Fatalf("%s %s: %v %s", method, path, err, b)
			}
		}
		return b
	}

	// The org's secret, in a bundle written to .env.local of each repo.
	var bundle struct {
		ID string `json:"id"`
	}
	call("POST", "/secret-bundles", map[string]any{"name": "app env", "target_path": ".env.local"}, 201, &bundle)
	call("POST", "/secrets", map[string]any{"key": "E2E_API_TOKEN", "value": secret, "bundle_id": bundle.ID,
		"description": "the app's API token"}, 201, nil)
	// The service: serves the hash of the secret it sees in its environment.
	sha := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	service := fmt.Sprintf(`d=$(mktemp -d) && printf 'service-ok token-sha=%%s\n' "$(printf %%s "$E2E_API_TOKEN" | sha256sum | cut -d' ' -f1)" > "$d/index.html" && `+
		`exec python3 -m http.server %s --bind 127.0.0.1 --directory "$d"`, portStr)
	call("PUT", "/configurations/"+w.cfgID+"/service-commands", map[string]any{"service_commands": []any{
		map[string]any{"name": "web", "command": service}}}, 200, nil)

	// Slack: an installation of the org and a channel for the automation's
	// notifications.
	team, botToken := "T"+rand.Text()[:10], "xoxb-"+rand.Text()
	sl.AddToken(botToken, team)
	sl.AddChannel(team, "C0RUNS")
	box, err := secretbox.New(w.cfg.EncryptionKeys)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := box.Seal([]byte(botToken), []byte("slack:"+w.orgID+":"+team))
	if err != nil {
		t.Fatal(err)
	}
	var installation string
	if err := pool.QueryRow(ctx, `INSERT INTO slack_installations (org_id, team_id, team_name, bot_user_id, encrypted_bot_token)
		VALUES ($1, $2, 'Acme', 'UBOT', $3) RETURNING id::text`, w.orgID, team, sealed).Scan(&installation); err != nil {
		t.Fatal(err)
	}

	// The agent's script: one bash command, then automation_complete
	// whose summary is that command's output (the session's sandbox and
	// its agent's history end with the run).
	work := fmt.Sprintf(`echo "raw-token=$E2E_API_TOKEN"; printf 'secret-sha=%%s\n' "$(printf %%s "$E2E_API_TOKEN" | sha256sum | cut -d' ' -f1)"; `+
		`printf 'envfile-sha=%%s\n' "$(sha256sum < app/.env.local | cut -d' ' -f1)"; `+
		`body=; for i in $(seq 300); do body=$(curl -sf http://localhost:%s/) && break; sleep 0.2; done; echo "service: $body"; `+
		`cd app && git switch -q -c agent/fix-readme && echo "Fixed by the agent." >> README.md && git add -A && `+
		`git commit -q -m "Fix the README" && git push -q -u origin agent/fix-readme 2>&1 && `+
		`proliferate pr create --title "Fix the README" --body "Automated fix."; echo "exit=$?"`, portStr)
	script := "webhook-pr-" + rand.Text()[:8]
	if err := w.dev.app.LLMSim.Register(script, llmsim.Script{Turns: []llmsim.Turn{
		{Text: "Checking the environment, then fixing the README.", ToolCalls: []llmsim.ToolCall{{Name: "bash", Input: mustJSON(t, map[string]any{
			"command": work, "description": "Check the environment, commit, push and open the pull request", "timeout": 300000})}}},
		{Text: "Reporting.", ToolCalls: []llmsim.ToolCall{{Name: "automation_complete", Input: json.RawMessage(
			`{"run_id":"{{run_id}}","completion_id":"{{completion_id}}","outcome":"succeeded","summary_markdown":"{{tool_result}}"}`)}}},
		{Text: "Done."},
	}}); err != nil {
		t.Fatal(err)
	}

	// The automation, notifying #runs, and its webhook trigger.
	var auto struct{ ID string }
	call("POST", "/automations", map[string]any{"name": "README fixer"}, 201, &auto)
	call("PATCH", "/automations/"+auto.ID, map[string]any{
		"agent_instructions":                 "Fix the README and open a pull request. [[script:" + script + "]]",
		"default_configuration_id":           w.cfgID,
		"notification_destination_type":      "slack_channel",
		"notification_slack_installation_id": installation,
		"notification_channel_id":            "C0RUNS"}, 200, nil)
	var trig struct {
		ID            string  `json:"id"`
		WebhookURL    *string `json:"webhook_url"`
		WebhookSecret *string `json:"webhook_secret"`
	}
	call("POST", "/automations/"+auto.ID+"/triggers", map[string]any{"trigger_type": "webhook", "provider": "custom",
		"config": map[string]any{}}, 201, &trig)
	p := &pipeline{dev: w.dev, token: w.token, automationID: auto.ID, triggerID: trig.ID, secret: *trig.WebhookSecret,
		webhookURL: "http://" + w.dev.app.IngestAddr() + (*trig.WebhookURL)[len(w.cfg.IngestPublicURL):]}
	if code := p.send(t, []byte(`{"title":"README is wrong"}`)); code != 200 {
		t.Fatalf("ingest answered %d", code)
	}

	// A member watches the run's session over the WebSocket from when it
	// exists (every frame is checked for the secret at the end).
	var runID, sessionID string
	testenv.Eventually(t, 120*time.Second, "the run's session", func() bool {
		_ = pool.QueryRow(ctx, `SELECT id::text, coalesce(session_id::text, '') FROM automation_runs WHERE trigger_id = $1`,
			trig.ID).Scan(&runID, &sessionID)
		return sessionID != ""
	})
	var got frames
	wsCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn, err := client.New(w.gwBase, w.token).Connect(wsCtx, sessionID, client.Handler{OnMessage: got.add})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	var status string
	var summary *string
	testenv.Eventually(t, 300*time.Second, "the agent to finish the run", func() bool {
		_ = pool.QueryRow(ctx, `SELECT status, completion_json->>'summary_markdown' FROM automation_runs WHERE id = $1`, runID).Scan(&status, &summary)
		return status == "succeeded" || status == "failed" || status == "timed_out" || status == "needs_human"
	})
	if status != "succeeded" {
		var reason, msg *string
		_ = pool.QueryRow(ctx, `SELECT status_reason, error_message FROM automation_runs WHERE id = $1`, runID).Scan(&reason, &msg)
		t.Fatalf("run ended %s (%v: %v); summary %q", status, deref(reason), deref(msg), deref(summary))
	}
	out := deref(summary)

	// The agent saw the secret in its environment and in the env file, and
	// the service (which saw it too) through localhost.
	envFile := sandbox.EnvFile{Path: "app/.env.local", Vars: []sandbox.EnvVar{{Key: "E2E_API_TOKEN", Value: secret}}}
	for _, want := range []string{"raw-token=[REDACTED]", "secret-sha=" + sha(secret), "envfile-sha=" + sha(string(envFile.Render())),
		"service: service-ok token-sha=" + sha(secret)} {
		if !strings.Contains(out, want) {
			t.Fatalf("the agent's bash printed %q, want %q", out, want)
		}
	}

	// Exactly one push (of README.md only: the env file is git-excluded)
	// and one pull request.
	pr := w.checkOnePushOnePR(t, out)
	if !strings.Contains(out, pr.URL) || !strings.Contains(out, "exit=0") {
		t.Fatalf("push and pr create printed %q", out)
	}
	if changed := gitOut(t, w.appRepo.Dir, "diff", "--name-only", "main", "agent/fix-readme"); changed != "README.md" {
		t.Fatalf("the pushed branch changes %q", changed)
	}

	// The pull request's URL is in the run's completion, its artifact, the
	// run API and the session API.
	w.checkCompletionLinksPR(t, runID, pr.URL)
	var run struct {
		Status         string `json:"status"`
		CompletionJSON struct {
			PRURLs []string `json:"pr_urls"`
		} `json:"completion_json"`
	}
	if b := call("GET", "/runs/"+runID, nil, 200, &run); run.Status != "succeeded" || !slices.Equal(run.CompletionJSON.PRURLs, []string{pr.URL}) {
		t.Fatalf("GET /runs/%s: %s, want pr_urls [%s]", runID, b, pr.URL)
	}
	var sess struct {
		PRURLs []string `json:"pr_urls"`
	}
	if b := call("GET", "/sessions/"+sessionID, nil, 200, &sess); !slices.Equal(sess.PRURLs, []string{pr.URL}) {
		t.Fatalf("GET /sessions/%s: %s, want pr_urls [%s]", sessionID, b, pr.URL)
	}

	// The Slack notification links the pull request.
	testenv.Eventually(t, 60*time.Second, "the Slack notification", func() bool { return len(sl.Posts()) > 0 })
	if posts := sl.Posts(); len(posts) != 1 || posts[0].Channel != "C0RUNS" || posts[0].Team != team ||
		!strings.Contains(posts[0].Text, pr.URL) || !strings.Contains(posts[0].Text, "succeeded") ||
		!strings.Contains(posts[0].Text, "raw-token=[REDACTED]") || strings.Contains(posts[0].Text, secret) {
		t.Fatalf("Slack posts %+v, want one to C0RUNS linking %s", posts, pr.URL)
	}

	// The secret's value is in no API response, log line or Kafka record.
	call("GET", "/secrets", nil, 200, nil)
	call("GET", "/secret-bundles/"+bundle.ID+"/secrets", nil, 200, nil)
	call("GET", "/configurations/"+w.cfgID, nil, 200, nil)
	call("GET", "/automations/"+auto.ID+"/runs", nil, 200, nil)
	// The session's history (materialized from sessions.transcript) holds
	// the agent's bash output, not the secret.
	testenv.Eventually(t, 60*time.Second, "the session's history to hold the agent's bash output", func() bool {
		status, b := gatewayCall(t, apiBase, "GET", "/sessions/"+sessionID+"/messages?limit=100", w.token, nil)
		if status != 200 {
			t.Fatalf("GET /sessions/%s/messages: %d %s", sessionID, status, b)
		}
		bodies = append(bodies, "GET /sessions/"+sessionID+"/messages: "+b)
		return strings.Contains(b, "secret-sha="+sha(secret)) && strings.Contains(b, pr.URL)
	})
	if status, b := gatewayCall(t, w.gwBase, "GET", "/proliferate/"+sessionID, w.token, nil); status != 200 {
		t.Fatalf("gateway session: %d %s", status, b)
	} else {
		bodies = append(bodies, "gateway GET /proliferate/"+sessionID+": "+b)
	}
	if got.count(protocol.MsgInit) == 0 {
		t.Fatal("no init frame from the run's session")
	}
	// The member saw the agent's bash output streamed (so the frames
	// checked hold what the agent printed).
	streamed := false
	for _, m := range got.all(protocol.MsgToolEnd) {
		streamed = streamed || strings.Contains(string(m.Raw), "secret-sha="+sha(secret))
	}
	if !streamed {
		t.Fatalf("no tool_end frame with the agent's bash output among %d frames", got.count(protocol.MsgToolEnd))
	}
	got.mu.Lock()
	for _, m := range got.list {
		bodies = append(bodies, "WebSocket "+m.Type+": "+string(m.Raw))
	}
	got.mu.Unlock()
	// The org's secret, the configured canaries, the member's password and
	// access token, and the webhook's signing secret: none anywhere.
	canaries["the org's secret"] = secret
	canaries["the member's password"] = gitWorldPassword
	canaries["the member's access token"] = w.token
	canaries["the webhook trigger's secret"] = p.secret // shown once, when the trigger is created
	triggerCreated := "POST /automations/" + auto.ID + "/triggers: "
	for _, b := range bodies {
		for name, v := range canaries {
			shownOnce := v == p.secret && strings.HasPrefix(b, triggerCreated)
			// The agent printed the secret's value (raw-token=): the
			// frames streamed live to a member of the session show what
			// the agent printed, as the agent's own terminal would (the
			// member steers an agent that has the value). Everything that
			// outlives or leaves the session is checked: its history, the
			// run, its notification, the topics, the logs.
			live := v == secret && strings.HasPrefix(b, "WebSocket ")
			if strings.Contains(b, v) && !shownOnce && !live {
				t.Errorf("%s is in an API response: %s", name, b)
			}
		}
	}
	logs := w.logs.String()
	if !strings.Contains(logs, "pull request opened from a sandbox") {
		t.Fatal("the logs were not captured")
	}
	for name, v := range canaries {
		if strings.Contains(logs, v) {
			i := strings.Index(logs, v)
			t.Errorf("%s is in the platform's logs: …%s…", name, logs[max(0, i-200):min(len(logs), i+len(v)+50)])
		}
	}
	records := allRecords(t, w.dev.app.Seeds())
	if len(records) == 0 {
		t.Fatal("no Kafka record read")
	}
	seen, hashSeen := map[string]bool{}, false
	for _, r := range records {
		seen[r.Topic] = true
		// What the agent printed (the hash, in the run's summary) does
		// travel on a topic: the check reads the records that carry it.
		hashSeen = hashSeen || bytes.Contains(r.Value, []byte(sha(secret)))
		for name, v := range canaries {
			leak := bytes.Contains(r.Value, []byte(v)) || bytes.Contains(r.Key, []byte(v))
			for _, h := range r.Headers {
				leak = leak || bytes.Contains(h.Value, []byte(v))
			}
			if leak {
				t.Errorf("%s is in a record of %s (offset %d)", name, r.Topic, r.Offset)
			}
		}
	}
	if !hashSeen {
		t.Errorf("no record of %v carries the agent's output (the secret's hash)", slices.Sorted(maps.Keys(seen)))
	}
	t.Logf("checked %d API responses and WebSocket frames, %d log bytes, %d records of %d topics", len(bodies), len(logs), len(records), len(seen))
}

// allRecords reads every record of every topic of the broker, from the
// start up to the end offsets listed when it is called (no producer of
// the platform is transactional: the last offset of a partition is a
// record).
func allRecords(t *testing.T, seeds []string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	listed, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctx, listed.Names()...)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[int32]kgo.Offset{}
	remaining := map[string]map[int32]int64{} // the last offset still to read
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		if o.Offset == 0 {
			return
		}
		if want[o.Topic] == nil {
			want[o.Topic], remaining[o.Topic] = map[int32]kgo.Offset{}, map[int32]int64{}
		}
		want[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
		remaining[o.Topic][o.Partition] = o.Offset - 1
	})
	if len(want) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(want))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading every topic: still to read %v", remaining)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			if last, ok := remaining[r.Topic][r.Partition]; ok && r.Offset >= last {
				delete(remaining[r.Topic], r.Partition)
				if len(remaining[r.Topic]) == 0 {
					delete(remaining, r.Topic)
				}
			}
		})
	}
	return out
}
