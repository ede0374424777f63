package app_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/consumers/triggerprocessor"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// pipeline is a running dev stack with a signed-up user, an automation and a
// custom webhook trigger created through the API.
type pipeline struct {
	dev          running
	token        string
	webhookURL   string
	secret       string
	triggerID    string
	automationID string
}

func apiCall(t testing.TB, base, method, path, token string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, base+api.Prefix+path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode
}

func startPipeline(t testing.TB) *pipeline {
	t.Helper()
	return startPipelineWith(t)
}

// startPipelineWith is startPipeline with configuration overrides (name,
// value pairs).
func startPipelineWith(t testing.TB, overrides ...string) *pipeline {
	t.Helper()
	cfg := devConfig(t, filepath.Join(t.TempDir(), "kafka"), overrides...)
	p := &pipeline{dev: startDev(t, cfg)}
	base := "http://" + p.dev.app.APIAddr()
	var signup struct {
		AccessToken string `json:"access_token"`
	}
	email := fmt.Sprintf("pipeline-%d@example.com", time.Now().UnixNano())
	if code := apiCall(t, base, "POST", "/auth/signup", "", map[string]any{"email": email, "password": "correct horse battery", "name": "P"}, &signup); code != 201 {
		t.Fatalf("signup %d", code)
	}
	p.token = signup.AccessToken
	var auto struct{ ID string }
	if code := apiCall(t, base, "POST", "/automations", p.token, map[string]any{"name": "Fix bugs"}, &auto); code != 201 {
		t.Fatalf("create automation %d", code)
	}
	p.automationID = auto.ID
	var trig struct {
		ID            string  `json:"id"`
		WebhookURL    *string `json:"webhook_url"`
		WebhookSecret *string `json:"webhook_secret"`
	}
	if code := apiCall(t, base, "POST", "/automations/"+auto.ID+"/triggers", p.token,
		map[string]any{"trigger_type": "webhook", "provider": "custom", "config": map[string]any{}}, &trig); code != 201 || trig.WebhookURL == nil || trig.WebhookSecret == nil {
		t.Fatalf("create trigger %d %+v", code, trig)
	}
	p.triggerID, p.secret = trig.ID, *trig.WebhookSecret
	// The URL names the configured public ingest base; send to where dev listens.
	path := (*trig.WebhookURL)[len(cfg.IngestPublicURL):]
	p.webhookURL = "http://" + p.dev.app.IngestAddr() + path
	return p
}

func (p *pipeline) send(t testing.TB, body []byte) int {
	t.Helper()
	m := hmac.New(sha256.New, []byte(p.secret))
	m.Write(body)
	req, _ := http.NewRequest("POST", p.webhookURL, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Webhook-Signature", "sha256="+hex.EncodeToString(m.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (p *pipeline) runs(t testing.TB) int {
	t.Helper()
	var n int
	if err := p.dev.app.Pool.QueryRow(context.Background(), "SELECT count(*) FROM automation_runs WHERE trigger_id = $1", p.triggerID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A signed webhook goes ingest → webhooks.raw → trigger-processor → a queued
// run in Postgres → runs.lifecycle on Kafka (through the outbox); the same
// delivery again, and a badly signed one, start nothing more.
func TestWebhookBecomesOneQueuedRun(t *testing.T) {
	p := startPipeline(t)
	body := []byte(`{"alert":"disk full","host":"db-1"}`)
	if code := p.send(t, body); code != 200 {
		t.Fatalf("ingest answered %d", code)
	}
	testenv.Eventually(t, 30*time.Second, "the run to be queued", func() bool { return p.runs(t) == 1 })
	if code := p.send(t, body); code != 200 {
		t.Fatalf("redelivery answered %d", code)
	}
	p.secret = "wrong"
	if code := p.send(t, []byte(`{"alert":"other"}`)); code != 401 {
		t.Fatalf("bad signature answered %d", code)
	}
	// The redelivery is consumed (its trigger event deduplicated) before we
	// check nothing more happened: wait for the processor to commit past it.
	var runID string
	if err := p.dev.app.Pool.QueryRow(context.Background(), "SELECT id::text FROM automation_runs WHERE trigger_id = $1", p.triggerID).Scan(&runID); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.dev.app.Seeds()...), kgo.ConsumeTopics(topics.RunsLifecycle, topics.WebhooksRaw),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var lifecycle []string
	raw := 0
	for raw < 2 || !slices.Contains(lifecycle, schemas.RunQueued) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("saw %d raw webhooks and lifecycle %v", raw, lifecycle)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Topic == topics.WebhooksRaw {
				raw++
				return
			}
			ev, err := p.dev.app.Codec.Decode(r.Value)
			if err != nil {
				t.Errorf("undecodable lifecycle record: %v", err)
				return
			}
			if rl := ev.Payload.(*schemas.RunLifecycle); rl.RunID == runID {
				lifecycle = append(lifecycle, rl.ToStatus)
			}
		})
	}
	testenv.Eventually(t, 30*time.Second, "the redelivery to be processed", func() bool {
		var events int
		_ = p.dev.app.Pool.QueryRow(context.Background(), "SELECT count(*) FROM trigger_events WHERE trigger_id = $1", p.triggerID).Scan(&events)
		return events == 1 && committedAll(t, p)
	})
	if n := p.runs(t); n != 1 {
		t.Fatalf("%d runs after a redelivery; want 1", n)
	}
}

// committedAll reports whether the trigger-processor group has committed every
// webhooks.raw record.
func committedAll(t testing.TB, p *pipeline) bool {
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.dev.app.Seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	return groupCaughtUp(t, cl, triggerprocessor.Group.Name, topics.WebhooksRaw)
}
